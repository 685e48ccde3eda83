"""Lark itself as the oracle of the harness's language (README "The reference checker and the language of a
grammar").

The reference's sentences are those of ``Lark(grammar, parser="earley", lexer="dynamic_complete")`` (every
cut of the text into terminals, not only the longest match per terminal that Lark's default ``dynamic``
lexer takes), minus the strings that begin with ignored text (the documented choice: no engine accepts
leading whitespace). Mutated samples of every shipped grammar and every test grammar (insertions, deletions
and substitutions from an alphabet with Unicode whitespace, letters of several scripts, digits of other
scripts, combining marks and case-fold specials) must get the same verdict from both, with no exception.

The TreeBank grammar (800 lines, highly ambiguous) takes Lark's Earley seconds per character, so for it Lark
parses the grammar restricted to the rules whose terminals occur in the string (exact: a derivation of a
string uses no other terminal), written back as Lark text, on short strings; ``sample_pos`` checks that
this restriction gives Lark's own verdicts.
"""
from __future__ import annotations

import random
import re
from pathlib import Path

import lark
import pytest

from gcdbench.datasets.base import load_grammar
from gcdbench.datasets.spider import to_spop
from gcdbench.parsers.base import GrammarSpec, Profile
from gcdbench.parsers.grammar import GrammarIR, load_ir
from gcdbench.parsers.reference import ReferenceChecker

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "datasets" / "sample"
TEST_GRAMMARS = REPO / "tests" / "grammars"

UNICODE_ALPHABET = (
    " \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u1680\u2000\u2007\u200a\u2028\u2029\u202f\u205f\u3000"   # whitespace
    "\u200b\ufeff"                                    # format characters that are not whitespace
    "éßſKıİΣσςµΩжЯ中文ةअ"                           # letters of several scripts, case-fold specials
    "٣३３²"                                           # digits of other scripts, a superscript
    "\u0301\u0903_·-.#!()"                           # combining marks, punctuation
    "\U0001F600\U00010400"                            # 4-byte UTF-8: an emoji, a Deseret capital letter
)


def _lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]


def _cases() -> dict:
    queries = _lines(SAMPLE / "queries.sql")
    out = {
        "spider": (load_grammar("spider"), queries, 60, None),
        "spider_spop": (load_grammar("spider_spop"), [to_spop(q) for q in queries], 60, None),
        "sample_pos": (load_grammar("sample_pos"), _lines(SAMPLE / "pos_sentences.txt"), 60, None),
    }
    for path in sorted(TEST_GRAMMARS.glob("*.lark")):
        txt = path.with_suffix(".txt")
        out[path.stem] = (GrammarSpec(path.stem, path.read_text()), _lines(txt), 150 if "unicode" in path.stem else 60, None)
    return out


CASES = _cases()


def mutate(rng: random.Random, text: str, alphabet: list[str]) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 3)):
        op, i = rng.random(), rng.randrange(len(chars) + 1)
        if op < 0.4 or not chars:
            chars.insert(i, rng.choice(alphabet))
        elif op < 0.7:
            del chars[min(i, len(chars) - 1)]
        else:
            chars[min(i, len(chars) - 1)] = rng.choice(alphabet)
    return "".join(chars)


def lark_accepts(parser: lark.Lark, text: str) -> bool:
    try:
        parser.parse(text)
        return True
    except lark.exceptions.LarkError:
        return False


def begins_with_ignored(ir: GrammarIR, text: str) -> bool:
    return any(re.match(ir.terminals[t].regex, text) for t in ir.ignore)


def restricted_lark(ir: GrammarIR, text: str) -> tuple[str, str] | None:
    """Lark text of the grammar cut down to the terminals that match somewhere in ``text`` (and the rules
    that use only those), with its start symbol; None when the start symbol derives nothing then."""
    terms = {n for n, t in ir.terminals.items() if re.search(t.regex, text)}
    prod = set(terms)
    changed = True
    while changed:
        changed = False
        for r in ir.rules:
            if r.origin not in prod and all(x in prod for x in r.expansion):
                prod.add(r.origin)
                changed = True
    if ir.start not in prod:
        return None
    tname = {n: f"T{i}" for i, n in enumerate(ir.terminals)}
    rname: dict[str, str] = {}
    by: dict[str, list[str]] = {}
    for r in ir.rules:
        if r.origin in prod and all(x in prod for x in r.expansion):
            alt = " ".join(tname[x] if x in ir.terminals else rname.setdefault(x, f"r{len(rname)}") for x in r.expansion)
            by.setdefault(rname.setdefault(r.origin, f"r{len(rname)}"), []).append(alt)
    lines = [f"{o}: " + " | ".join(alts) for o, alts in by.items()]
    for n, t in ir.terminals.items():
        if n in terms or n in ir.ignore:
            lines.append(f"{tname[n]}: /{t.regex.replace('/', chr(92) + '/')}/")
    lines += [f"%ignore {tname[n]}" for n in ir.ignore]
    return "\n".join(lines) + "\n", rname[ir.start]


def _check(name, grammar, strings, parse, profile: Profile = Profile()) -> list[str]:
    ir = load_ir(grammar)
    ref = ReferenceChecker(grammar, profile)
    bad = []
    n_sentences = 0
    for s in strings:
        want = parse(s) and not begins_with_ignored(ir, s)
        got = ref.is_sentence(s.encode("utf-8"))
        n_sentences += want
        if got != want:
            bad.append(f"{name}: {s!r}: Lark (no leading ignored text) {want}, reference ({profile}) {got}")
    # both verdicts must occur, or the comparison proves little
    assert 0 < n_sentences < len(strings), f"{name}: {n_sentences} of {len(strings)} strings are sentences"
    return bad


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_sentences_are_lark_dynamic_complete(name):
    grammar, samples, n, _ = CASES[name]
    rng = random.Random(f"oracle:{name}")
    alphabet = sorted(set("".join(samples))) + list(UNICODE_ALPHABET)
    strings = samples + [mutate(rng, rng.choice(samples), alphabet) for _ in range(n)]
    if "unicode" in name:   # also text made of the Unicode alphabet alone
        strings += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(n)]
    parser = lark.Lark(grammar.lark, parser="earley", lexer="dynamic_complete", start=grammar.start)
    assert _check(name, grammar, strings, lambda s: lark_accepts(parser, s)) == []


@pytest.mark.parametrize("name", sorted(n for n in CASES if "unicode" not in n))
def test_dynamic_lexing_profile_is_larks_dynamic_lexer(name):
    """``Profile(lexing="dynamic")`` (each terminal takes only its own longest match) is Lark's default
    ``lexer="dynamic"``, minus leading ignored text, on the same kind of strings. Not on ``unicode_words``:
    the profiles' maximal munch looks ahead one *byte*, as the byte-level engines do, Lark one character, and
    with ``\\w`` the first byte of U+00A0 could still continue a word (``word\\xa0next``); on grammars whose
    classes are ASCII the two are the same."""
    grammar, samples, n, _ = CASES[name]
    rng = random.Random(f"oracle-dynamic:{name}")
    alphabet = sorted(set("".join(samples))) + list(UNICODE_ALPHABET)
    strings = samples + [mutate(rng, rng.choice(samples), alphabet) for _ in range(n)]
    parser = lark.Lark(grammar.lark, parser="earley", lexer="dynamic", start=grammar.start)
    assert _check(name, grammar, strings, lambda s: lark_accepts(parser, s), Profile(lexing="dynamic")) == []


def test_restricted_grammar_gives_larks_own_verdicts():
    grammar, samples, _, _ = CASES["sample_pos"]
    ir = load_ir(grammar)
    full = lark.Lark(grammar.lark, parser="earley", lexer="dynamic_complete", start=grammar.start)
    rng = random.Random("restricted")
    alphabet = sorted(set("".join(samples))) + list(" \xa0é")
    strings = samples[:10] + [mutate(rng, rng.choice(samples), alphabet) for _ in range(30)]
    assert sum(map(lambda s: lark_accepts(full, s), strings)) > 5
    for s in strings:
        r = restricted_lark(ir, s)
        restricted = r is not None and lark_accepts(lark.Lark(r[0], parser="earley", lexer="dynamic_complete", start=r[1]), s)
        assert restricted == lark_accepts(full, s), s


@pytest.mark.slow
@pytest.mark.data
def test_treebank_reference_sentences_are_lark_dynamic_complete(data_root):
    from gcdbench.datasets.treebank import load_treebank

    if not (data_root / "treebank").exists():
        pytest.skip(f"no TreeBank data under {data_root}: sample_pos (the embedded POS grammar) is checked instead")
    ds = load_treebank(data_root)
    ir = load_ir(ds.grammar)
    short = sorted((s.text for s in ds.samples), key=len)[:25]
    rng = random.Random("oracle:treebank")
    alphabet = sorted(set("".join(short))) + list(" \xa0\u2003éſ")
    strings = short[:8] + [m for m in (mutate(rng, rng.choice(short), alphabet) for _ in range(40)) if len(m) <= 24][:16]

    def parse(s):
        r = restricted_lark(ir, s)
        return r is not None and lark_accepts(lark.Lark(r[0], parser="earley", lexer="dynamic_complete", start=r[1]), s)

    assert _check("treebank", ds.grammar, strings, parse) == []
