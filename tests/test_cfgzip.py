"""cfgzip adapter: offline preprocessing, class-mask expansion, limits, and cfgzip 0.2.0's empty-match bug.

The bug (found here, kept in the engine, caught by the audit): cfgzip turns each run of terminal items
into one regex and builds its byte NFA without the empty match, so a rule like ``ws ::= [ ]*`` loses
``""`` when token classes are computed. A token whose bytes need that rule to match empty is then classed
"invalid everywhere" and masked at every step. Minimal repro: grammar ``root ::= "a" ws "b"`` /
``ws ::= [ ]*``, vocabulary = 256 bytes + ``"ab"`` + EOS, empty prefix: XGrammar alone and the reference
allow ``"ab"`` (``ws`` matches ``""``); cfgzip masks it. XGrammar/the reference are right. Byte-level
vocabularies cannot show it (no token spans two terminals). The ``fix_nullable_terminals`` option
rewrites such runs as ``"" | (run)``, after which cfgzip agrees with the reference.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conformance_check import allowed, disagreements
from expected_refusals import compile_or_refuse
from gcdbench.parsers.base import CompileError, GrammarSpec, allocate_mask, mask_get, mask_to_ids
from gcdbench.parsers.cfgzip_engine import (
    CFGzipEngine,
    check_gbnf_limits,
    escape_parens_in_literals,
    expand_bounded_repetition,
    fix_nullable_terminal_runs,
)
from gcdbench.parsers.tokenizers import Tokenizer

REPO = Path(__file__).resolve().parents[1]
GRAMMARS = Path(__file__).parent / "grammars"
CASES = {
    "tiny_sql": ((GRAMMARS / "tiny_sql.lark").read_text(), (GRAMMARS / "tiny_sql.txt").read_text().splitlines()),
    "ambiguous": ((GRAMMARS / "ambiguous.lark").read_text(), (GRAMMARS / "ambiguous.txt").read_text().splitlines()),
    "words": ('start: WORD ("-" WORD)* "."\nWORD: /[a-z]+/\n', ["ab-c.", "x."]),
    "bounded": ('start: CODE ("," CODE)*\nCODE: /[a-c]{2,4}/ | /x{3}/ | /[0-9]{2,}/ | /"(\\\\u[0-9a-f]{4}|[a-z])*"/\n',
                ["ab,xxx,123", "abcc,99", '"a\\u00e9b",ca']),
}
REPRO_EBNF = 'root ::= "a" ws "b"\nws ::= [ ]*\n'
REPRO_LARK = 'start: "a" "b"\n%ignore " "\n'


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cfgzip_cache")


def make(cache_dir, **opts) -> CFGzipEngine:
    return CFGzipEngine(cache_dir=str(cache_dir), **opts)


def bytes_plus(*extra: bytes) -> Tokenizer:
    """256 single-byte tokens, then ``extra``, then EOS."""
    tb = [bytes([i]) for i in range(256)] + list(extra) + [b""]
    eos = len(tb) - 1
    return Tokenizer(name="bytes+" + "+".join(e.decode() for e in extra), token_bytes=tb, eos_id=eos,
                     special_ids={"<eos>": eos}, _encoder=lambda s: list(s.encode()))


# -- unit: options, text rewrites, limits ---------------------------------------------------------
def test_parens_in_literals_are_escaped_for_cfgzips_reader():
    assert escape_parens_in_literals('t ::= (")") ws [(a] "\\"(" (x)') == 't ::= ("\\x29") ws [\\x28a] "\\"\\x28" (x)'


def test_nullable_terminal_runs_get_an_explicit_empty_alternative():
    text, n = fix_nullable_terminal_runs(REPRO_EBNF)
    assert n == 1
    assert text.splitlines() == ['root ::= "a" ws "b"', "ws ::= nullfix_0", 'nullfix_0 ::= "" | ([ ]*)']
    text, n = fix_nullable_terminal_runs('root ::= "a" [ ]* x | ("c"? y)\nx ::= "x"\ny ::= "y"\n')
    assert n == 1 and 'nullfix_0 ::= "" | ("c"?)' in text and '"a" [ ]* x' in text  # "a" [ ]* is not nullable


@pytest.mark.parametrize("ebnf, why", [
    ('root ::= "a"{2,3} "b"', "{m,n}"),
    ('root ::= x{2}\nx ::= "a"', "{m,n}"),
    ('root ::= "(" root ")" | "x"', "recursively"),
])
def test_format_limits_raise_compile_error(ebnf, why):
    with pytest.raises(CompileError, match=why):
        check_gbnf_limits(ebnf)


def test_bounded_repetition_is_written_out_in_the_same_language():
    text, n = expand_bounded_repetition('root ::= "a"{2,4} x{3} ([0-9] "-"?){1,} | "{2}" [{}]{0,1}\nx ::= "b"\n')
    assert n == 4 and text.splitlines() == [
        'root ::= ("a" "a" ("a" ("a")?)?) (x x x) (([0-9] "-"?) ([0-9] "-"?)*) | "{2}" (([{}])?)', 'x ::= "b"']
    check_gbnf_limits(text)   # nothing left for cfgzip's reader to drop
    assert expand_bounded_repetition('root ::= "a"?{2}')[0] == 'root ::= (("a"?) ("a"?))'
    with pytest.raises(CompileError, match="above 256 copies"):
        expand_bounded_repetition('root ::= [a-z]{1,300}')
    with pytest.raises(CompileError, match="upper bound below lower bound"):
        expand_bounded_repetition('root ::= "a"{3,2}')


def test_braces_inside_literals_are_not_repetition():
    check_gbnf_limits('root ::= "{2,3}" [{}]')


def test_preprocessor_failure_is_a_compile_error(cache_dir, bytes_tokenizer):
    with pytest.raises(CompileError, match="cfgzip-preprocess failed"):
        make(cache_dir).compile_ebnf('root ::= ("a"\n', bytes_tokenizer, grammar_key="malformed")


# -- byte-level vocabulary: the whole pipeline against the reference --------------------------------
@pytest.mark.parametrize("case", sorted(CASES))
def test_bytes_masks_equal_reference(case, cache_dir, bytes_tokenizer):
    text, samples = CASES[case]
    grammar = GrammarSpec(case, text)
    engine = make(cache_dir)
    if not compile_or_refuse(engine, "cfgzip", case, grammar, bytes_tokenizer):
        return
    assert disagreements(engine, grammar, bytes_tokenizer, samples) == []


def test_info_cache_and_refusal(cache_dir, bytes_tokenizer):
    grammar = GrammarSpec("tiny_sql", CASES["tiny_sql"][0])
    first = make(cache_dir, cache=False)
    first.compile(grammar, bytes_tokenizer)
    info = first.info()
    assert info["cache_hit"] is False and info["preprocess_s"] > 0 and info["preprocess_peak_rss_mb"] > 0
    assert 0 < info["n_classes"] <= bytes_tokenizer.vocab_size and info["eos_class"] >= 0
    again = make(cache_dir, cache=True)
    again.compile(grammar, bytes_tokenizer)
    assert again.info()["cache_hit"] is True and again.info()["preprocess_s"] == 0.0
    assert again.info()["preprocess_s_recorded"] == pytest.approx(info["preprocess_s"])
    assert again.info()["n_classes"] == info["n_classes"]
    tok = bytes_tokenizer
    assert not again.commit(ord("x"))          # refused at the start
    again.reset()
    assert not again.commit(tok.eos_id)        # EOS before a sentence
    again.reset()
    assert not mask_get(np.asarray(_mask_of(again, tok)), tok.eos_id)


def _mask_of(engine, tok):
    mask = allocate_mask(tok.vocab_size)
    engine.fill_mask(mask)
    return mask


def test_hf_tokenizer_has_our_ids(cache_dir):
    from gcdbench.parsers.hf_tokenizer import load_from_hf_cache

    tok = bytes_plus(b"ab", b"a b")
    fast = load_from_hf_cache(tok, cache_dir / "hf")
    assert fast.eos_token_id == tok.eos_id
    assert fast.convert_tokens_to_ids(["ab", "aĠb"]) == [256, 257]
    assert tok.decode(fast.encode("xab b")) == b"xab b"


# -- the empty-match bug: minimal repro, detected; the workaround removes it ----------------------------
def test_empty_match_bug_minimal_repro_is_detected(cache_dir):
    import xgrammar as xgr

    from gcdbench.parsers.xgrammar_engine import tokenizer_info

    tok = bytes_plus(b"ab")
    ab = 256
    engine = make(cache_dir)
    engine.compile_ebnf(REPRO_EBNF, tok, grammar_key="repro-ebnf")
    got = allowed(engine, tok)
    # XGrammar alone on the same text (what cfgzip promises to match byte for byte)
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(tokenizer_info(tok)).compile_grammar(REPRO_EBNF))
    buf = xgr.allocate_token_bitmask(1, tok.vocab_size)
    matcher.fill_next_token_bitmask(buf)
    xg = set(mask_to_ids(buf.numpy()[0], tok.vocab_size).tolist())
    assert xg - got == {ab}, "cfgzip should mask exactly 'ab' at the empty prefix (cfgzip 0.2.0 bug)"
    assert got <= xg
    assert not engine._valid[ab]  # classed "invalid in every context" by the preprocessor
    assert not engine.commit(ab)  # and commit refuses it, so a sample whose text needs it ends REJECTED

    # the same through the Lark path (converter inlines `ws ::= (" ")*` after each terminal), vs the reference
    grammar = GrammarSpec("repro", REPRO_LARK)
    engine = make(cache_dir)
    engine.compile(grammar, tok)
    diffs = disagreements(engine, grammar, tok, ["a b"], brute_force=True)
    assert (b"", b"ab", "reference only") in diffs
    assert all(side == "reference only" for _, _, side in diffs)

    fixed = make(cache_dir, fix_nullable_terminals=True)
    fixed.compile(grammar, tok)
    assert fixed.info()["nullable_terminal_runs_fixed"] >= 1
    assert disagreements(fixed, grammar, tok, ["a b", "ab"], brute_force=True) == []


def test_small_multibyte_vocabulary_brute_force(cache_dir):
    tok = bytes_plus(b"select", b" from", b"(*)", b"a,", b" t;")
    grammar = GrammarSpec("tiny_sql", CASES["tiny_sql"][0])
    samples = ["select count(*) from t;", "select a, b from t"]
    engine = make(cache_dir)
    engine.compile(grammar, tok)
    diffs = disagreements(engine, grammar, tok, ["select a from t"], brute_force=True)
    assert all(side == "reference only" for _, _, side in diffs)  # the bug only ever masks, never adds
    assert {d[1] for d in diffs} >= {b"a,"}  # NAME then COMMA with an empty ws between them
    fixed = make(cache_dir, fix_nullable_terminals=True)
    fixed.compile(grammar, tok)
    assert disagreements(fixed, grammar, tok, samples, brute_force=True) == []


# -- Qwen3 ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_qwen3_tiny_sql(cache_dir, qwen3_tokenizer):
    tok = qwen3_tokenizer
    grammar = GrammarSpec("tiny_sql", CASES["tiny_sql"][0])
    samples = ["select a from t", "SELECT a, b FROM t WHERE c = 'x y'", "select count(*) from t;"]
    engine = make(cache_dir)
    engine.compile(grammar, tok)
    assert engine.info()["n_classes"] < 1000
    engine.reset()
    for t in tok.encode("select count"):
        assert engine.commit(t)
    star = tok.encode("(*)")
    assert len(star) == 1 and star[0] not in allowed(engine, tok)  # the bug, on real text
    diffs = disagreements(engine, grammar, tok, samples[:2])
    assert diffs and all(side == "reference only" for _, _, side in diffs)
    fixed = make(cache_dir, fix_nullable_terminals=True)
    fixed.compile(grammar, tok)
    assert disagreements(fixed, grammar, tok, samples) == []


@pytest.mark.slow
def test_qwen3_hf_tokenizer_is_ours(cache_dir, qwen3_tokenizer):
    from gcdbench.parsers.hf_tokenizer import load_from_hf_cache

    tok = qwen3_tokenizer
    fast = load_from_hf_cache(tok, cache_dir / "hf")
    assert fast.eos_token_id == tok.eos_id == fast.convert_tokens_to_ids("<|im_end|>")
    assert fast.convert_tokens_to_ids("<think>") == tok.special_ids["<think>"]
    for text in ["SELECT a, b FROM t WHERE c = 'x y'", "héllo wörld 12345", "  \n\n def f(x):\n\treturn x"]:
        assert fast.encode(text) == tok.encode(text), text
