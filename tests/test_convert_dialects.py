"""The Lark -> GBNF (llama.cpp) and Lark -> KBNF (kbnf) converters: syntax each engine's parser accepts, the
ignored text after terminals, the end marker, repetition expansion. (The masks are tested per engine.)"""
from __future__ import annotations

import re

import pytest

from gcdbench.datasets.base import load_grammar
from gcdbench.parsers.base import GrammarSpec
from gcdbench.parsers.convert_dialects import KBNF_ENDS, KBNFRules, _without, lark_to_gbnf, lark_to_kbnf


def test_rule_repetition_is_expanded():
    d = KBNFRules()
    assert d.rep("(x)", 0, None) == "(x)*"
    assert d.rep("(x)", 2, 2) == "(x) (x)"
    assert d.rep("(x)", 1, 3) == "(x) ((x) ((x))?)?"
    assert d.rep("(x)", 2, None) == "(x) (x) (x)*"
    assert _without([(0, 10), (0xFFF0, 0x10FFFF)], KBNF_ENDS) == [(0, 10), (0xFFF0, 0xFFFE), (0x10000, 0x10FFFE)]


def test_converter_writes_one_regex_per_terminal_and_the_end_marker():
    text = lark_to_kbnf(load_grammar("spider"))
    assert text.startswith('start ::= r_start #"\\\\x{10FFFF}";')
    name = next(line for line in text.splitlines() if line.startswith("t_NAME ::="))
    assert name.count('#"') == 1 and name.endswith('*";')   # body then the ignored whitespace, one DFA
    # negated classes leave out both end markers
    string = next(line for line in text.splitlines() if line.startswith("t_STRING ::="))
    assert "[^'\\\\x{FFFF}\\\\x{10FFFF}]" in string or "[^'\\\\x{10FFFF}\\\\x{FFFF}]" in string
    with pytest.raises(ValueError):
        lark_to_kbnf(load_grammar("spider"), end=0x41)


def test_gbnf_names_and_escapes():
    text = lark_to_gbnf(load_grammar("spider"))
    for line in text.splitlines():
        name, _, body = line.partition(" ::= ")
        assert re.fullmatch(r"[a-zA-Z0-9-]+", name), name
        # llama.cpp knows only these escapes
        assert not re.search(r"\\[^xuUtrn\\\"\[\]-]", body), body
    assert "t-STRING ::= " in text and "ws ::= " in text and "root ::= r-start" in text
    assert lark_to_gbnf(GrammarSpec("g", 'start: "a" B\nB: /[\\U00010000-\\U0010FFFF]/\n')).count("\\U00010000") == 1
