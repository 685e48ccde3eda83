"""Re-stored cells: many cells of one results folder kept in a few files, read as if each were its own folder.

``python -m gcdbench.experiments.report.restore <folder>`` (:mod:`.restore`) moves the cells under a folder into
``<folder>/_restored/``: ``cells.parquet`` (one row per cell: its path relative to the folder, its ``run.json``
with a ``restored`` record, the files it had) and one parquet file per kind of row (``cells_samples``,
``cells_audit``, ``cells_sample_steps``, and ``cells_batch_steps``): a cell's rows as declared in
``experiments/schema.py``, each with a ``cell`` column naming its cell first. Per-mask rows are
not kept (unless re-stored with ``--keep-masks``: ``cells_steps``): ``run.json``'s ``restored.mask_summary`` holds
what the report computes from them, ``sample_steps`` the per-sample counts, means and maxima, and
``restored.batch_step_summary`` a batch cell's step statistics.

A cell is found at its old path (``<folder>/<dataset>/<tokenizer>/<config>``), so tables name it as before; a
folder cell at the same path (a cell run again after re-storing) takes its place.
"""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pandas as pd

from gcdbench.experiments import schema

PACK_DIR = "_restored"
CELLS = "cells.parquet"
SAMPLE_STEPS = "sample_steps.parquet"
#: per-mask rows, kept only by ``restore --keep-masks``
STEPS = "steps.parquet"
#: row files kept in a pack, by the name a cell folder gives them
ROW_FILES = ("samples.parquet", "audit.parquet", "batch_steps.parquet", SAMPLE_STEPS, STEPS)


class Pack:
    """One ``_restored`` folder, read once: run records and rows per cell."""

    def __init__(self, root: Path):
        self.root = root
        index = pd.read_parquet(root / PACK_DIR / CELLS)
        self.runs = {c: r for c, r in zip(index["cell"], index["run_json"])}
        self.files = {c: set(json.loads(f)) for c, f in zip(index["cell"], index["files"])}
        self._rows: dict[str, dict[str, pd.DataFrame]] = {}

    def cells(self) -> list[Path]:
        return [self.root / c for c in self.runs]

    def rows(self, name: str) -> dict[str, pd.DataFrame]:
        if name not in self._rows:
            path = self.root / PACK_DIR / pack_file(name)
            by_cell = {}
            if path.exists():
                df = schema.read_rows(path, name.removesuffix(".parquet"))
                for cell, grp in df.groupby("cell", sort=False):
                    by_cell[cell] = grp.drop(columns=["cell"]).reset_index(drop=True)
            self._rows[name] = by_cell
        return self._rows[name]

    def read(self, cell: str, name: str):
        if name == "run.json":
            rec = json.loads(self.runs[cell])
            where = self.root / PACK_DIR / CELLS
            return schema.migrate_run(rec, schema.check_version(f"{where} ({cell})", rec.get("schema_version")))
        if name not in self.files[cell]:
            return None
        got = self.rows(name).get(cell)
        if got is None:   # the cell's file held no rows: the columns of the others
            path = self.root / PACK_DIR / pack_file(name)
            cols = [c for c in pd.read_parquet(path).columns if c != "cell"] if path.exists() else []
            got = pd.DataFrame(columns=cols)
        return got.copy()


@functools.lru_cache(maxsize=32)
def _pack(root: str, mtime_ns: int) -> Pack:
    return Pack(Path(root))


def pack_file(name: str) -> str:
    """The pack's file holding every cell's rows of a cell file ``name`` (``samples.parquet`` ->
    ``cells_samples.parquet``; named apart from a cell's own files)."""
    return f"cells_{name}"


def pack_at(root: Path) -> Pack | None:
    """The pack stored directly under ``root``, or None."""
    index = Path(root) / PACK_DIR / CELLS
    if not index.exists():
        return None
    return _pack(str(Path(root)), index.stat().st_mtime_ns)


def _owner(run_dir: Path) -> tuple[Pack, str] | None:
    run_dir = Path(run_dir)
    for root in run_dir.parents:
        try:
            p = pack_at(root)
        except Exception:   # noqa: BLE001 - a damaged index holds no cell (cells_under warned)
            continue
        if p is not None:
            rel = run_dir.relative_to(root).as_posix()
            if rel in p.runs:
                return p, rel
    return None


def cells_under(root: Path) -> list[Path]:
    """The cells of every pack under ``root`` (at their old paths)."""
    root = Path(root)
    out = []
    for index in sorted(root.rglob(f"{PACK_DIR}/{CELLS}")):
        try:
            p = pack_at(index.parent.parent)
        except Exception as err:   # noqa: BLE001 - a damaged index: its cells are not reported, the others are
            print(f"warning: cannot read {index} ({type(err).__name__}: {str(err)[:160]}): its cells are not "
                  f"reported (restore {PACK_DIR}/ from git, or re-store the folder)", file=sys.stderr)
            continue
        out += p.cells() if p is not None else []
    return out


def holds(run_dir: Path) -> bool:
    """Whether ``run_dir`` is a cell kept in a pack."""
    return _owner(run_dir) is not None


def read(run_dir: Path, name: str):
    """A packed cell's ``run.json`` (dict) or row file (DataFrame; None when the cell had no such file)."""
    p, rel = _owner(run_dir)
    return p.read(rel, name)
