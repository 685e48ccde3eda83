"""Walking an engine against the reference checker, for tests."""
from __future__ import annotations

from gcdbench.parsers.base import allocate_mask, mask_to_ids
from gcdbench.parsers.reference import ReferenceChecker


def engine_agrees(engine, ref: ReferenceChecker, tok, datas) -> None:
    """``engine``'s mask equals the reference's full mask at every prefix of every byte string in ``datas``, and it
    commits every byte."""
    m = allocate_mask(tok.vocab_size)
    for data in datas:
        engine.reset()
        sid = ref.initial()
        for i in range(len(data) + 1):
            engine.fill_mask(m)
            assert mask_to_ids(m, tok.vocab_size).tolist() == ref.full_mask_ids(sid, tok).tolist(), data[:i]
            if i == len(data):
                break
            assert engine.commit(data[i]), data[:i + 1]
            sid = ref.step(sid, data[i])
