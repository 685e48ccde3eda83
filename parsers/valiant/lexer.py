"""Terminal DFAs over bytes.

Each terminal's regex goes through ``interegular`` to a character FSM; we expand its character alphabet to
UTF-8 bytes ourselves: a character transition becomes a chain of byte transitions through helper states
("inside a multi-byte character"), helper states with the same behaviour are shared, and only states from
which a final state is reachable are kept. All terminals' DFAs are numbered into one global state space:

* ``trans[g, byte]``: next global state or -1; a transition never leaves its terminal's DFA,
* ``accept[g]``: a whole piece of ``term_of[g]`` ends here,
* ``start_of[t]``: the global start state of terminal ``t`` (lexer terminal index), -1 if it matches nothing.

Lexer terminals are the grammar's terminals (same index as in the CNF) followed by the %ignored ones.
"""
from __future__ import annotations

from dataclasses import dataclass

import bisect
import functools

import interegular
import numpy as np

from gcdbench.parsers.base import CompileError

_ANY = interegular.fsm.anything_else


def _utf8_len(lead: int) -> int:
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def _second_range(lead: int) -> tuple[int, int]:
    return {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(lead, (0x80, 0xBF))


def _cp_range(prefix: bytes) -> tuple[int, int]:
    n = _utf8_len(prefix[0])
    cp = prefix[0] & {2: 0x1F, 3: 0x0F, 4: 0x07}[n]
    for b in prefix[1:]:
        cp = (cp << 6) | (b & 0x3F)
    free = 6 * (n - len(prefix))
    return cp << free, (cp << free) | ((1 << free) - 1)


@functools.lru_cache(maxsize=1)
def _ascii_folds() -> dict[str, str]:
    """Non-ASCII characters equal to an ASCII letter under ``re.IGNORECASE`` (the long s, the Kelvin sign...)."""
    import re

    out = {}
    for cp in range(0x80, 0x10000):
        ch = chr(cp)
        for c in (ch.lower(), ch.upper()):
            if len(c) == 1 and c.isascii() and re.fullmatch(re.escape(c), ch, re.IGNORECASE):
                out[ch] = c
    return out


class _ByteDFABuilder:
    """Expands one interegular FSM to bytes. States 0..S-1 are the FSM's live states."""

    def __init__(self, name: str, regex: str, ignore_case: bool = False):
        try:
            fsm = interegular.parse_pattern(regex).to_fsm()
        except Exception as err:  # interegular raises several types for unsupported syntax
            raise CompileError(f"terminal {name}: regex {regex!r} is not supported by interegular ({err})") from err
        if fsm.initial in fsm.finals:
            raise CompileError(f"terminal {name} matches the empty string")
        rev: dict = {}
        for s, row in fsm.map.items():
            for t in row.values():
                rev.setdefault(t, set()).add(s)
        live, todo = set(fsm.finals), list(fsm.finals)
        while todo:
            for s in rev.get(todo.pop(), ()):
                if s not in live:
                    live.add(s)
                    todo.append(s)
        self.fsm = fsm
        self.mapping = dict(fsm.alphabet._symbol_mapping)
        if ignore_case:   # interegular folds ASCII only; Python's re (Lark) also folds e.g. U+017F to 's'
            for ch, low in _ascii_folds().items():
                if low in self.mapping:
                    self.mapping[ch] = self.mapping[low]
        self.other = self.mapping.get(_ANY)
        self.explicit = sorted(ord(c) for c in self.mapping if isinstance(c, str))
        order = sorted(live, key=lambda s: (s != fsm.initial, str(s)))
        self.sid = {s: i for i, s in enumerate(order)}
        self.states = order
        self.rows: list[list[int]] = []    # byte -> local state (or -1)
        self.helpers: dict = {}            # signature -> local helper id
        self.live = live
        self.start = 0 if fsm.initial in live else -1

    def _target(self, s, cp: int) -> int:
        sym = self.mapping.get(chr(cp), self.other) if not 0xD800 <= cp <= 0xDFFF else None
        if sym is None:
            return -1
        t = self.fsm.map.get(s, {}).get(sym)
        return self.sid[t] if t is not None and t in self.live else -1

    def _helper(self, sig, row) -> int:
        hid = self.helpers.get(sig)
        if hid is None:
            hid = self.helpers[sig] = len(self.states) + len(self.rows)   # helper ids follow the FSM states
            self.rows.append(row)
        return hid

    def _node(self, s, prefix: bytes) -> int:
        """Helper state after the incomplete UTF-8 sequence ``prefix`` from FSM state ``s`` (-1 if dead)."""
        n = _utf8_len(prefix[0])
        lo, hi = _cp_range(prefix)
        lo2, hi2 = _second_range(prefix[0]) if len(prefix) == 1 else (0x80, 0xBF)
        i = bisect.bisect_left(self.explicit, lo)
        has_explicit = i < len(self.explicit) and self.explicit[i] <= hi
        if not has_explicit:
            if self.other is None:
                return -1
            t = self.fsm.map.get(s, {}).get(self.other)
            if t is None or t not in self.live:
                return -1
            return self._uniform(self.sid[t], n - len(prefix), lo2, hi2)
        row = [-1] * 256
        for b in range(lo2, hi2 + 1):
            buf = prefix + bytes([b])
            if len(buf) == n:
                row[b] = self._target(s, _cp_range(buf)[0])
            else:
                row[b] = self._node(s, buf)
        if all(x == -1 for x in row):
            return -1
        return self._helper(("row", tuple(row)), row)

    def _uniform(self, target: int, remaining: int, lo2: int, hi2: int) -> int:
        sig = ("u", target, remaining, lo2, hi2)
        hid = self.helpers.get(sig)
        if hid is not None:
            return hid
        nxt = target if remaining == 1 else self._uniform(target, remaining - 1, 0x80, 0xBF)
        row = [-1] * 256
        for b in range(lo2, hi2 + 1):
            row[b] = nxt
        return self._helper(sig, row)

    def build(self):
        """(trans [S, 256] local ids, accept [S]); helper states are numbered after the FSM states."""
        base_rows = []
        for s in self.states:
            row = [-1] * 256
            for b in range(0x80):
                row[b] = self._target(s, b)
            for b in range(0xC2, 0xF5):
                row[b] = self._node(s, bytes([b]))
            base_rows.append(row)
        ns = len(self.states)
        trans = np.full((ns + len(self.rows), 256), -1, dtype=np.int32)
        trans[:ns] = np.array(base_rows, dtype=np.int32)
        if self.rows:
            trans[ns:] = np.array(self.rows, dtype=np.int32)
        accept = np.zeros(ns + len(self.rows), dtype=bool)
        for s in self.states:
            accept[self.sid[s]] = s in self.fsm.finals
        return trans, accept


@dataclass
class Lexer:
    names: list[str]          # lexer terminal index -> name (grammar terminals first, then %ignored ones)
    n_grammar: int            # lexer terminals 0..n_grammar-1 are the CNF terminals
    ignored: np.ndarray       # bool [n_lex]
    trans: np.ndarray         # int32 [G, 256]
    accept: np.ndarray        # bool [G]
    term_of: np.ndarray       # int32 [G]
    start_of: np.ndarray      # int32 [n_lex]

    @property
    def n_states(self) -> int:
        return int(self.trans.shape[0])


def build_lexer(ir, cnf_terminals: list[str]) -> Lexer:
    names = list(cnf_terminals) + [t for t in ir.ignore if t not in cnf_terminals]
    ignored = np.array([n in set(ir.ignore) for n in names], dtype=bool)
    blocks, accs, terms, starts = [], [], [], []
    off = 0
    for i, name in enumerate(names):
        b = _ByteDFABuilder(name, ir.terminals[name].regex, ir.terminals[name].ignore_case)
        trans, acc = b.build()
        trans = np.where(trans >= 0, trans + off, -1).astype(np.int32)
        blocks.append(trans)
        accs.append(acc)
        terms.append(np.full(len(acc), i, dtype=np.int32))
        starts.append(off + b.start if b.start >= 0 else -1)
        off += len(acc)
    if blocks:
        trans = np.concatenate(blocks)
        accept = np.concatenate(accs)
        term_of = np.concatenate(terms)
    else:
        trans = np.zeros((0, 256), np.int32)
        accept = np.zeros(0, bool)
        term_of = np.zeros(0, np.int32)
    return Lexer(names, len(cnf_terminals), ignored, trans, accept, term_of, np.array(starts, dtype=np.int32))
