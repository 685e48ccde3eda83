"""The seeded grammar fuzzer (``dataset=fuzz``, ``datasets/fuzz.py``): grammars Lark loads, every template in
use, sentences of about the target length that Lark accepts, and the reference checker agreeing with Lark on
mutated sentences."""
from __future__ import annotations

import random
import re

import lark
import pytest

from gcdbench.datasets.base import DataError
from gcdbench.datasets.fuzz import (SEXPR_GRAMMAR, TEMPLATES, generate_grammar, lark_accepts, mutate,
                                    sample_sentence, sample_sentences)
from gcdbench.datasets.registry import load_dataset
from gcdbench.parsers.grammar import load_ir
from gcdbench.parsers.reference import ReferenceChecker


def _lark(text: str) -> lark.Lark:
    return lark.Lark(text, parser="earley", lexer="dynamic_complete")


def _accepts(parser: lark.Lark, text: str) -> bool:
    try:
        parser.parse(text)
        return True
    except lark.exceptions.LarkError:
        return False


def test_generation_is_deterministic_per_seed():
    for seed in (0, 7, 123):
        a, b = generate_grammar.__wrapped__(seed), generate_grammar.__wrapped__(seed)   # bypass the cache
        assert a == b and a.seed == seed and a.start == "start"
        assert sample_sentences(a, (10, 25), seed=1) == sample_sentences(b, (10, 25), seed=1)
    assert generate_grammar(0).lark != generate_grammar(1).lark
    assert sample_sentences(generate_grammar(0), (25,), seed=1) != sample_sentences(generate_grammar(0), (25,), seed=2)


@pytest.mark.parametrize("seed", range(40))
def test_grammars_load_and_are_reduced(seed):
    fg = generate_grammar(seed)
    _lark(fg.lark)
    assert fg.templates and set(fg.templates) <= set(TEMPLATES)
    defined = [re.match(r"\??(\w+)\s*:", ln).group(1) for ln in fg.lark.splitlines() if re.match(r"\??\w+\s*:", ln)]
    rules = {d for d in defined if d[0].islower()}
    assert 3 <= len(rules) <= 15, fg.lark
    ir = load_ir(fg.spec())     # drops unproductive and unreachable rules: none may be missing
    assert rules <= set(ir.nonterminals), (rules - set(ir.nonterminals), fg.lark)
    assert {d for d in defined if d[0].isupper()} <= set(ir.terminals)
    assert not [n for n, t in ir.terminals.items() if re.fullmatch(t.regex, "")], "a terminal matches ''"
    assert bool(ir.ignore) == ("ignore_ws" in fg.templates)


def test_every_template_is_used_across_200_seeds():
    used = {t for seed in range(200) for t in generate_grammar(seed).templates}
    assert used == set(TEMPLATES), set(TEMPLATES) - used


def test_sexpr_grammar_is_seed_minus_one():
    fg = generate_grammar(-1)
    assert fg.lark == SEXPR_GRAMMAR and {"self_follow", "nested", "ignore_ws"} == set(fg.templates)
    parser = _lark(SEXPR_GRAMMAR)
    for text in sample_sentences(fg, (10, 25), seed=0):
        assert _accepts(parser, text) and not text[:1].isspace()
    with pytest.raises(ValueError):
        generate_grammar(-2)


@pytest.mark.parametrize("seed", range(0, 200, 10))
def test_sentences_are_accepted_and_near_their_target_length(seed):
    fg = generate_grammar(seed)
    parser = _lark(fg.lark)
    for target in (10, 25):
        text, count = sample_sentence(fg, target, random.Random(f"t{seed}:{target}"))
        assert abs(count - target) <= 0.3 * target, (count, target, fg.lark)
        assert _accepts(parser, text), (text, fg.lark)
        text.encode("utf-8")     # no surrogates
        assert not text[:1].isspace()


def test_load_fuzz_dataset_through_the_registry():
    ds = load_dataset({"name": "fuzz", "grammar_seed": 3, "lengths": [20, 10]}, data_root=None)
    assert ds.name == "fuzz_3" and ds.grammar.start == "start" and ds.grammar.lark == generate_grammar(3).lark
    assert [s.id for s in ds.samples] == ["g0003-L010-0", "g0003-L020-0"]      # shortest first
    assert ds.meta["templates"] == list(generate_grammar(3).templates) and ds.meta["lark"] == ds.grammar.lark
    for s in ds.samples:
        t = ds.meta["terminals"][s.id]
        assert abs(t["actual"] - t["target"]) <= 0.3 * t["target"]
        assert lark_accepts(generate_grammar(3), s.text)
    again = load_dataset({"name": "fuzz", "grammar_seed": 3, "lengths": [10, 20]}, data_root=None)
    assert [s.text for s in again.samples] == [s.text for s in ds.samples]
    two = load_dataset({"name": "fuzz", "grammar_seed": 5, "lengths": [10], "per_length": 2}, data_root=None)
    assert [s.id for s in two.samples] == ["g0005-L010-0", "g0005-L010-1"]
    assert len(load_dataset({"name": "fuzz", "grammar_seed": 5, "lengths": [10, 12]}, data_root=None, n=1).samples) == 1
    with pytest.raises(DataError, match="grammar_seed"):
        load_dataset({"name": "fuzz", "grammar_sed": 3}, data_root=None)


def test_mutations_leave_the_language_and_the_reference_agrees_with_lark():
    """Lark (``dynamic_complete``) and the reference checker on mutated short sentences: the same verdict,
    except for strings that begin with ignored text (the harness's language forbids it, Lark allows it)."""
    verdicts, bad = [], []
    for seed in range(0, 120, 8):
        fg = generate_grammar(seed)
        ir, ref, rng = load_ir(fg.spec()), ReferenceChecker(fg.spec()), random.Random(seed)
        for text in sample_sentences(fg, (10, 20), seed=seed):
            assert ref.is_sentence(text.encode("utf-8")), (text, fg.lark)
            for _ in range(3):
                m = mutate(text, rng)
                if any(re.match(ir.terminals[t].regex, m) for t in ir.ignore):
                    continue
                want = lark_accepts(fg, m)
                verdicts.append(want)
                if ref.is_sentence(m.encode("utf-8")) != want:
                    bad.append(f"grammar {seed}: {m!r}: Lark {want}")
    assert not bad, bad
    assert 0.2 < verdicts.count(False) / len(verdicts) < 0.9, "mutations should often leave the language"
