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

import numpy as np

from gcdbench.parsers.regex_fsm import CharFSM, codepoint_range, utf8_len, utf8_second_range

class _ByteDFABuilder:
    """Expands one interegular FSM to bytes. States 0..S-1 are the FSM's live states."""

    def __init__(self, name: str, regex: str, ignore_case: bool = False):
        char = CharFSM(name, regex, ignore_case)   # the reference checker's automaton, case folds included
        fsm, live = char.fsm, char.live
        self.fsm = fsm
        self.mapping = char.symbols
        self.other = char.other
        self.explicit = sorted(ord(c) for c in char.explicit)
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
        n = utf8_len(prefix[0])
        lo, hi = codepoint_range(prefix)
        lo2, hi2 = utf8_second_range(prefix[0]) if len(prefix) == 1 else (0x80, 0xBF)
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
                row[b] = self._target(s, codepoint_range(buf)[0])
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
