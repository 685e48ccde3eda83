"""Named rows over a float64 buffer: how the worker writes its measurements into shared memory without positional
tuples. Each layout names columns of a result table of ``experiments/schema.py`` (which checks, when imported,
that every name is declared there with a matching type). This module imports nothing heavy: the worker child
loads it inside the compile's time limit, so pyarrow stays out of it."""
from __future__ import annotations


class RowLayout:
    """The columns a worker writes into a float64 memory map, by name: :meth:`pack` builds a row from keywords
    (no positional tuples at the call sites), :meth:`columns` turns stored rows back into typed columns."""

    def __init__(self, table: str, fields: dict):
        self.table = table
        self.names = tuple(fields)
        self.kinds = tuple(fields.values())   # int, float or bool: the Python type of each stored value
        self.index = {n: i for i, n in enumerate(self.names)}

    @property
    def width(self) -> int:
        return len(self.names)

    def pack(self, **values) -> tuple:
        """One row in this layout's order; every field must be given."""
        return tuple(values[n] for n in self.names)

    def typed(self, row) -> dict:
        return {n: f(v) for n, f, v in zip(self.names, self.kinds, row)}

    def columns(self, rows) -> dict[str, list]:
        """Stored rows (sequences of floats in this order) as ``{name: typed values}``."""
        return {n: [f(r[i]) for r in rows] for i, (n, f) in enumerate(zip(self.names, self.kinds))}


_STEP = {"step": int, "prefix_bytes": int, "mask_us": float, "commit_us": float, "n_allowed": int,
         "oracle_allowed": bool, "jit": int}
#: what the worker measures per mask (steps.parquet less the cell key, outcome and the derived prefix_tokens)
WORKER_STEP = RowLayout("steps", _STEP)
#: batch mode: a sequence's row in the slot journal
WORKER_BATCH_STEP = RowLayout("steps", {**_STEP, "batch_step": int})
#: batch mode: one row per batch step in the step log (batch_steps.parquet less session and run)
WORKER_BATCH_SUMMARY = RowLayout("batch_steps", {"batch_step": int, "size": int, "live": int, "step_us": float,
                                                 "commit_us": float, "fallback": int, "masks": int})
LAYOUTS = (WORKER_STEP, WORKER_BATCH_STEP, WORKER_BATCH_SUMMARY)
