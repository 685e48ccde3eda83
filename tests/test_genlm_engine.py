"""GenLM adapter (optional extra ``genlm``): the byte-level CFG built from the project's grammar, masks equal to
the reference's at every step (byte vocabulary) with both ways of asking GenLM's Earley for the next bytes,
typed refusals, options, commits and forks."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("genlm.grammar", reason="genlm-grammar is not installed: pip install -e \".[genlm]\" "
                                            "(README 'Other engines')")

from conformance_check import allowed, disagreements  # noqa: E402

from gcdbench.parsers.base import CompileError, GrammarSpec  # noqa: E402
from gcdbench.parsers.genlm_engine import GenLMEngine, byte_cfg  # noqa: E402

GRAMMARS = Path(__file__).parent / "grammars"
CASES = {
    "tiny_sql": ((GRAMMARS / "tiny_sql.lark").read_text(), (GRAMMARS / "tiny_sql.txt").read_text().splitlines()[:2]),
    "ambiguous": ((GRAMMARS / "ambiguous.lark").read_text(), (GRAMMARS / "ambiguous.txt").read_text().splitlines()),
    # two ignored terminals, a run of them between terminals and after the last one
    "ignores": ('start: WORD ("," WORD)*\nWORD: /[a-z]+/\nWS: " "\nNL: "\\n"\n%ignore WS\n%ignore NL\n',
                ["ab , c \n ", "x"]),
}


# p_next builds GenLM's prefix grammar (seconds on tiny_sql's Unicode classes): the two small cases check it
@pytest.mark.parametrize("case,next_bytes", [(c, "chart") for c in sorted(CASES)] + [("ambiguous", "p_next"),
                                                                                      ("ignores", "p_next")])
def test_masks_equal_reference_at_every_step(case, next_bytes, bytes_tokenizer):
    text, samples = CASES[case]
    grammar = GrammarSpec(case, text)
    engine = GenLMEngine(next_bytes=next_bytes)
    engine.compile(grammar, bytes_tokenizer)
    assert disagreements(engine, grammar, bytes_tokenizer, samples) == []


def test_byte_cfg_has_byte_terminals_only():
    cfg = byte_cfg(GrammarSpec("g", 'start: "ab" X\nX: /[é]/\n'))
    used = {y for r in cfg for y in r.body if cfg.is_terminal(y)}
    assert used == {ord("a"), ord("b"), 0xC3, 0xA9}


def test_typed_refusal_and_options(bytes_tokenizer):
    with pytest.raises(CompileError, match="derives no string"):
        GenLMEngine().compile(GrammarSpec("g", 'start: a\na: a "x"\n'), bytes_tokenizer)
    with pytest.raises(CompileError, match="malformed grammar"):
        GenLMEngine().compile(GrammarSpec("g", "start: (\n"), bytes_tokenizer)
    with pytest.raises(ValueError, match="next_bytes='fast' is not allowed"):
        GenLMEngine(next_bytes="fast")
    with pytest.raises(ValueError, match="unknown option"):
        GenLMEngine(alg="cky")


def test_commit_refusal_and_fork(bytes_tokenizer):
    engine = GenLMEngine()
    engine.compile(GrammarSpec("g", 'start: "ab" | "ac"\n'), bytes_tokenizer)
    assert allowed(engine, bytes_tokenizer) == {ord("a")}
    assert engine.commit(ord("a"))
    other = engine.fork()
    assert allowed(other, bytes_tokenizer) == {ord("a")}      # a fork starts at the empty prefix
    assert allowed(engine, bytes_tokenizer) == {ord("b"), ord("c")}
    assert not engine.commit(ord("x"))
    engine.reset()
    assert engine.commit(ord("a")) and engine.commit(ord("c"))
    assert allowed(engine, bytes_tokenizer) == {bytes_tokenizer.eos_id}


def test_lark_interface_front_end(bytes_tokenizer):
    """GenLM's own Lark front end: ignored text before the first terminal, one ignored piece per gap and none
    after the last terminal (the profile declares the first; the second is a residual difference)."""
    grammar = GrammarSpec("ambiguous", CASES["ambiguous"][0])
    engine = GenLMEngine(front_end="lark_interface")
    engine.compile(grammar, bytes_tokenizer)
    assert engine.profile().leading_ignore and not engine.profile().trailing_ignore
    assert allowed(engine, bytes_tokenizer) == {ord(c) for c in "abc( "}
    assert engine.commit(ord("a")) and engine.commit(ord(" "))
    assert allowed(engine, bytes_tokenizer) == {ord(c) for c in "abc(+"}   # no second space, no EOS
    with pytest.raises(CompileError, match="start rule 'start' only"):
        GenLMEngine(front_end="lark_interface").compile(GrammarSpec("g", 'top: "a"\n', start="top"),
                                                        bytes_tokenizer)
