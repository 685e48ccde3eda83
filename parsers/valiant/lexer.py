"""Terminal DFAs over bytes.

Each terminal's regex is the minimal UTF-8 byte DFA of :mod:`gcdbench.parsers.regex_fsm` (the reference
checker's and PSC's automaton: Python ``re``'s semantics, Unicode classes and case folds included). All
terminals' DFAs are numbered into one global state space:

* ``trans[g, byte]``: next global state or -1; a transition never leaves its terminal's DFA,
* ``accept[g]``: a whole piece of ``term_of[g]`` ends here,
* ``start_of[t]``: the global start state of terminal ``t`` (lexer terminal index), -1 if it matches nothing,
* ``x_class[g]``: the residual class of state ``g``: states with one class read the same byte strings, and are
  final after the same ones, whatever their terminals (Moore's partition of the union DFA with acceptance alone).
  What a token does from a state (read on, or end the piece and go on from the boundary) depends on the class
  only, so the alignment keeps its per-state token lists once per class: Go's grammar has 2,977 states in 682
  classes, because 17 of its terminals end in the same comment and line-break tail.

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
    x_class: np.ndarray       # int32 [G]: residual class (:func:`residual_classes`)

    @property
    def n_states(self) -> int:
        return int(self.trans.shape[0])

    @property
    def n_classes(self) -> int:
        return int(self.x_class.max()) + 1 if self.x_class.size else 0


def residual_classes(trans: np.ndarray, accept: np.ndarray) -> np.ndarray:
    """int32 [G]: each state's class under Moore's refinement of (final or not) by the classes of its 256
    successors (-1: no successor), numbered in order of each class's first state (so a DFA without two equal
    residuals gets the identity)."""
    G = trans.shape[0]
    if G == 0:
        return np.zeros(0, np.int32)
    label = accept.astype(np.int64)
    n = -1
    while True:
        succ = np.where(trans >= 0, label[np.maximum(trans, 0)], -1)
        sig = np.concatenate([label[:, None], succ], axis=1)
        _, label = np.unique(sig, axis=0, return_inverse=True)
        label = label.ravel().astype(np.int64)
        m = int(label.max()) + 1
        if m == n:
            break
        n = m
    _, first, inv = np.unique(label, return_index=True, return_inverse=True)
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inv.ravel()].astype(np.int32)


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
    return Lexer(names, len(cnf_terminals), ignored, trans, accept, term_of, np.array(starts, dtype=np.int32),
                 residual_classes(trans, accept))
