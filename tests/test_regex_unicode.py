"""Terminal automata (parsers/regex_fsm.py) against Python's ``re`` on ``str``, the semantics Lark uses.

Strings are drawn from every Unicode class the grammars' regexes touch: whitespace (ASCII, U+0085, U+00A0,
U+1680, U+2000-U+200A, U+2028/9, U+202F, U+205F, U+3000 and the non-whitespace U+200B/U+FEFF), letters of
several scripts, digits of other scripts, combining marks, ``\\n`` against ``.``, and the case folds (ſ, K the
Kelvin sign, ı, İ, ß, µ, final sigma). Byte automata are checked on UTF-8, including cuts inside a character;
Valiant's and PSC's lexers are checked to read exactly the same languages.
"""
from __future__ import annotations

import itertools
import random
import re

import pytest

from gcdbench.parsers.base import CompileError, GrammarSpec, Profile
from gcdbench.parsers.reference import ReferenceChecker
from gcdbench.parsers.charsets import _ascii_letter_folds, re_set, simple_case_fold
from gcdbench.parsers.regex_fsm import ByteDFA, CharFSM, byte_dfa

WHITESPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) \
    + "\u2028\u2029\u202f\u205f\u3000"
NOT_WHITESPACE = "\u200b\ufeff\u180e"
LETTERS = "aZé\u00ffßſKıİΣσςµΩжЯ中ةअ\u01c5\U00010400"
DIGITS = "09٣३３\U0001D7CE"
OTHER = "²½_·-.#!'\"\u0301\u0903\U0001F600\x00\x7f"
ALPHABET = WHITESPACE + NOT_WHITESPACE + LETTERS + DIGITS + OTHER

REGEXES = [
    r"\s", r"\S", r"\w", r"\W", r"\d", r"\D", r".", r"(?s:.)", r"\s+", r"\w+", r"[^\W\d_]\w*", r"\d+(\.\d+)?",
    r"[^\s\d]+", r"[a-z\s]+", r"[^a-z\s]", r"#.+", r"'[^']*'", r"(?i:select)", r"(?i:in)", r"(?i:kelvin)",
    r"(?i:[a-z]+)", r"(?i:[^k])", r"(?i:ß)", r"(?i:σ)", r"(?i:µ)", r"(?a:\w+)", r"(?i:\w)", r"(?ai:k)",
    r"[A-Za-z_][A-Za-z0-9_]*", r"<>|[<>!]=|[=<>]", r"a|ab", r"(ab|c)*d", r"x{2,3}", r"(x|yz){1,2}?w", r"[é€😀]+",
]


def strings(rng, n, max_len=3):
    out = list(ALPHABET)
    out += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(2, max_len))) for _ in range(n)]
    return out


@pytest.mark.parametrize("regex", REGEXES)
def test_char_and_byte_automata_match_python_re(regex):
    rng = random.Random(regex)
    char = CharFSM("T", regex)
    byte = ByteDFA(char)
    for s in strings(rng, 300) + ["select", "ſelect", "SELECT", "ın", "İN", "\u212aelvin", "xx", "xxx", "ababcd"]:
        want = re.fullmatch(regex, s) is not None
        assert char.fullmatch(s) == want, (regex, s)
        assert byte.fullmatch(s.encode()) == want, (regex, s)


@pytest.mark.parametrize("regex", [r"\s", r"\w", r"\d", r"(?i:s)", r"(?i:i)", r"(?i:k)", r"."])
def test_one_character_classes_equal_re_on_every_code_point_sample(regex):
    """Every 7th code point of the whole range, plus the listed specials: the class is Python's."""
    char = CharFSM("T", regex)
    cps = list(range(0, 0x110000, 7)) + [ord(c) for c in ALPHABET]
    rx = re.compile(regex)
    for cp in cps:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        assert char.fullmatch(ch) == (rx.fullmatch(ch) is not None), (regex, hex(cp))


def test_unicode_classes_are_not_ascii():
    ws = CharFSM("WS", r"\s+")
    assert all(ws.fullmatch(c) for c in WHITESPACE) and not any(ws.fullmatch(c) for c in NOT_WHITESPACE)
    assert CharFSM("W", r"\w+").fullmatch("Straße中文ж") and CharFSM("D", r"\d+").fullmatch("٣३３")
    assert not CharFSM("A", r".").fullmatch("\n") and CharFSM("A", r"(?s:.)").fullmatch("\n")
    kw = CharFSM("IN", "in", ignore_case=True)
    assert all(kw.fullmatch(s) for s in ["in", "IN", "ın", "İn", "İN"])   # Python's re folds these


@pytest.fixture
def fresh_scans(tmp_path, monkeypatch):
    """No scan result from the on-disk cache: every set is computed by running re again."""
    from gcdbench.parsers import charsets

    monkeypatch.setenv("GCDBENCH_CACHE", str(tmp_path))
    for f in (charsets._set_cache, charsets.re_set, charsets._ascii_letter_folds):
        f.cache_clear()
    yield tmp_path
    for f in (charsets._set_cache, charsets.re_set, charsets._ascii_letter_folds):
        f.cache_clear()


def test_scan_results_are_cached_on_disk_and_read_back(fresh_scans):
    from gcdbench.parsers import charsets

    ws = re_set(r"\s", 0)
    assert list((fresh_scans / "python_re").glob("*.json"))
    charsets.re_set.cache_clear()
    charsets._set_cache.cache_clear()
    assert re_set(r"\s", 0) == ws and charsets._set_cache().data   # read back from the file


def test_batched_ascii_letter_folds_equal_one_scan_per_letter(fresh_scans):
    for flags in (re.IGNORECASE, re.IGNORECASE | re.ASCII):
        table = _ascii_letter_folds(flags)
        for cp in list(range(0x41, 0x5B)) + list(range(0x61, 0x7B)):
            assert table[cp] == re_set(re.escape(chr(cp)), flags), (chr(cp), flags)


def test_byte_dfa_cuts_inside_a_character():
    b = ByteDFA(CharFSM("X", "[a-zé€😀]+"))

    def state(data):
        q = b.start
        for c in data:
            q = b.step(q, c) if q >= 0 else -1
        return q

    assert b.fullmatch("aé€😀".encode())
    assert state("é".encode()[:1]) >= 0 and not b.accepting(state("é".encode()[:1]))   # alive, not final
    assert state("è".encode()) < 0                     # same lead byte, another character
    assert state("😀".encode()[:3]) >= 0 and state("😁".encode()[:4]) < 0
    neg = ByteDFA(CharFSM("N", "[^a]"))
    assert neg.fullmatch("\U0010FFFF".encode()) and not neg.fullmatch(b"\xed\xa0\x80")   # no surrogates
    assert not neg.fullmatch(b"\xc0\x80") and not neg.fullmatch(b"\xff")                # no overlong, no FF
    assert ByteDFA(CharFSM("K", "sk", ignore_case=True)).fullmatch("ſ\u212a".encode())   # folds as Python's re


def test_byte_prefix_alive_iff_some_completion_matches():
    """Cut after 1 or 2 bytes of a multi-byte character: alive iff some character with those bytes can go on."""
    for regex in [r"\w+", r"\s+x", r"[^\W\d]+", r"(?i:ſk)"]:
        char = CharFSM("T", regex)
        b = ByteDFA(char)
        for ch in "éжअ中\u3000\u2003ſ\u212a😀":
            data = ch.encode()
            for cut in range(1, len(data)):
                pend = data[:cut]
                q = b.start
                for c in pend:
                    q = b.step(q, c)
                    if q < 0:
                        break
                lo = int.from_bytes(pend.ljust(len(data), b"\x80"), "big")
                completions = [bytes(pend) + bytes(t) for t in itertools.product(range(0x80, 0xC0), repeat=len(data) - cut)]
                alive = any(_valid(c) and char.next(char.start, c.decode()) >= 0 for c in completions)
                assert (q >= 0) == alive, (regex, ch, cut, lo)


def _valid(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_minimal_byte_dfa_has_no_equal_states():
    for regex in [r"\w+", r"'[^']*'", r"(?i:select)", r"\s+"]:
        b = byte_dfa("T", regex)
        rows = {tuple(r) + (a,) for r, a in zip(b.rows, b.accept)}
        assert len(rows) == b.n, regex


def test_unsupported_constructs_are_compile_errors():
    for regex in [r"a(?=b)", r"^a", r"(a)\1", r"(?>ab)", r"a*+"]:
        with pytest.raises(CompileError, match="has no whole-match automaton"):
            CharFSM("T", regex)
    with pytest.raises(CompileError, match="empty string"):
        CharFSM("T", "a*")


# ---------------------------------------------------------------------------------------------------
# Profiles' readings of the same regex
# ---------------------------------------------------------------------------------------------------
def test_simple_case_folding_derivation():
    # CaseFolding.txt: C entries, S entries, and characters with only F (or T) entries
    assert simple_case_fold("K") == "k" and simple_case_fold("\u212a") == "k" and simple_case_fold("ſ") == "s"
    assert simple_case_fold("\u1e9e") == "ß" and simple_case_fold("\u1f88") == "\u1f80"   # S entries
    assert simple_case_fold("ß") == "ß" and simple_case_fold("İ") == "İ" and simple_case_fold("ı") == "ı"
    assert simple_case_fold("µ") == "μ" and simple_case_fold("ς") == "σ" and simple_case_fold("\u0345") == "ι"
    for cp in range(0, 0x110000, 3):
        if not 0xD800 <= cp <= 0xDFFF:
            f = simple_case_fold(chr(cp))
            assert len(f) == 1 and simple_case_fold(f) == f, hex(cp)


def test_simple_folding_through_lower_is_exactly_the_status_s_entries():
    """The characters the derivation maps through ``lower()`` are CaseFolding.txt 14.0's status-S entries."""
    import unicodedata

    if unicodedata.unidata_version != "14.0.0":
        pytest.skip(f"the S list below is Unicode 14.0's; this Python has {unicodedata.unidata_version}")
    s_entries = {0x1E9E, *range(0x1F88, 0x1F90), *range(0x1F98, 0x1FA0), *range(0x1FA8, 0x1FB0), 0x1FBC, 0x1FCC, 0x1FFC}
    via_lower = {cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and len(chr(cp).casefold()) > 1
                 and len(chr(cp).lower()) == 1 and chr(cp).lower() != chr(cp)}
    assert via_lower == s_entries


def test_case_fold_profiles():
    words = ["in", "IN", "ın", "İN", "ſelect", "\u212aelvin"]

    def matches(fold, regex, s):
        return CharFSM("T", regex, True, case_fold=fold).fullmatch(s)

    assert [matches("python_re", "in", w) for w in words[:4]] == [True, True, True, True]
    assert [matches("unicode_simple", "in", w) for w in words[:4]] == [True, True, False, False]
    assert [matches("ascii", "in", w) for w in words[:4]] == [True, True, False, False]
    assert matches("python_re", "select", "ſelect") and matches("unicode_simple", "select", "ſelect")
    assert not matches("ascii", "select", "ſelect") and not matches("ascii", "kelvin", "\u212aelvin")
    assert matches("unicode_simple", "kelvin", "\u212aelvin")
    # negated classes: the folded positive set, complemented
    assert not matches("unicode_simple", "[^k]", "\u212a") and matches("ascii", "[^k]", "\u212a")
    with pytest.raises(ValueError, match="case_fold"):
        CharFSM("T", "a", True, case_fold="turkic")


def test_ascii_regex_classes_profile():
    uni, asc = CharFSM("W", r"\s+"), CharFSM("W", r"\s+", regex_classes="ascii")
    assert uni.fullmatch("\xa0") and not asc.fullmatch("\xa0") and asc.fullmatch(" \t\n\r\x0b\x0c")
    assert not CharFSM("W", r"\w+", regex_classes="ascii").fullmatch("é")
    assert CharFSM("W", r"[^\s]", regex_classes="ascii").fullmatch("\u3000")
    assert CharFSM("D", r"\d", regex_classes="ascii").fullmatch("7") and not CharFSM("D", r"\d", regex_classes="ascii").fullmatch("٣")


# ---------------------------------------------------------------------------------------------------
# Valiant's and PSC's lexers read the same languages as the reference
# ---------------------------------------------------------------------------------------------------
UNICODE_GRAMMAR = 'start: WORD ("," WORD)*\nWORD: /[^\\W\\d_]\\w*/ | "in"i\n%ignore /\\s+/\n'


def test_valiant_lexer_terminals_are_the_shared_byte_dfas():
    from gcdbench.parsers.grammar import load_ir
    from gcdbench.parsers.valiant.lexer import build_lexer

    ir = load_ir(GrammarSpec("u", UNICODE_GRAMMAR))
    lex = build_lexer(ir, [t for t in ir.terminals if t not in ir.ignore])
    rng = random.Random(1)
    for i, name in enumerate(lex.names):
        t = ir.terminals[name]
        for s in strings(rng, 200, 4) + ["in", "İN", "ıN", "Straße"]:
            q = int(lex.start_of[i])
            for c in s.encode():
                q = int(lex.trans[q, c]) if q >= 0 else -1
            got = q >= 0 and bool(lex.accept[q])
            assert got == (re.fullmatch(t.regex, s) is not None), (name, s)


def test_psc_lexer_reads_unicode_whitespace_and_folds():
    """PSC's lexer uses the shared byte DFAs, and its one-byte lookahead is the reference's standard profile:
    a lexeme is not ended by a multi-byte character whose first bytes could still continue it."""
    from gcdbench.parsers.lr.lexer import ByteLexer

    terms = [("WORD", r"[^\W\d_]\w*", False, 0, 0, False), ("IN", "(?i:in)", True, 2, 0, True),
             ("WS", r"\s+", False, 0, 0, False)]
    lx = ByteLexer(terms, ["WS"], leading_ignore=False)
    state, out = lx.lex(0, "ın wörd \u3000İN ".encode())
    assert state >= 0 and out == [1, 0, 1]   # IN (the keyword beats WORD), WORD, IN; ignored text is dropped
    assert lx.lex(0, "\u2003x".encode())[0] < 0       # no leading ignored text
    # U+3000 is E3 80 80; E3 80 85 is a letter, so byte-level maximal munch keeps WORD going and then dies
    assert lx.lex(0, "wörd\u3000x".encode())[0] < 0
    g = GrammarSpec("w", 'start: (WORD | IN)+\nWORD: /[^\\W\\d_]\\w*/\nIN: "in"i\n%ignore /\\s+/\n')
    std, scan = ReferenceChecker(g, Profile(lexing="standard")), ReferenceChecker(g)
    for text in ["ın wörd \u3000İN ", "wörd\u3000x", "a\u00a0b", "a \u00a0b", "in\u2003x"]:
        assert scan.is_sentence(text.encode())
        assert std.is_viable(text.encode()) == (lx.lex(0, text.encode())[0] >= 0), text


def test_reference_accepts_unicode_whitespace_like_lark():
    g = GrammarSpec("sql", 'start: "select"i NAME ";"\nNAME: /\\w+/\n%ignore /\\s+/\n')
    ref = ReferenceChecker(g)
    assert ref.is_sentence("select\u00a0a;".encode()) and ref.is_sentence("SELECT\u3000名前 ;".encode())
    assert ref.is_viable("select\u00a0".encode()[:-1])   # the first byte of U+00A0 can still become it
    asc = ReferenceChecker(g, Profile(regex_classes="ascii"))
    assert not asc.is_viable("select\u00a0".encode()) and asc.is_sentence(b"select a;")


def test_uts18_regex_classes_profile():
    """``regex_classes="uts18"``: the Unicode properties Rust's regex crate (LLGuidance) gives ``\\s \\w \\d``, where
    Python's ``re`` differs: ``\\s`` without U+001C-U+001F, ``\\w`` with combining marks and without ``½ ²``."""
    u = dict(regex_classes="uts18")
    assert CharFSM("S", r"\s").fullmatch("\x1c") and not CharFSM("S", r"\s", **u).fullmatch("\x1c")
    assert all(CharFSM("S", r"\s", **u).fullmatch(c) for c in " \t\n\x85\xa0\u2028\u3000")
    assert CharFSM("N", r"[^\s]", **u).fullmatch("\x1f") and not CharFSM("N", r"[^\s]").fullmatch("\x1f")
    assert CharFSM("W", r"\w+", **u).fullmatch("e\u0301") and not CharFSM("W", r"\w+").fullmatch("e\u0301")
    assert CharFSM("W", r"\w", **u).fullmatch("\u200d")   # Join_Control
    for c in "½²₁¼":
        assert CharFSM("W", r"\w").fullmatch(c) and not CharFSM("W", r"\w", **u).fullmatch(c)
        assert CharFSM("W", r"\W", **u).fullmatch(c)
    assert CharFSM("D", r"\d", **u).fullmatch("٣") and not CharFSM("D", r"\d", **u).fullmatch("²")
    # case folding is applied to the written-out class
    assert CharFSM("W", r"[\s]+", True, case_fold="unicode_simple", **u).fullmatch(" \u3000")
