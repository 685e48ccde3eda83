"""The null engine (issue 66): the harness's own floor. It computes nothing: ``fill_mask`` copies a mask made once at
compile time (every token of the vocabulary allowed, EOS included) into the runner's buffer, and ``commit`` accepts
every token. Its per-mask time is what the harness adds to every engine's mask -- the call through the worker's
timer and a copy of ``ceil(V / 32)`` words (19 KB over Qwen3's vocabulary) -- so an engine whose figures are
within a small factor of it is measured mostly at the harness's floor, not at its own cost.

It implements no language: it allows everything. It is not audited (the runner skips the audit of an engine
class that gives ``audit_skip``, saying why in run.json) and every sample passes by construction; its "pass"
says nothing about correctness."""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from gcdbench.parsers.base import Engine, GrammarSpec, n_mask_words


class NullEngine(Engine):
    """Copies a precomputed all-allowed mask: the floor of every per-mask figure (module docstring)."""

    name = "null_engine"
    plot_style = ("#b0b0b0", ".")   # light grey, in every figure
    #: why the runner does not audit it (read by experiments/runner.py; run.json's audit_error)
    audit_skip: ClassVar[str] = ("the null engine allows every token by design (it measures the harness's floor, "
                                 "not a language): not audited")
    #: the report prints this engine's figures as the harness's floor under Table 1 (experiments/report/stats.py)
    harness_floor: ClassVar[bool] = True

    def version(self) -> str:
        try:
            from importlib.metadata import version

            return f"gcdbench-null-1 (gcdbench {version('gcdbench')})"
        except Exception:   # noqa: BLE001 - metadata unreadable: the format version alone
            return "gcdbench-null-1"

    def compile(self, grammar: GrammarSpec, tokenizer) -> None:
        vocab = int(tokenizer.vocab_size)
        words = np.full(n_mask_words(vocab), -1, dtype=np.int32)   # every bit set ...
        rest = vocab % 32
        if rest:   # ... but the padding bits past the vocabulary
            words[-1] = np.int32(np.uint32((1 << rest) - 1).view(np.int32))
        self._mask = words

    def reset(self) -> None:
        pass

    def fill_mask(self, out: np.ndarray) -> None:
        np.copyto(out, self._mask)

    def commit(self, token_id: int) -> bool:
        return True

    def fork(self) -> "NullEngine":
        twin = type(self)(**self.opts)
        twin._mask = self._mask
        return twin

    def info(self) -> dict:
        return {"mask_words": int(self._mask.size), "what": "copies an all-allowed mask (the harness's floor)"}

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        return "O(V)"   # a copy of ceil(V / 32) words
