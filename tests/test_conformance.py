"""Every registered engine against the reference checker, full mask at every step, byte-level vocabulary.

Every registered engine must import (they are all dependencies). An engine refuses a grammar only where
``expected_refusals.EXPECTED_REFUSALS`` says so (e.g. PSC on an ambiguous grammar); any other CompileError
fails. An engine that declares the harness's own language (``profile() == Profile()``) must agree with
the reference exactly; the others may differ only by the documented lexing differences (README "Lexing
differences"), recognised by name, and each listed one must actually occur, so the documentation cannot go
stale silently.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gcdbench.experiments.audit import Auditor
from gcdbench.datasets.base import load_grammar
from gcdbench.datasets.spider import to_spop
from expected_refusals import compile_or_refuse
from gcdbench.parsers.base import GrammarSpec, Profile, allocate_mask, mask_get, mask_to_ids
from gcdbench.parsers.reference import ReferenceChecker
from gcdbench.parsers.registry import ENGINES, engine_class

GRAMMARS = Path(__file__).parent / "grammars"
SAMPLE = Path(__file__).parents[1] / "datasets" / "sample"
CASES = {
    "tiny_sql": ((GRAMMARS / "tiny_sql.lark").read_text(), (GRAMMARS / "tiny_sql.txt").read_text().splitlines()),
    "ambiguous": ((GRAMMARS / "ambiguous.lark").read_text(), (GRAMMARS / "ambiguous.txt").read_text().splitlines()),
    "words": ('start: WORD ("-" WORD)* "."\nWORD: /[a-z]+/\n', ["ab-c.", "x."]),
    "spider": (load_grammar("spider").lark, (SAMPLE / "queries.sql").read_text().splitlines()[:6]),
    "spider_spop": (load_grammar("spider_spop").lark, [to_spop(q) for q in (SAMPLE / "queries.sql").read_text().splitlines()[6:10]]),
}
SLOW_ENGINES = {"reference"}


EXPECTED_TO_OCCUR = {
    ("llguidance", "tiny_sql"): {"trailing_ignore_after_final_sentence"},
    ("llguidance", "spider"): {"longest_match_lexing"},
    ("psc", "spider"): {"standard_lexer"},
    ("xgrammar_lark", "tiny_sql"): {"ascii_only_case_fold"},
}
VARIANTS = {"xgrammar_lark": ("xgrammar", {"grammar_form": "lark"}), "xgrammar_bnf": ("xgrammar", {"grammar_form": "bnf"})}


ENGINE_NAMES = [*VARIANTS, *(n for n in ENGINES if n not in SLOW_ENGINES)]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_masks_equal_reference_at_every_step(name, case, bytes_tokenizer):
    text, samples = CASES[case]
    grammar = GrammarSpec(case, text)
    ref = ReferenceChecker(grammar)
    cls_name, opts = VARIANTS.get(name, (name, {}))
    engine = engine_class(cls_name)(**opts)
    # the harness's own language: exact agreement; otherwise only the documented differences
    auditor = Auditor(grammar, bytes_tokenizer, cls_name if engine.profile() != Profile() else "", opts)
    if not compile_or_refuse(engine, name, case, grammar, bytes_tokenizer):
        return
    tok = bytes_tokenizer
    mask = allocate_mask(tok.vocab_size)
    seen_known = set()
    for sample in samples:
        engine.reset()
        prefix = b""
        for t in tok.encode(sample) + [tok.eos_id]:
            engine.fill_mask(mask)
            got = set(mask_to_ids(mask, tok.vocab_size).tolist())
            want = set(ref.full_mask_ids(ref.advance(ref.initial(), prefix), tok).tolist())
            for tid in got ^ want:
                data = None if tid == tok.eos_id else tok.token_bytes[tid]
                why = [k for k, f in auditor.known.items() if tid in want and f(auditor, prefix, data)]
                assert why, (f"{name} on {case}: after {prefix!r} token {data!r} "
                             f"{'allowed by the engine only' if tid in got else 'allowed by the reference only'}")
                seen_known.update(why)
            assert mask_get(mask, t)
            if t == tok.eos_id:
                break
            assert engine.commit(t)
            prefix += tok.token_bytes[t]
    assert seen_known >= EXPECTED_TO_OCCUR.get((name, case), set()), "a documented difference no longer occurs"
