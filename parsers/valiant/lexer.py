"""Terminal DFAs over bytes.

Each terminal's regex is the minimal UTF-8 byte DFA of :mod:`gcdbench.parsers.regex_fsm` (the reference
checker's and PSC's automaton: Python ``re``'s semantics, Unicode classes and case folds included). All
terminals' DFAs are numbered into one global state space:

* ``trans[g, byte]``: next global state or -1; a transition never leaves its terminal's DFA,
* ``accept[g]``: a whole piece of ``term_of[g]`` ends here,
* ``start_of[t]``: the global start state of terminal ``t`` (lexer terminal index), -1 if it matches nothing.

Lexer terminals are the grammar's terminals (same index as in the CNF) followed by the %ignored ones.
"""
from __future__ import annotations

from dataclasses import dataclass


import numpy as np

from gcdbench.parsers.regex_fsm import byte_dfa


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
        b = byte_dfa(name, ir.terminals[name].regex, ir.terminals[name].ignore_case)
        trans, acc = b.arrays()
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
