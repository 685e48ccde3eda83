"""Character sets with Python ``re``'s exact semantics (and the other profiles' readings: Unicode simple case
folding, ASCII classes, UTS #18 properties): the sets a one-character construct of a terminal regex matches, as
code point ranges, scanned from ``re`` itself and cached on disk. ``regex_fsm`` builds automata over them."""
from __future__ import annotations

import bisect
import functools
import re

import numpy as np

try:  # Python >= 3.11
    import re._constants as sre_c
except ImportError:  # pragma: no cover
    import sre_constants as sre_c  # type: ignore

#: version of what the automata built here mean; part of the keys of compiled artifacts cached on disk
#: (Valiant, PSC), so a change of regex semantics never reuses an artifact built under the old one
SEMANTICS = "python-re-1"
CASE_FOLDS = ("python_re", "unicode_simple", "ascii")
REGEX_CLASSES = ("unicode", "ascii", "uts18")
MAX_NFA_STATES = 200_000
UNIVERSE = ((0, 0xD7FF), (0xE000, 0x10FFFF))   # Unicode scalar values: what UTF-8 can encode
CHAR_FLAGS = re.IGNORECASE | re.DOTALL | re.ASCII   # the flags that change what a one-character construct matches


# --------------------------------------------------------------------------------------------------
# UTF-8 facts
# --------------------------------------------------------------------------------------------------
#: what a regex construct without a whole-match automaton is, in a user's words (``re._parser`` op names)
_NO_AUTOMATON = {
    "AT": "an anchor or word boundary (^ $ \\A \\Z \\b \\B)",
    "ASSERT": "a lookahead or lookbehind",
    "ASSERT_NOT": "a negative lookahead or lookbehind",
    "GROUPREF": "a back-reference",
    "GROUPREF_EXISTS": "a conditional group (?(id)...)",
    "ATOMIC_GROUP": "an atomic group (?>...)",
    "POSSESSIVE_REPEAT": "a possessive repeat (*+ ++ ?+)",
}


def construct_name(op) -> str:
    """A regex construct no engine here reads as a language (a zero-width or context-dependent one), named for
    the user: ``construct_name(AT)`` is 'an anchor or word boundary (^ $ \\A \\Z \\b \\B)'."""
    return _NO_AUTOMATON.get(str(op), f"construct {op}")


def utf8_len(lead: int) -> int:
    """Length of the UTF-8 sequence a lead byte starts (0: not a lead byte)."""
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def utf8_second_range(lead: int) -> tuple[int, int]:
    """Valid second bytes after ``lead`` (no overlong forms, no surrogates, nothing past U+10FFFF)."""
    return {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(lead, (0x80, 0xBF))


def codepoint_range(pending: bytes) -> tuple[int, int]:
    """Code points whose UTF-8 encoding starts with the (valid, incomplete or complete) byte string ``pending``."""
    n = utf8_len(pending[0])
    cp = pending[0] & {2: 0x1F, 3: 0x0F, 4: 0x07}[n]
    for b in pending[1:]:
        cp = (cp << 6) | (b & 0x3F)
    free = 6 * (n - len(pending))
    lo, hi = cp << free, (cp << free) | ((1 << free) - 1)
    lo, hi = max(lo, {2: 0x80, 3: 0x800, 4: 0x10000}[n]), min(hi, 0x10FFFF)
    if pending[0] == 0xED:   # ED A0..BF would be surrogates
        hi = min(hi, 0xD7FF)
    return lo, hi


# --------------------------------------------------------------------------------------------------
# Code point sets: tuples of sorted, disjoint, non-adjacent (lo, hi) ranges, surrogates excluded
# --------------------------------------------------------------------------------------------------
def _normalize(ranges) -> tuple:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), hi)):   # cut out the surrogates
            if a > b:
                continue
            if out and a <= out[-1][1] + 1:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
    return tuple((a, b) for a, b in out)


def union(range_sets) -> tuple:
    """The union of several code point range tuples, normalized."""
    return _normalize([r for rs in range_sets for r in rs])


def complement(ranges) -> tuple:
    out, nxt = [], 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= 0x10FFFF:
        out.append((nxt, 0x10FFFF))
    return _normalize(out)


def _contains(ranges, cp: int) -> bool:
    i = bisect.bisect_right(ranges, (cp, 0x110000)) - 1
    return i >= 0 and ranges[i][0] <= cp <= ranges[i][1]


@functools.lru_cache(maxsize=1)
def _all_chars() -> str:
    """Every Unicode scalar value once, in order (index i is code point i, or i + 0x800 past the surrogates)."""
    cps = np.concatenate([np.arange(0xD800), np.arange(0xE000, 0x110000)]).astype("<u4")
    return cps.tobytes().decode("utf-32-le")


def _cp_at(index: int) -> int:
    return index if index < 0xD800 else index + 0x800


class _SetCache:
    """Results of the scans below, kept on disk per Python build (``$GCDBENCH_CACHE`` or ``~/.cache/gcdbench``,
    ``python_re/<hash of sys.version and the Unicode version>.json``): they are facts about this Python's
    ``re`` and tables, so a new process need not scan 1.1 million code points again (30-100 ms a scan)."""

    def __init__(self):
        import hashlib
        import sys
        import unicodedata

        key = hashlib.sha256(f"{sys.version}|{unicodedata.unidata_version}|1".encode()).hexdigest()[:16]
        from gcdbench.parsers.base import cache_root

        root = cache_root()
        self.path = root / "python_re" / f"{key}.json"
        try:
            import json

            self.data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.data = {}

    def get(self, key: str, compute):
        got = self.data.get(key)
        if got is None:
            got = self.data[key] = compute()
            self._save()
        return got

    def _save(self):
        import json
        import os
        import tempfile

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(self.data, f)
            os.replace(tmp, self.path)   # atomic: concurrent processes never see half a file
        except OSError:
            pass                         # read-only home: compute again next time


@functools.lru_cache(maxsize=1)
def _set_cache() -> _SetCache:
    return _SetCache()


def _runs(rx) -> tuple:
    """The code points a compiled ``(?:X)+`` matches, from its maximal runs over every code point (``re`` or
    ``regex``)."""
    return _normalize((_cp_at(m.start()), _cp_at(m.end() - 1)) for m in rx.finditer(_all_chars()))


@functools.lru_cache(maxsize=None)
def re_set(pattern: str, flags: int) -> tuple:
    """The code points Python's ``re`` matches with the one-character ``pattern`` under ``flags``: exact,
    since it is ``re`` itself run over every code point (maximal runs of ``(?:pattern)+`` are the ranges)."""
    def scan():
        return _runs(re.compile(f"(?:{pattern})+", _re_flags(flags)))

    return tuple(map(tuple, _set_cache().get(f"set|{_re_flags(flags)}|{pattern}", scan)))


#: ``\s \w \d`` as UTS #18 Annex C properties (Rust's ``regex`` crate), in the ``regex``
#: package's syntax
_UTS18_SRC = {
    r"\d": r"\p{Nd}", r"\s": r"\p{White_Space}", r"\w": r"[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]",
}


#: the Unicode version of the ``uts18`` tables: LLGuidance 1.9's Rust ``regex`` tables (a code point assigned later,
#: e.g. U+0558 in 17.0, is in no property there); ``unicodedata2`` of this version says which code points exist
UTS18_UNICODE = "16.0.0"


@functools.lru_cache(maxsize=1)
def _assigned_uts18() -> tuple:
    """The code points assigned in Unicode :data:`UTS18_UNICODE` (general category other than ``Cn``)."""
    import unicodedata2

    if unicodedata2.unidata_version != UTS18_UNICODE:
        raise RuntimeError(f"regex_classes=uts18 needs unicodedata2=={UTS18_UNICODE} (Unicode {UTS18_UNICODE}); "
                           f"found Unicode {unicodedata2.unidata_version}: pip install unicodedata2=={UTS18_UNICODE}")

    def scan():
        chars = _all_chars()
        return _normalize((_cp_at(i), _cp_at(i)) for i, ch in enumerate(chars) if unicodedata2.category(ch) != "Cn")

    return tuple(map(tuple, _set_cache().get(f"assigned|{UTS18_UNICODE}", scan)))


def _intersect(a: tuple, b: tuple) -> tuple:
    return complement(_normalize(list(complement(a)) + list(complement(b))))


@functools.lru_cache(maxsize=None)
def uts18_set(category: str) -> tuple:
    """The code points of ``category`` (``\\s``, ``\\W``, ...) under ``regex_classes="uts18"``: the ``regex``
    package's Unicode property tables run over every code point, limited to the code points assigned in Unicode
    :data:`UTS18_UNICODE` (a negated class is the complement of that: unassigned code points are in ``\\W``)."""
    import regex

    negated = category in (r"\D", r"\S", r"\W")
    pattern = _UTS18_SRC[category.lower() if negated else category]

    def scan():
        return _intersect(_runs(regex.compile(f"(?:{pattern})+", regex.V0)), _assigned_uts18())

    positive = tuple(map(tuple, _set_cache().get(f"uts18|{UTS18_UNICODE}|{regex.__version__}|{pattern}", scan)))
    return _intersect(complement(positive), UNIVERSE) if negated else positive


def _re_flags(flags: int) -> int:
    return flags & CHAR_FLAGS


def _esc(cp: int) -> str:
    return "\\U%08x" % cp


@functools.lru_cache(maxsize=4)
def _ascii_letter_folds(flags: int) -> dict[int, tuple]:
    """Python re's case-insensitive set of every ASCII letter, from one scan: ``[A-Za-z]`` under the same
    flags matches exactly the union of the letters' sets (re builds a class from its members' lowercase
    forms, as it does a literal), and each candidate is then attributed with ``re.fullmatch``."""
    cands = _set_cache().get(f"letters|{_re_flags(flags)}", lambda: [
        _cp_at(m.start()) for m in re.finditer("[A-Za-z]", _all_chars(), _re_flags(flags))])
    out = {}
    for cp in list(range(0x41, 0x5B)) + list(range(0x61, 0x7B)):
        rx = re.compile(_esc(cp), _re_flags(flags))
        out[cp] = _normalize((x, x) for x in cands if rx.fullmatch(chr(x)))
    return out


def _ignorecase_literal(cp: int, flags: int) -> tuple:
    ch = chr(cp)
    if cp < 0x80 and not ch.isalpha():
        return ((cp, cp),)             # ASCII digits and punctuation have no case: re matches them as is
    if cp < 0x80:
        return _ascii_letter_folds(flags)[cp]
    return re_set(_esc(cp), flags)


_CATEGORY_SRC = {
    sre_c.CATEGORY_DIGIT: r"\d", sre_c.CATEGORY_NOT_DIGIT: r"\D",
    sre_c.CATEGORY_SPACE: r"\s", sre_c.CATEGORY_NOT_SPACE: r"\S",
    sre_c.CATEGORY_WORD: r"\w", sre_c.CATEGORY_NOT_WORD: r"\W",
}


# --------------------------------------------------------------------------------------------------
# Case folding tables for the non-Python profiles
# --------------------------------------------------------------------------------------------------
def simple_case_fold(ch: str) -> str:
    """Unicode simple case folding (CaseFolding.txt, C + S) of one character, derived from ``str`` (see the
    module docstring): full folding when it is one character, else the single-character lowercase."""
    f = ch.casefold()
    if len(f) == 1:
        return f
    low = ch.lower()
    return low if len(low) == 1 else ch


@functools.lru_cache(maxsize=2)
def _fold_groups(kind: str) -> tuple[tuple[int, ...], ...]:
    """Classes of two or more code points with equal folding (``unicode_simple`` or ``ascii``)."""
    if kind == "ascii":
        return tuple((c, c + 32) for c in range(0x41, 0x5B))
    groups: dict[str, list[int]] = {}
    for ch in _all_chars():
        f = simple_case_fold(ch)
        if f != ch:
            groups.setdefault(f, [ord(f)]).append(ord(ch))
    return tuple(tuple(sorted(set(g))) for g in groups.values() if len(set(g)) > 1)


def _fold_closure(ranges: tuple, kind: str) -> tuple:
    extra = []
    for group in _fold_groups(kind):
        if any(_contains(ranges, cp) for cp in group):
            extra.extend((cp, cp) for cp in group)
    return _normalize(list(ranges) + extra) if extra else ranges


# --------------------------------------------------------------------------------------------------
# One-character constructs -> code point sets
# --------------------------------------------------------------------------------------------------
class AtomSets:
    """The code point set of each one-character construct under one profile (``case_fold``, ``classes``)."""

    def __init__(self, case_fold: str, classes: str):
        if case_fold not in CASE_FOLDS:
            raise ValueError(f"case_fold must be one of {CASE_FOLDS}, not {case_fold!r}")
        if classes not in REGEX_CLASSES:
            raise ValueError(f"regex_classes must be one of {REGEX_CLASSES}, not {classes!r}")
        self.fold = case_fold
        self.classes = classes

    def __call__(self, op, av, flags: int) -> tuple:
        icase = bool(flags & re.IGNORECASE)
        if op is sre_c.ANY:
            return UNIVERSE if flags & re.DOTALL else complement(((0x0A, 0x0A),))
        if op is sre_c.LITERAL:
            items, neg = [(sre_c.LITERAL, av)], False
        elif op is sre_c.NOT_LITERAL:
            items, neg = [(sre_c.LITERAL, av)], True
        else:   # IN
            neg = any(o is sre_c.NEGATE for o, _ in av)
            items = [(o, a) for o, a in av if o is not sre_c.NEGATE]
        if self.classes != "unicode" and not flags & re.ASCII:
            items = self._explicit_categories(items, self.classes)
        if icase and self.fold != "python_re":
            positive = self._python(items, False, flags & ~re.IGNORECASE)
            positive = _fold_closure(positive, self.fold)
            return complement(positive) if neg else positive
        return self._python(items, neg, flags)

    @staticmethod
    def _explicit_categories(items, classes: str):
        """``items`` with each ``\\s \\w \\d`` (or negation) written out as the ranges it means under ``classes``."""
        out = []
        for o, a in items:
            if o is sre_c.CATEGORY:
                ranges = re_set(_CATEGORY_SRC[a], re.ASCII) if classes == "ascii" else uts18_set(_CATEGORY_SRC[a])
                out.extend((sre_c.RANGE, r) for r in ranges)
            else:
                out.append((o, a))
        return out

    @staticmethod
    def _python(items, neg: bool, flags: int) -> tuple:
        """What Python's re matches with ``[items]`` (``[^items]`` if ``neg``) under ``flags``."""
        icase = bool(flags & re.IGNORECASE)
        if not icase and all(o in (sre_c.LITERAL, sre_c.RANGE) for o, _ in items):
            ranges = _normalize((a, a) if o is sre_c.LITERAL else a for o, a in items)
            return complement(ranges) if neg else ranges
        if icase and not neg and len(items) == 1 and items[0][0] is sre_c.LITERAL:
            return _ignorecase_literal(items[0][1], flags)
        body = "".join(
            _esc(a) if o is sre_c.LITERAL else f"{_esc(a[0])}-{_esc(a[1])}" if o is sre_c.RANGE
            else _CATEGORY_SRC[a] for o, a in items
        )
        return re_set(f"[{'^' if neg else ''}{body}]", flags)
