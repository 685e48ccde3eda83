"""Terminal regexes as automata with Python ``re``'s exact character semantics, and their UTF-8 byte DFAs.

Shared by the reference checker, the Valiant lexer and PSC, so every byte-level reading of a terminal comes
from one automaton. Lark matches terminals with Python's ``re`` on ``str``; we do the same, exactly:

* the regex is parsed by Python's own parser (``re._parser``); every one-character construct (a literal, a
  class such as ``[^'\\s]``, ``\\w``, ``.``) becomes the *set of code points Python's re matches with it*
  under the flags in force there (``(?i:...)``, ``(?s:...)``, ``(?a:...)``). Sets that need Python's tables
  (``\\s \\w \\d``, anything case-insensitive) are computed by running ``re`` itself over all 1,112,064
  Unicode scalar values once (cached per construct); plain literals and ranges are read directly;
* the automaton's alphabet is a partition of the code points into *classes* (sorted ranges), so ``\\w`` is
  a few hundred ranges, not 140,000 characters; the DFA is built by subset construction and minimised;
* a :class:`ByteDFA` expands it to UTF-8 bytes through a class-level UTF-8 trie: helper states for "inside a
  multi-byte character", shared when their futures are equal, so the byte DFA is minimal too. Surrogates
  (not encodable in UTF-8) never match.

Besides Python's ``re`` (``case_fold="python_re"``, ``regex_classes="unicode"``, the harness's language), the
other :class:`gcdbench.parsers.base.Profile` readings of the same regex are exact too:

* ``case_fold="unicode_simple"``: a case-insensitive construct matches ``x`` iff some member of its
  case-sensitive (positive) set has the same *simple case folding* as ``x`` (Unicode CaseFolding.txt, status
  C and S), and a negated one is the complement of that. The folding is derived from Python's ``str``:
  ``simple(x) = x.casefold()`` when that is one character (status C, or no entry), else ``x.lower()`` when
  that is one character other than ``x`` (the status-S entries of Python's Unicode 14 tables: ẞ, and the
  Greek capitals with prosgegrammeni), else ``x`` (status F only, e.g. ß, İ, ŉ);
* ``case_fold="ascii"``: only the ASCII letters fold (``a`` ~ ``A``), so ``"select"i`` does not match ``ſelect``;
* ``regex_classes="ascii"``: ``\\s \\w \\d`` and their negations mean what they mean under ``re.ASCII``
  (``[ \\t\\n\\r\\f\\v]``, ``[a-zA-Z0-9_]``, ``[0-9]``); case folding is unaffected.
* ``regex_classes="uts18"``: ``\\s \\w \\d`` and their negations are the Unicode properties of UTS #18 Annex C,
  as Rust's ``regex`` crate (LLGuidance's regex syntax) defines them: ``\\s`` is ``White_Space`` (Python's ``\\s``
  also takes U+001C-U+001F), ``\\w`` is ``Alphabetic``, marks, ``Nd``, ``Pc`` and ``Join_Control`` (Python's takes
  ``str.isalnum``: ``½ ² ₁`` in, combining marks out), ``\\d`` is ``Nd``. The sets are computed by the ``regex``
  package's property tables over every code point, like the ``re`` sets (cached per ``regex`` version).
"""
from __future__ import annotations

import bisect
import functools
import re

import numpy as np

try:  # Python >= 3.11
    import re._constants as sre_c
    import re._parser as sre_parse
except ImportError:  # pragma: no cover
    import sre_constants as sre_c  # type: ignore
    import sre_parse  # type: ignore

from gcdbench.parsers.base import CompileError
from gcdbench.parsers.charsets import (  # noqa: F401 - SEMANTICS ... simple_case_fold: re-exported
    CASE_FOLDS, CHAR_FLAGS, MAX_NFA_STATES, REGEX_CLASSES, SEMANTICS, UNIVERSE, AtomSets, codepoint_range,
    construct_name, re_set, simple_case_fold, utf8_len, utf8_second_range)


# --------------------------------------------------------------------------------------------------
# Regex -> NFA -> minimal DFA over code point classes
# --------------------------------------------------------------------------------------------------
_ATOMS = (sre_c.LITERAL, sre_c.NOT_LITERAL, sre_c.IN, sre_c.ANY)
_REPEATS = (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT)


class _NFA:
    def __init__(self, name: str, atom_sets: AtomSets):
        self.name = name
        self.sets = atom_sets
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[int, int]]] = []   # (atom index, target)
        self.atoms: list[tuple] = []
        self._atom_ids: dict[tuple, int] = {}

    def state(self) -> int:
        if len(self.eps) >= MAX_NFA_STATES:
            raise CompileError(f"terminal {self.name}: regex too large (over {MAX_NFA_STATES} automaton states)")
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def atom(self, op, av, flags) -> int:
        key = (op, repr(av), flags & CHAR_FLAGS)
        aid = self._atom_ids.get(key)
        if aid is None:
            aid = self._atom_ids[key] = len(self.atoms)
            self.atoms.append(self.sets(op, av, flags))
        return aid

    def seq(self, items, flags: int, start: int) -> int:
        cur = start
        for op, av in items:
            cur = self.node(op, av, flags, cur)
        return cur

    def node(self, op, av, flags: int, start: int) -> int:
        if op in _ATOMS:
            end = self.state()
            self.edges[start].append((self.atom(op, av, flags), end))
            return end
        if op is sre_c.SUBPATTERN:
            _group, add, rm, sub = av
            return self.seq(sub, (flags | add) & ~rm, start)
        if op is sre_c.BRANCH:
            end = self.state()
            for alt in av[1]:
                s = self.state()
                self.eps[start].append(s)
                self.eps[self.seq(alt, flags, s)].append(end)
            return end
        if op in _REPEATS:
            lo, hi, sub = av
            cur = start
            for _ in range(lo):
                cur = self.seq(sub, flags, cur)
            if hi == sre_c.MAXREPEAT:
                loop = self.state()
                self.eps[cur].append(loop)
                self.eps[self.seq(sub, flags, loop)].append(loop)
                return loop
            end = self.state()
            for _ in range(hi - lo):
                self.eps[cur].append(end)
                cur = self.seq(sub, flags, cur)
            self.eps[cur].append(end)
            return end
        raise CompileError(
            f"terminal {self.name}: {construct_name(op)} has no whole-match automaton here (anchors, word"
            f" boundaries, lookarounds, back-references, atomic groups and possessive repeats); rewrite the terminal"
            f" without it"
        )

    def closure(self, states) -> frozenset:
        out, todo = set(states), list(states)
        while todo:
            for t in self.eps[todo.pop()]:
                if t not in out:
                    out.add(t)
                    todo.append(t)
        return frozenset(out)


def _partition(atoms: list[tuple]) -> tuple[list[int], list[frozenset]]:
    """Elementary intervals of the code points (start of each) and the atoms containing each."""
    cuts = {0, 0x110000}
    for ranges in atoms:
        for lo, hi in ranges:
            cuts.add(lo)
            cuts.add(hi + 1)
    starts = sorted(cuts)[:-1]
    members: list[set[int]] = [set() for _ in starts]
    for a, ranges in enumerate(atoms):
        for lo, hi in ranges:
            i = bisect.bisect_left(starts, lo)
            while i < len(starts) and starts[i] <= hi:
                members[i].add(a)
                i += 1
    return starts, [frozenset(m) for m in members]


class CharFSM:
    """One terminal's minimal DFA over code point classes (Python ``re``'s semantics, or a profile's).

    ``n`` states, initial state 0 (``start`` is -1 when the regex matches nothing), ``trans[s][c]`` the next
    state or -1, ``finals[s]``; every state can reach a final one. ``starts``/``cls``: the partition of the
    code points into intervals (``starts[i]`` .. ``starts[i+1]-1``) and the class of each (-1: no construct
    of the regex matches it)."""

    def __init__(self, name: str, regex: str, ignore_case: bool = False, case_fold: str = "python_re",
                 regex_classes: str = "unicode"):
        self.name = name
        if ignore_case:
            regex = f"(?i:{regex})"
        try:
            parsed = sre_parse.parse(regex)
        except re.error as err:
            raise CompileError(f"terminal {name}: bad regex {regex!r}: {err}") from err
        nfa = _NFA(name, AtomSets(case_fold, regex_classes))
        n_start = nfa.state()
        n_final = nfa.seq(list(parsed), parsed.state.flags, n_start)
        starts, members = _partition(nfa.atoms)
        sig_class: dict[frozenset, int] = {}
        cls = [sig_class.setdefault(m, len(sig_class)) if m else -1 for m in members]
        sigs = sorted(sig_class, key=sig_class.get)
        # subset construction
        init = nfa.closure([n_start])
        dstates, index, rows = [init], {init: 0}, []
        k = 0
        while k < len(dstates):
            cur = dstates[k]
            row = []
            for sig in sigs:
                tgt = {t for s in cur for a, t in nfa.edges[s] if a in sig}
                if not tgt:
                    row.append(-1)
                    continue
                c = nfa.closure(tgt)
                j = index.get(c)
                if j is None:
                    j = index[c] = len(dstates)
                    dstates.append(c)
                row.append(j)
            rows.append(row)
            k += 1
        finals = [n_final in d for d in dstates]
        if finals[0]:
            raise CompileError(f"terminal {name} matches the empty string")
        trans, finals = _minimize(rows, finals)
        trans, class_map = _merge_classes(trans, len(sigs))
        cls = [class_map[c] if c >= 0 else -1 for c in cls]
        # merge neighbouring intervals of the same class
        self.starts: list[int] = []
        self.cls: list[int] = []
        for s, c in zip(starts, cls):
            if not self.cls or self.cls[-1] != c:
                self.starts.append(s)
                self.cls.append(c)
        self.trans = trans
        self.finals = finals
        self.n = len(trans)
        self.start = 0 if self.n else -1
        self.n_classes = max(self.cls) + 1 if self.n else 0

    def char_class(self, cp: int) -> int:
        return self.cls[bisect.bisect_right(self.starts, cp) - 1]

    def classes_in(self, lo: int, hi: int) -> set[int]:
        """Classes of the code points lo..hi (-1 included when some of them match nothing)."""
        i = bisect.bisect_right(self.starts, lo) - 1
        j = bisect.bisect_right(self.starts, hi) - 1
        return set(self.cls[i:j + 1])

    def next(self, state: int, ch: str) -> int:
        """State after character ``ch`` from ``state``, or -1."""
        if state < 0:
            return -1
        c = self.char_class(ord(ch))
        return self.trans[state][c] if c >= 0 and not 0xD800 <= ord(ch) <= 0xDFFF else -1

    def fullmatch(self, text: str) -> bool:
        s = self.start
        for ch in text:
            s = self.next(s, ch)
            if s < 0:
                return False
        return self.finals[s]


def _minimize(rows: list[list[int]], finals: list[bool]) -> tuple[list[list[int]], list[bool]]:
    """Drop states that reach no final state, then merge equivalent states (Moore); state 0 stays first."""
    n = len(rows)
    rev: list[list[int]] = [[] for _ in range(n)]
    for s, row in enumerate(rows):
        for t in row:
            if t >= 0:
                rev[t].append(s)
    live = {s for s in range(n) if finals[s]}
    todo = list(live)
    while todo:
        for s in rev[todo.pop()]:
            if s not in live:
                live.add(s)
                todo.append(s)
    if 0 not in live:
        return [], []
    part = {s: int(finals[s]) for s in live}
    while True:
        sig = {s: (part[s], tuple(part.get(t, -1) for t in rows[s])) for s in live}
        ids: dict = {}
        new = {s: ids.setdefault(sig[s], len(ids)) for s in sorted(live)}
        if len(ids) == len(set(part.values())):
            break
        part = new
    order: dict[int, int] = {}
    for s in [0] + sorted(live - {0}):
        order.setdefault(part[s], len(order))
    trans = [[] for _ in order]
    fin = [False] * len(order)
    for s in live:
        i = order[part[s]]
        if not trans[i]:
            trans[i] = [order[part[t]] if t in live else -1 for t in rows[s]]
            fin[i] = finals[s]
    return trans, fin


def _merge_classes(trans: list[list[int]], n_classes: int) -> tuple[list[list[int]], list[int]]:
    """Classes with identical columns become one (and classes with no transition at all become -1)."""
    cols: dict[tuple, int] = {}
    class_map = []
    for c in range(n_classes):
        col = tuple(row[c] for row in trans)
        if all(t < 0 for t in col):
            class_map.append(-1)
        else:
            class_map.append(cols.setdefault(col, len(cols)))
    new = [[-1] * len(cols) for _ in trans]
    for c, m in enumerate(class_map):
        if m >= 0:
            for s, row in enumerate(trans):
                new[s][m] = row[c]
    return new, class_map


# --------------------------------------------------------------------------------------------------
# Character DFA -> byte DFA
# --------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _utf8_trie(starts: tuple, cls: tuple) -> list:
    """For each first byte, what follows in terms of classes: ``("c", class)`` (a whole character),
    ``("u", class, bytes_left, lo2, hi2)`` (every completion is in that class), ``("r", lo2, children)`` (the
    entries for the next bytes lo2, lo2+1, ...), or None (no completion matches)."""
    def classes(lo, hi):
        i = bisect.bisect_right(starts, lo) - 1
        j = bisect.bisect_right(starts, hi) - 1
        return set(cls[i:j + 1])

    def entry(prefix: bytes):
        n = utf8_len(prefix[0])
        lo, hi = codepoint_range(prefix)
        if len(prefix) == n:
            c = cls[bisect.bisect_right(starts, lo) - 1]
            return ("c", c) if c >= 0 else None
        cs = classes(lo, hi)
        lo2, hi2 = utf8_second_range(prefix[0]) if len(prefix) == 1 else (0x80, 0xBF)
        if cs == {-1}:
            return None
        if len(cs) == 1:
            return ("u", cs.pop(), n - len(prefix), lo2, hi2)
        return ("r", lo2, tuple(entry(prefix + bytes([b])) for b in range(lo2, hi2 + 1)))

    first: list = [None] * 256
    for b in range(0x80):
        c = cls[bisect.bisect_right(starts, b) - 1]
        first[b] = ("c", c) if c >= 0 else None
    for b in range(0xC2, 0xF5):
        first[b] = entry(bytes([b]))
    return first


class ByteDFA:
    """A terminal's minimal DFA over UTF-8 bytes: ``rows[q][byte]`` (next state or -1), ``accept[q]``,
    ``start`` (-1 when the terminal matches nothing). States ``0 .. n_char-1`` are the character DFA's
    (0 is the start); the rest are inside a multi-byte character."""

    def __init__(self, char: CharFSM):
        self.char = char
        self.name = char.name
        n = char.n
        self.n_char = n
        self.start = char.start
        self._rows: list[list[int]] = []     # helper rows, numbered from n
        self._helpers: dict = {}
        self._uniforms: dict = {}
        trie = _utf8_trie(tuple(char.starts), tuple(char.cls))
        ascii_cls = [e[1] if e is not None else -1 for e in trie[:0x80]]
        leads = [(b, e) for b, e in enumerate(trie) if b >= 0x80 and e is not None]
        memo: dict = {}
        core = []
        for s in range(n):
            tr = char.trans[s]
            row = [tr[c] if c >= 0 else -1 for c in ascii_cls] + [-1] * 0x80
            for b, e in leads:
                row[b] = self._expand(s, e, memo)
            core.append(row)
        self.rows = core + self._rows
        self.accept = list(char.finals) + [False] * len(self._rows)
        self.n = len(self.rows)

    def _helper(self, row) -> int:
        """The helper state with this row (equal rows are one state, so the byte DFA stays minimal)."""
        key = tuple(row)
        hid = self._helpers.get(key)
        if hid is None:
            hid = self._helpers[key] = self.n_char + len(self._rows)
            self._rows.append(row)
        return hid

    def _uniform(self, target: int, left: int, lo2: int, hi2: int) -> int:
        key = ("u", target, left, lo2, hi2)
        hid = self._uniforms.get(key)
        if hid is None:
            nxt = target if left == 1 else self._uniform(target, left - 1, 0x80, 0xBF)
            row = [-1] * 256
            row[lo2:hi2 + 1] = [nxt] * (hi2 - lo2 + 1)
            hid = self._uniforms[key] = self._helper(row)
        return hid

    def _expand(self, s: int, e, memo) -> int:
        if e is None:
            return -1
        kind = e[0]
        if kind == "c":
            return self.char.trans[s][e[1]]
        if kind == "u":
            t = self.char.trans[s][e[1]]
            return -1 if t < 0 else self._uniform(t, e[2], e[3], e[4])
        key = (s, id(e))   # trie rows live as long as the cached trie
        got = memo.get(key)
        if got is None:
            part = [self._expand(s, x, memo) for x in e[2]]
            if all(x < 0 for x in part):
                got = -1
            else:
                row = [-1] * 256
                row[e[1]:e[1] + len(part)] = part
                got = self._helper(row)
            memo[key] = got
        return got

    def step(self, q: int, byte: int) -> int:
        return self.rows[q][byte]

    def accepting(self, q: int) -> bool:
        return self.accept[q]

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(trans [n, 256] int32, accept [n] bool)."""
        trans = np.array(self.rows, dtype=np.int32).reshape(self.n, 256)
        return trans, np.array(self.accept, dtype=bool)

    def fullmatch(self, data: bytes) -> bool:
        q = self.start
        for b in data:
            if q < 0:
                return False
            q = self.rows[q][b]
        return q >= 0 and self.accept[q]


@functools.lru_cache(maxsize=1024)
def char_fsm(name: str, regex: str, ignore_case: bool = False, case_fold: str = "python_re",
             regex_classes: str = "unicode") -> CharFSM:
    """The (cached) character DFA of one terminal under one profile's regex reading."""
    return CharFSM(name, regex, ignore_case, case_fold, regex_classes)


@functools.lru_cache(maxsize=1024)
def byte_dfa(name: str, regex: str, ignore_case: bool = False, case_fold: str = "python_re",
             regex_classes: str = "unicode") -> ByteDFA:
    """The (cached) UTF-8 byte DFA of one terminal under one profile's regex reading."""
    return ByteDFA(char_fsm(name, regex, ignore_case, case_fold, regex_classes))
