"""parsers/convert.py: each converter's output read back by its engine (or by Python's re) and compared with
the reference checker on sample strings, Unicode classes and case folds included."""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from gcdbench.datasets.base import load_grammar
from gcdbench.datasets.spider import to_spop
from gcdbench.parsers.base import GrammarSpec
from gcdbench.parsers.convert import lark_to_xgrammar_bnf, lark_to_xgrammar_ebnf, regex_with_explicit_classes
from gcdbench.parsers.reference import ReferenceChecker

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "datasets" / "sample"
TEST_GRAMMARS = REPO / "tests" / "grammars"
EXTRA = list(" \t\n\xa0\u1680\u2003\u3000\u2028\x85éſKıİΣσςж中٣३\u0301_.;,()'\"#")


def _lines(p: Path) -> list[str]:
    return [ln for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()]


def _cases():
    q = _lines(SAMPLE / "queries.sql")
    out = {"spider": (load_grammar("spider"), q[:12]), "spider_spop": (load_grammar("spider_spop"), [to_spop(x) for x in q[:12]]),
           "sample_pos": (load_grammar("sample_pos"), _lines(SAMPLE / "pos_sentences.txt")[:12])}
    for p in sorted(TEST_GRAMMARS.glob("*.lark")):
        out[p.stem] = (GrammarSpec(p.stem, p.read_text()), _lines(p.with_suffix(".txt")))
    return out


CASES = _cases()


def _strings(name, samples, n=40):
    rng = random.Random(f"convert:{name}")
    alphabet = sorted(set("".join(samples))) + EXTRA
    out = list(samples)
    for _ in range(n):
        s = list(rng.choice(samples))
        for _ in range(rng.randint(1, 2)):
            i = rng.randrange(len(s) + 1)
            if rng.random() < 0.5:
                s.insert(i, rng.choice(alphabet))
            elif s:
                s[min(i, len(s) - 1)] = rng.choice(alphabet)
        out.append("".join(s))
    return out


@pytest.mark.parametrize("form", ["ebnf", "bnf"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_xgrammar_ebnf_accepts_the_references_sentences(name, form):
    import xgrammar as xgr  # a core dependency: missing, this test fails
    from xgrammar.testing import _is_grammar_accept_string

    grammar, samples = CASES[name]
    text = (lark_to_xgrammar_ebnf if form == "ebnf" else lark_to_xgrammar_bnf)(grammar)
    xg = xgr.Grammar.from_ebnf(text)
    ref = ReferenceChecker(grammar)
    verdicts = set()
    for s in _strings(name, samples):
        want = ref.is_sentence(s.encode())
        verdicts.add(want)
        assert _is_grammar_accept_string(xg, s) == want, (name, form, s)
    assert verdicts == {True, False}


def test_ebnf_writes_unicode_classes_and_folds_explicitly():
    g = GrammarSpec("u", 'start: "in"i WORD\nWORD: /\\w+/\n%ignore /\\s+/\n')
    text = lark_to_xgrammar_ebnf(g)
    assert "\\u0130-\\u0131" in text                        # "in"i: İ and ı, as Python's re folds
    assert "\\u3000" in text and "\\xa0" in text and "\\u1680" in text   # \s is Unicode whitespace
    assert "\\s" not in text and "\\w" not in text           # nothing left to XGrammar's own reading


REGEXES = [r"\s+", r"\w+", r"[^\W\d_]\w*", r"\d+(\.\d+)?", r"#.+", r"'[^']*'", r"(?i:select)", r"(?i:[a-z]+)",
           r"(?i:[^k])", r"[^\s\d]", r"(?s:.)", r"<>|[<>!]=|[=<>]", r"(ab|c)*d", r"x{2,3}", r"(?a:\w+)"]


@pytest.mark.parametrize("regex", REGEXES)
def test_regex_with_explicit_classes_has_the_same_language(regex):
    out = regex_with_explicit_classes("T", regex)
    assert "\\s" not in out and "\\w" not in out and "\\d" not in out and "(?i" not in out
    rng = random.Random(regex)
    alphabet = EXTRA + list("aZkKsS0129<>=!xabcd\n\u212a")
    for s in [rng.choice(alphabet) for _ in range(60)] + ["".join(rng.choice(alphabet) for _ in range(rng.randint(2, 5))) for _ in range(300)] + ["select", "ſELECT", "xx", "xxx", "abcd"]:
        assert (re.fullmatch(out, s) is None) == (re.fullmatch(regex, s) is None), (regex, out, s)


def test_explicit_classes_survive_larks_regex_literals():
    """Written into a .lark file as /.../ and read back by Lark (which decodes \\xHH escapes itself), the
    terminals keep their languages: an escaped '.' must not turn into the any-character dot."""
    from gcdbench.parsers.grammar import load_ir

    text = (TEST_GRAMMARS / "unicode_words.lark").read_text()
    rewritten = re.sub(r"/((?:[^/\\\n]|\\.)+)/", lambda m: "/" + regex_with_explicit_classes("T", m.group(1)) + "/", text)
    old, new = load_ir(GrammarSpec("o", text)), load_ir(GrammarSpec("n", rewritten))
    rng = random.Random(7)
    alphabet = list(" \t\x00\x1c\xa0\u3000.#!?4٣aé(İıK\n")
    for name in ("WORD", "NUM", "NOTE", "END"):
        for _ in range(400):
            s = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4)))
            assert (re.fullmatch(new.terminals[name].regex, s) is None) == (re.fullmatch(old.terminals[name].regex, s) is None), (name, s)


@pytest.mark.parametrize("regex", [r'"(?:[^"\\\x00-\x1f]|\\(?:["\\bfnrt]|u[0-9a-fA-F]{4}))*"', r"(ab|[xy]|c|d)*e",
                                   r"(?:a|bc)+", r"y(?:(?:[0-3]|x9))*"])
def test_starred_mixed_group_is_unrolled_with_the_same_language(regex):
    """A starred group of single characters and longer alternatives is written C* (R C*)* (XGrammar runs a starred
    class fast and a starred group of alternatives slowly): the same strings are accepted."""
    import xgrammar as xgr
    from xgrammar.testing import _is_grammar_accept_string

    text = lark_to_xgrammar_ebnf(GrammarSpec("u", f"start: T\nT: /{regex}/\n"))
    assert re.search(r"\]\* \(\(", text), text
    xg = xgr.Grammar.from_ebnf(text)
    rng = random.Random(regex)
    alphabet = list('"\\/ubfnrtabcdexy0123456789A\x01é')
    strings = ['"a\\u00e9b\\"c"', '"\\uZZ"', "", "e", "abxe", "abab", "bcabc", "y", "yx9012", "yx90x"]
    strings += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for _ in range(400)]
    for s in strings:
        assert _is_grammar_accept_string(xg, s) == (re.fullmatch(regex, s) is not None), (regex, s, text)
