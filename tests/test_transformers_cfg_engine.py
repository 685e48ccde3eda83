"""transformers-cfg adapter (optional extra ``transformers-cfg``): its EBNF from the project's grammar, its own
token-level mask over a byte trie of the harness vocabulary, equal to the reference's on ASCII grammars at every
step (byte vocabulary); its byte path's reading of non-ASCII bytes declared (``token_bytes="latin1"``, which
tests/test_conformance.py checks exactly on the SQL grammars) and what it leaves undeclared (a character a commit
left incomplete) asserted to occur; left recursion refused with a typed reason; options."""
from __future__ import annotations

import pytest

pytest.importorskip("transformers_cfg", reason="transformers-cfg is not installed: pip install -e "
                                               "\".[transformers-cfg]\" (README 'Other engines')")

from conformance_check import allowed, disagreements  # noqa: E402

from gcdbench.parsers.base import CompileError, GrammarSpec, Profile  # noqa: E402
from gcdbench.parsers.reference import ReferenceChecker  # noqa: E402
from gcdbench.parsers.transformers_cfg_engine import TransformersCfgEngine, lark_to_tcfg  # noqa: E402

CASES = {
    "words": ('start: WORD ("-" WORD)* "."\nWORD: /[a-z]+/\n', ["ab-c.", "x."]),
    # ambiguous but right-recursive (no left recursion), with ignored spaces
    "right": ('start: e\ne: X | X e | e_pair\ne_pair: X X e?\nX: /[ab]/\n%ignore " "\n', ["a b a", "ab"]),
    "ignores": ('start: WORD ("," WORD)*\nWORD: /[a-z]+/\nWS: " "\nNL: "\\n"\n%ignore WS\n%ignore NL\n',
                ["ab , c \n ", "x"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_ascii_masks_equal_reference_at_every_step(case, bytes_tokenizer):
    text, samples = CASES[case]
    grammar = GrammarSpec(case, text)
    engine = TransformersCfgEngine()
    engine.compile(grammar, bytes_tokenizer)
    assert engine.info()["mask_path"] == "bytes"
    assert disagreements(engine, grammar, bytes_tokenizer, samples) == []


def test_unicode_path_allows_incomplete_utf8_after_a_sentence(bytes_tokenizer):
    """Its unicode path accepts a token whose bytes decode to no character yet wherever a parse stack is empty
    (the prefix is a sentence): only such non-ASCII bytes differ, and only after sentences."""
    text, samples = CASES["words"]
    grammar = GrammarSpec("words", text)
    engine = TransformersCfgEngine(mask_path="unicode")
    engine.compile(grammar, bytes_tokenizer)
    found = disagreements(engine, grammar, bytes_tokenizer, samples)
    assert found and {side for _, _, side in found} == {"engine only"}
    assert {prefix for prefix, _, _ in found} == {b"ab-c.", b"x."}
    assert all(tok[0] >= 0x80 for _, tok, _ in found)


def test_positive_classes_only():
    text = lark_to_tcfg(GrammarSpec("g", 'start: /[^"]/\n'))
    assert "[^" not in text and "\\U0010FFFF" in text   # the dialect's [^...] stops at U+00FF


def test_byte_path_reads_bytes_as_code_points(bytes_tokenizer):
    """transformers-cfg's byte path checks each byte as a code point: for é (UTF-8 c3 a9) it allows the byte e9
    (U+00E9 read as one byte) and blocks c3; its unicode path decodes UTF-8 and allows c3."""
    grammar = GrammarSpec("g", 'start: "é"\n')
    engine = TransformersCfgEngine()
    engine.compile(grammar, bytes_tokenizer)
    assert allowed(engine, bytes_tokenizer) == {0xE9}
    assert engine.profile() == Profile(token_bytes="latin1")   # declared: the reference reads it the same way
    ref = ReferenceChecker(grammar, engine.profile())
    assert set(ref.full_mask_ids(ref.initial(), bytes_tokenizer).tolist()) == {0xE9}
    # not declared: a commit that leaves a character incomplete is forgotten by the byte path's next mask
    assert engine.commit(0xC3) and allowed(engine, bytes_tokenizer) == {0xE9}
    assert TransformersCfgEngine(mask_path="unicode").profile() == Profile()
    engine = TransformersCfgEngine(mask_path="unicode")
    engine.compile(grammar, bytes_tokenizer)
    assert allowed(engine, bytes_tokenizer) == {0xC3}
    assert engine.commit(0xC3) and engine.commit(0xA9)
    after = allowed(engine, bytes_tokenizer)   # a sentence: EOS, and the incomplete UTF-8 tokens (see above)
    assert bytes_tokenizer.eos_id in after and all(0x80 <= t < 0x100 for t in after - {bytes_tokenizer.eos_id})


@pytest.mark.parametrize("text,cycle", [
    ('start: e\ne: e "+" "a" | "a"\n', "r-e -> "),
    ('start: a\na: b? a "x" | "y"\nb: "z"\n', "r-a -> "),       # through a nullable prefix
])
def test_left_recursion_is_refused(text, cycle, bytes_tokenizer):
    with pytest.raises(CompileError, match=f"left recursion .*{cycle}"):
        TransformersCfgEngine().compile(GrammarSpec("g", text), bytes_tokenizer)


def test_options_and_commit_refusal(bytes_tokenizer):
    with pytest.raises(ValueError, match="mask_path='fast' is not allowed"):
        TransformersCfgEngine(mask_path="fast")
    with pytest.raises(ValueError, match="unknown option"):
        TransformersCfgEngine(device="cuda")
    engine = TransformersCfgEngine(max_cached_masks=1)
    engine.compile(GrammarSpec("g", 'start: "ab" | "ac"\n'), bytes_tokenizer)
    assert allowed(engine, bytes_tokenizer) == {ord("a")}
    assert not engine.commit(ord("x"))
    assert engine.commit(ord("a"))
    assert allowed(engine.fork(), bytes_tokenizer) == {ord("a")}
    assert allowed(engine, bytes_tokenizer) == {ord("b"), ord("c")}
