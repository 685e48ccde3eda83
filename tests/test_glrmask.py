"""GLRMask adapter: grammar forms, masks against the reference (full walk and brute force), EOS, limits,
and the documented lexing differences (each asserted, so the documentation cannot go stale)."""
from __future__ import annotations

from pathlib import Path

import lark
import numpy as np
import pytest

from conformance_check import allowed, disagreements
from gcdbench.parsers.base import CompileError, GrammarSpec
from gcdbench.parsers.glrmask_engine import GLRMaskEngine, lark_to_glrmask_lark
from gcdbench.parsers.reference import ReferenceChecker
from gcdbench.parsers.tokenizers import Tokenizer

REPO = Path(__file__).resolve().parents[1]
GRAMMARS = Path(__file__).parent / "grammars"
CASES = {
    "tiny_sql": ((GRAMMARS / "tiny_sql.lark").read_text(), (GRAMMARS / "tiny_sql.txt").read_text().splitlines()),
    "ambiguous": ((GRAMMARS / "ambiguous.lark").read_text(), (GRAMMARS / "ambiguous.txt").read_text().splitlines()),
    "words": ('start: WORD ("-" WORD)* "."\nWORD: /[a-z]+/\n', ["ab-c.", "x."]),
}
FORMS = ("inline_ignore", "normalized", "lark")


def bytes_plus(*extra: bytes) -> Tokenizer:
    tb = [bytes([i]) for i in range(256)] + list(extra) + [b""]
    eos = len(tb) - 1
    return Tokenizer(name="bytes+" + "+".join(e.decode() for e in extra), token_bytes=tb, eos_id=eos,
                     special_ids={"<eos>": eos}, _encoder=lambda s: list(s.encode()))


def compiled(tok, text, start="start", **opts) -> GLRMaskEngine:
    engine = GLRMaskEngine(**opts)
    engine.compile(GrammarSpec("g", text, start=start), tok)
    return engine


@pytest.mark.parametrize("inline", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_normalized_lark_is_lark_and_same_language(case, inline):
    text = lark_to_glrmask_lark(GrammarSpec(case, CASES[case][0]), inline_ignore=inline)
    parser = lark.Lark(text, parser="earley", lexer="dynamic")
    for sample in CASES[case][1]:
        parser.parse(sample)
    assert ("%ignore" in text) == (not inline and "%ignore" in CASES[case][0])


@pytest.mark.parametrize("case", sorted(CASES))
def test_bytes_inline_ignore_equals_reference(case, bytes_tokenizer):
    text, samples = CASES[case]
    engine = compiled(bytes_tokenizer, text)
    assert disagreements(engine, GrammarSpec(case, text), bytes_tokenizer, samples) == []


@pytest.mark.parametrize("form", ["normalized", "lark"])
@pytest.mark.parametrize("case", ["tiny_sql", "ambiguous"])
def test_bytes_with_ignore_kept_only_leading_whitespace_differs(case, form, bytes_tokenizer):
    text, samples = CASES[case]
    engine = compiled(bytes_tokenizer, text, grammar_form=form)
    diffs = disagreements(engine, GrammarSpec(case, text), bytes_tokenizer, samples)
    assert diffs, "documented: with %ignore kept, GLRMask allows ignored text first"
    assert all(prefix == b"" and side == "engine only" and data.isspace() for prefix, data, side in diffs)


@pytest.mark.parametrize("strategy", ["parser_dwa", "token_trie"])
def test_mask_strategies_agree(strategy, bytes_tokenizer):
    text, samples = CASES["tiny_sql"]
    engine = compiled(bytes_tokenizer, text, mask_strategy=strategy)
    assert disagreements(engine, GrammarSpec("tiny_sql", text), bytes_tokenizer, samples) == []


def test_multibyte_tokens_brute_force():
    tok = bytes_plus(b"select", b" from", b"(*)", b"a,", b" t;", b"ab", b" a")
    text = CASES["tiny_sql"][0]
    engine = compiled(tok, text)
    samples = ["select count(*) from t;", "select a, b from t", "SELECT ab FROM t"]
    assert disagreements(engine, GrammarSpec("tiny_sql", text), tok, samples, brute_force=True) == []


def test_longest_match_lexing_difference_is_real(bytes_tokenizer):
    """Documented: GLRMask lexes with longest match among allowed terminals; the reference is scannerless."""
    text = CASES["tiny_sql"][0]
    ref = ReferenceChecker(GrammarSpec("tiny_sql", text))
    engine = compiled(bytes_tokenizer, text)
    cases = [(b"selectafrom t", False), (b"SELECTcount(*)from t", True), (b"select select from from", True)]
    for sentence, glr in cases:
        engine.reset()
        ok = all(engine.commit(b) for b in sentence) and engine.commit(bytes_tokenizer.eos_id)
        assert ref.is_sentence(sentence) and ok == glr, sentence


def test_eos_and_refusals(bytes_tokenizer):
    tok = bytes_tokenizer
    engine = compiled(tok, CASES["words"][0])
    assert tok.eos_id not in allowed(engine, tok)
    assert not engine.commit(tok.eos_id)
    engine.reset()
    assert not engine.commit(ord("-"))
    engine.reset()
    for b in b"ab.":
        assert engine.commit(b)
    assert tok.eos_id in allowed(engine, tok)
    assert engine.commit(tok.eos_id)
    assert allowed(engine, tok) == set() and not engine.commit(ord("a"))


def test_start_rule_other_than_start(bytes_tokenizer):
    text = 'query: "a" item\nitem: "b" | "c"\n'
    for form in FORMS:
        engine = compiled(bytes_tokenizer, text, start="query", grammar_form=form)
        assert allowed(engine, bytes_tokenizer) == {ord("a")}


def test_templates_and_priorities_need_the_normalized_forms(bytes_tokenizer):
    text = '_sep{x, sep}: x (sep x)*\nstart: _sep{A, ","}\nA.2: /a+/\n'
    with pytest.raises(CompileError, match="glrmask refused"):
        compiled(bytes_tokenizer, text, grammar_form="lark")
    engine = compiled(bytes_tokenizer, text)
    assert disagreements(engine, GrammarSpec("t", text), bytes_tokenizer, ["a,aa,a"]) == []


def test_bad_grammar_and_bad_options(bytes_tokenizer):
    with pytest.raises(CompileError):
        compiled(bytes_tokenizer, 'start: "a" (', grammar_form="lark")
    with pytest.raises(CompileError):
        compiled(bytes_tokenizer, 'start: /a(?=b)/ "b"')  # look-around: no regex translation
    with pytest.raises(ValueError, match="mask_strategy"):
        compiled(bytes_tokenizer, 'start: "a"', mask_strategy="fastest")
    with pytest.raises(ValueError, match="unknown option"):
        GLRMaskEngine(no_such_option=1)


@pytest.mark.slow
def test_qwen3_tiny_sql_equals_reference(qwen3_tokenizer):
    text, samples = CASES["tiny_sql"]
    engine = compiled(qwen3_tokenizer, text)
    info = engine.info()
    assert info["grammar_compile_s"] > 0 and info["process_peak_rss_mb"] > 0
    assert disagreements(engine, GrammarSpec("tiny_sql", text), qwen3_tokenizer, samples[:3]) == []


def test_spider_differences_are_the_declared_profile(bytes_tokenizer):
    """On Spider SQL, GLRMask (default form) differs from the harness's language, and every mask equals the
    reference's under GLRMask's declared profile (``GLRMaskEngine().profile()``), exactly."""
    from gcdbench.experiments.audit import Auditor

    grammar = GrammarSpec("spider", (REPO / "datasets" / "grammars" / "spider.lark").read_text())
    tok = bytes_tokenizer
    engine = compiled(tok, grammar.lark)
    aud = Auditor(grammar, tok, engine.profile())
    samples = ["SELECT count(*) FROM singer WHERE age > 20", "SELECT T1.name FROM people AS T1 ORDER BY T1.id"]
    differs = audit_every_step(engine, aud, tok, samples)
    assert differs, "GLRMask's profile no longer makes a difference on Spider"


def audit_every_step(engine, aud, tok, samples) -> bool:
    """Teacher-force each sample, asserting at every step (EOS included) that the mask equals the reference's
    under the engine's declared profile and allows the next token; True if some step differs from the language."""
    differs = False
    for sample in samples:
        engine.reset()
        prefix = b""
        for t in tok.encode(sample) + [tok.eos_id]:
            got = np.array(sorted(allowed(engine, tok)), dtype=np.int64)
            row = aud.compare(prefix, got)
            assert row["agree_profile"], (prefix, row["false_allow_examples_profile"], row["false_block_examples_profile"])
            differs |= not row["agree_language"]
            assert t in got, (sample, prefix)
            if t == tok.eos_id:
                break
            assert engine.commit(t)
            prefix += tok.token_bytes[t]
    return differs


BACKTRACK = {   # terminals whose DFA can go on past an accepting state without accepting again
    "optional_tail": ('start: A B\nA: /a(bc)?/\nB: /b/\n', ["ab", "abcb"]),
    # Go's statement end (datasets/grammars/go.lark): a line break with the comment lines after it, then
    # indentation that the EOS terminal could still run over (it would need another line break or comment)
    "line_end": ('start: (S EOS)+\nS: /[a-z]+/\nEOS: /(\\n|\\/\\/[^\\n]*)([ \\t]*(\\n|\\/\\/[^\\n]*))*/\n'
                 '%ignore /[ \\t]/\n', ["ab\n\tcd\n", "ab // x\n\t\tcd\n\n", "a\n  // c\n\tb\n"]),
}


@pytest.mark.parametrize("case", sorted(BACKTRACK))
def test_dynamic_lexing_backtracks_as_the_declared_profile_says(case, bytes_tokenizer):
    """Issue 30's Go cells: a piece ends at its terminal's longest *accepting* match even where the terminal's DFA
    could still go on (``A`` = ``a`` before ``b`` with ``A: /a(bc)?/``; Go's EOS before indentation). GLRMask's
    masks equal the reference's under its declared ``lexing="dynamic"`` at every step (the reference refused
    these prefixes while ``dynamic`` let a piece end only where its DFA could not go on)."""
    from gcdbench.experiments.audit import Auditor

    text, samples = BACKTRACK[case]
    grammar, tok = GrammarSpec(case, text), bytes_tokenizer
    engine = compiled(tok, text)
    audit_every_step(engine, Auditor(grammar, tok, engine.profile()), tok, samples)


@pytest.mark.parametrize("form", FORMS)
def test_empty_rules(form, bytes_tokenizer):
    text = 'start: "a" x y "b"\nx:\ny: | "c"\n'
    engine = compiled(bytes_tokenizer, text, grammar_form=form)
    assert disagreements(engine, GrammarSpec("t", text), bytes_tokenizer, ["ab", "acb"], brute_force=True) == []
