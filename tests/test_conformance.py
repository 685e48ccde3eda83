"""Every registered engine against the reference checker, full mask at every step, byte-level vocabulary.

Every engine that is a dependency of the project must import; an optional one (an extra installed by hand) is
skipped with the reason when absent. An engine refuses a grammar only where ``expected_refusals.EXPECTED_REFUSALS``
says so (e.g. PSC on an ambiguous grammar); any other CompileError fails. Every mask must equal the
reference's under the engine's declared profile (``engine.profile()``, README "Lexing differences"), exactly
(the few engines of ``conformance_check.KNOWN_DEFECTS`` and ``APPROXIMATE`` excepted, as listed there); where a profile differs from the harness's language the difference must
actually show on the listed cases, so a declaration cannot go stale silently.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from gcdbench.datasets.base import load_grammar
from gcdbench.datasets.spider import to_spop
from conformance_check import APPROXIMATE, check_masks
from engines_here import engine_params as optional_aware
from expected_refusals import compile_or_refuse
from gcdbench.parsers.base import GrammarSpec
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
EXPECTED_TO_DIFFER = {("llguidance", "tiny_sql"), ("llguidance", "spider"), ("psc", "spider"), ("xgrammar_lark", "tiny_sql"),
                      *((e, c) for e in ("llamacpp", "transformers_cfg") for c in ("tiny_sql", "spider", "spider_spop"))}
VARIANTS = {"xgrammar_lark": ("xgrammar", {"grammar_form": "lark"}), "xgrammar_bnf": ("xgrammar", {"grammar_form": "bnf"})}


def engine_params():
    return [pytest.param(v, id=v) for v in VARIANTS] + optional_aware([n for n in ENGINES if n not in SLOW_ENGINES
                                                                       and not _no_language(n)])


def _no_language(name: str) -> bool:
    """An engine that implements no language (the null engine, the harness's floor: ``audit_skip``)."""
    try:
        return bool(getattr(engine_class(name, runnable=False), "audit_skip", None))
    except ValueError:
        return False


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", engine_params())
def test_masks_equal_reference_at_every_step(name, case, bytes_tokenizer):
    text, samples = CASES[case]
    grammar = GrammarSpec(case, text)
    cls_name, opts = VARIANTS.get(name, (name, {}))
    engine = engine_class(cls_name)(**opts)
    if not compile_or_refuse(engine, name, case, grammar, bytes_tokenizer):
        return
    differs = check_masks(engine, name, case, grammar, bytes_tokenizer, samples)
    if (name, case) in EXPECTED_TO_DIFFER or (name in APPROXIMATE and case != "words"):
        assert differs, f"{name}'s declared profile (or approximation) makes no difference on {case} any more"
