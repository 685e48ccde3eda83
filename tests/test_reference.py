"""The reference checker against brute force: Lark's scannerless Earley decides sentences independently."""
from __future__ import annotations

import itertools

import lark
import pytest

from gcdbench.parsers.base import CompileError, GrammarSpec, Profile, mask_to_ids
from gcdbench.parsers.reference import DEAD, ReferenceChecker

GRAMMARS = {
    # ambiguous and left-recursive, with an ignored space
    "ambiguous": ('start: e\ne: e "+" e | e e | "(" e ")" | ATOM\nATOM: /[ab]/\n%ignore " "\n', "ab+() "),
    # keywords that a NAME regex also matches; optional parts; nullable rule
    "keywords": ('start: "ab"i NAME x\nx: "+" NAME | \nNAME: /[ab]+/\n%ignore " "\n', "abAB+ "),
    # terminals that are prefixes of each other, as POS tags are (NN, NNS)
    "prefixes": ('start: t+\nt: NN | NNS | S\nNN: "nn"\nNNS: "nns"\nS: "s"\n%ignore " "\n', "ns "),
}


def brute_sentences(text: str, alphabet: str, max_len: int) -> set[str]:
    """All strings up to max_len that Lark's scannerless Earley accepts (leading ignored text excluded)."""
    parser = lark.Lark(text, parser="earley", lexer="dynamic_complete")
    out = set()
    for n in range(max_len + 1):
        for chars in itertools.product(alphabet, repeat=n):
            s = "".join(chars)
            if s[:1] == " ":
                continue
            try:
                parser.parse(s)
                out.add(s)
            except lark.exceptions.LarkError:
                pass
    return out


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_sentences_and_prefixes_match_brute_force(name):
    text, alphabet = GRAMMARS[name]
    ref = ReferenceChecker(GrammarSpec(name, text))
    max_len = 6
    sentences = brute_sentences(text, alphabet, max_len)
    assert sentences, "the brute force must find sentences, or the test proves nothing"
    for n in range(max_len + 1):
        for chars in itertools.product(alphabet, repeat=n):
            s = "".join(chars)
            assert ref.is_sentence(s.encode()) == (s in sentences), s
            if n <= 2:   # every viable prefix this short has a completion within max_len in these grammars
                brute_viable = any(x.startswith(s) for x in sentences)
                assert ref.is_viable(s.encode()) == brute_viable, s


def test_full_mask_equals_per_token_check(bytes_tokenizer):
    text, _ = GRAMMARS["ambiguous"]
    ref = ReferenceChecker(GrammarSpec("a", text))
    for prefix in [b"", b"a", b"a+", b"(a b", b"(a)"]:
        ids = set(mask_to_ids(ref.full_mask(prefix, bytes_tokenizer), bytes_tokenizer.vocab_size).tolist())
        one_by_one = ref.allowed_tokens(prefix, range(bytes_tokenizer.vocab_size), bytes_tokenizer)
        assert ids == one_by_one, prefix


def test_utf8_split_inside_a_character():
    ref = ReferenceChecker(GrammarSpec("s", "start: STRING\nSTRING: /'[^']*'/\n"))
    e_acute = "é".encode()            # two bytes
    assert ref.is_viable(b"'" + e_acute[:1])           # may still become é
    assert ref.is_sentence(b"'" + e_acute + b"'")
    assert not ref.is_viable(b"'\xff")                 # never valid UTF-8
    assert not ref.is_viable(b"'\xc3\x28")             # bad continuation byte
    ascii_only = ReferenceChecker(GrammarSpec("n", "start: NAME\nNAME: /[a-z]+/\n"))
    assert not ascii_only.is_viable(e_acute[:1])       # no completion of that lead byte is a letter a-z


def test_no_leading_ignored_text_but_trailing_is_fine():
    ref = ReferenceChecker(GrammarSpec("w", 'start: "a" "b"\n%ignore " "\n'))
    assert not ref.is_viable(b" a")
    assert ref.is_sentence(b"a b  ")
    assert ref.is_sentence(b"ab")


def test_dead_state_is_sticky_and_eos_only_on_sentences(bytes_tokenizer):
    ref = ReferenceChecker(GrammarSpec("w", 'start: "ab"\n'))
    s = ref.advance(ref.initial(), b"x")
    assert s == DEAD and ref.advance(s, b"ab") == DEAD
    assert bytes_tokenizer.eos_id in ref.allowed_tokens(b"ab", [bytes_tokenizer.eos_id], bytes_tokenizer)
    assert not ref.allowed_tokens(b"a", [bytes_tokenizer.eos_id], bytes_tokenizer)


def test_malformed_grammar_is_a_compile_error():
    with pytest.raises(CompileError, match="not defined"):
        ReferenceChecker(GrammarSpec("bad", "start: a\n"))


def test_longest_match_lexing_forbids_cuts_inside_a_longer_match():
    g = GrammarSpec("kw", 'start: "select"i NAME "from"i NAME\nNAME: /[a-z]+/\n%ignore " "\n')
    scan = ReferenceChecker(g)
    longest = ReferenceChecker(g, Profile(lexing="longest_match"))
    # only the keyword is allowed first, so nothing rivals it: both read SELECT + NAME
    assert scan.is_viable(b"selectname") and longest.is_viable(b"selectname")
    # after a NAME, "fromt" could be FROM + NAME only by cutting where NAME could go on
    assert scan.is_sentence(b"select afrom t") and not longest.is_viable(b"select afrom t")
    assert longest.is_sentence(b"select a from t")
    with pytest.raises(ValueError, match="lexing"):
        ReferenceChecker(g, Profile(lexing="greedy"))


def test_standard_lexing_reserves_keywords_and_ignores_context():
    g = GrammarSpec("kw", 'start: "select"i NAME "from"i NAME\nNAME: /[a-z0-9]+/\n%ignore " "\n')
    std = ReferenceChecker(g, Profile(lexing="standard"))
    # all terminals compete: "select0" is one NAME, so the query cannot start
    assert not std.is_viable(b"select0") and ReferenceChecker(g, Profile(lexing="longest_match")).is_viable(b"select0")
    # a keyword is never a NAME, even where only NAME fits
    assert not std.is_viable(b"select from from") and ReferenceChecker(g).is_sentence(b"select from from t")
    assert std.is_sentence(b"select a from t") and std.is_viable(b"select fr")
