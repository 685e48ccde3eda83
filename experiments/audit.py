"""Audit: compare an engine's mask with the reference checker's on sampled steps.

The comparison is over the whole vocabulary (the reference walks it as a lazily built DFA), which covers
what the audit must check: the oracle token, every token the engine allows, and all the rest.
"""
from __future__ import annotations

import functools

import numpy as np

from gcdbench.parsers.base import mask_to_ids
from gcdbench.parsers.reference import DEAD, ReferenceChecker

MAX_EXAMPLES = 5


@functools.lru_cache(maxsize=8)
def _checker(grammar):
    return ReferenceChecker(grammar)


class Auditor:
    def __init__(self, grammar, tokenizer):
        self.ref = _checker(grammar)
        self.tok = tokenizer

    def reference_ids(self, prefix: bytes) -> np.ndarray:
        sid = self.ref.advance(self.ref.initial(), prefix)
        return np.array([], dtype=np.int64) if sid == DEAD else self.ref.full_mask_ids(sid, self.tok)

    def check(self, text: str, ids: list[int], audited: dict) -> list[dict]:
        rows = []
        for step in sorted(audited):
            prefix = self.tok.decode(ids[:step])
            got = mask_to_ids(np.asarray(audited[step], dtype=np.int32), self.tok.vocab_size)
            want = self.reference_ids(prefix)
            extra = np.setdiff1d(got, want, assume_unique=True)
            missing = np.setdiff1d(want, got, assume_unique=True)
            rows.append({
                "step": int(step), "prefix": prefix.decode("utf-8", "replace")[-200:],
                "n_engine": int(got.size), "n_reference": int(want.size),
                "n_false_allow": int(extra.size), "n_false_block": int(missing.size),
                "agree": bool(extra.size == 0 and missing.size == 0),
                "false_allow_examples": [self._show(t) for t in extra[:MAX_EXAMPLES]],
                "false_block_examples": [self._show(t) for t in missing[:MAX_EXAMPLES]],
            })
        return rows

    def _show(self, t) -> str:
        t = int(t)
        if t == self.tok.eos_id:
            return "<EOS>"
        return repr(self.tok.token_bytes[t])[2:-1] or f"<special {t}>"
