"""Every registered engine against the reference checker, full mask at every step, byte-level vocabulary.

Engines whose module does not import here are skipped with the reason; an engine that refuses a grammar
(CompileError, e.g. PSC on an ambiguous grammar) is skipped for that grammar with its reason. Documented
Every mask must equal the reference's under the engine's declared profile (``engine.profile()``, README
"Lexing differences"), exactly; where a profile differs from the harness's language the difference must
actually show on the listed cases, so a declaration cannot go stale silently.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gcdbench.experiments.audit import Auditor
from gcdbench.datasets.base import load_grammar
from gcdbench.datasets.spider import to_spop
from gcdbench.parsers.base import CompileError, GrammarSpec, allocate_mask, mask_get, mask_to_ids
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


# (engine, case) where the declared profile must make a visible difference from the harness's language
EXPECTED_TO_DIFFER = {("llguidance", "tiny_sql"), ("llguidance", "spider"), ("psc", "spider"), ("xgrammar_lark", "tiny_sql")}
VARIANTS = {"xgrammar_lark": ("xgrammar", {"grammar_form": "lark"}), "xgrammar_bnf": ("xgrammar", {"grammar_form": "bnf"})}


def engine_params():
    out = [pytest.param(v, id=v) for v in VARIANTS]
    for name in ENGINES:
        if name in SLOW_ENGINES:
            continue
        try:
            engine_class(name)
            out.append(pytest.param(name, id=name))
        except ValueError as err:
            out.append(pytest.param(name, id=name, marks=pytest.mark.skip(reason=f"engine not importable: {err}")))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", engine_params())
def test_masks_equal_reference_at_every_step(name, case, bytes_tokenizer):
    text, samples = CASES[case]
    grammar = GrammarSpec(case, text)
    cls_name, opts = VARIANTS.get(name, (name, {}))
    engine = engine_class(cls_name)(**opts)
    auditor = Auditor(grammar, bytes_tokenizer, engine.profile())
    try:
        engine.compile(grammar, bytes_tokenizer)
    except CompileError as err:
        pytest.skip(f"{name} refuses {case}: {err}")
    tok = bytes_tokenizer
    mask = allocate_mask(tok.vocab_size)
    differs = False
    for sample in samples:
        engine.reset()
        prefix = b""
        for t in tok.encode(sample) + [tok.eos_id]:
            engine.fill_mask(mask)
            row = auditor.compare(prefix, mask_to_ids(mask, tok.vocab_size))
            assert row["agree_profile"], (
                f"{name} on {case} ({row['profile']}): after {prefix!r} allowed by the engine only "
                f"{row['false_allow_examples_profile']}, by the reference only {row['false_block_examples_profile']}")
            differs |= not row["agree_language"]
            assert mask_get(mask, t)
            if t == tok.eos_id:
                break
            assert engine.commit(t)
            prefix += tok.token_bytes[t]
    if (name, case) in EXPECTED_TO_DIFFER:
        assert differs, f"{name}'s declared profile makes no difference on {case} any more"
