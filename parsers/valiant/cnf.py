"""Lark grammar -> Chomsky normal form for the incremental Valiant recognizer.

Steps (classic order TERM, BIN, DEL, UNIT, then reduction):

* TERM: inside rules of length >= 2 every terminal ``a`` is replaced by a fresh nonterminal ``<a>`` with
  ``<a> -> a``.
* BIN: right-leaning binarization, ``X -> A B C D`` becomes ``X -> A <B C D>``, ``<B C D> -> B <C D>``,
  ``<C D> -> C D``. The helper nonterminals are keyed by the suffix they stand for, so equal suffixes are
  shared, and they only ever appear as *right* children: the set of nonterminals that can be a left child
  (the only ones a finished tier has to keep) stays small.
* DEL: empty rules are removed (nullable symbols are dropped from right-hand sides in every combination);
  whether the start symbol derives the empty string is kept as the flag ``start_nullable``.
* UNIT: unit rules ``X -> Y`` are replaced by ``Y``'s non-unit rules.
* Useless symbols (unproductive or unreachable from the start symbol) are removed.

Numbering: the left-capable nonterminals come first (``0 .. n_left-1``), so a finished tier is simply the
first ``n_left`` rows of the working tier. Binary rules are sorted by their left child.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gcdbench.parsers.base import CompileError
from gcdbench.parsers.grammar import GrammarIR


@dataclass
class CNF:
    nonterminals: list[str]             # index -> name; 0 .. n_left-1 are the left-capable ones
    n_left: int
    terminals: list[str]                # index -> terminal name (only terminals used by the grammar)
    start: int                          # index of the start symbol, -1 when it derives nothing non-empty
    start_nullable: bool
    binary: list[tuple[int, int, int]]  # (parent, left, right), sorted by left child
    unary: list[tuple[int, int]]        # (parent, terminal)
    first: np.ndarray = field(repr=False)        # bool [NT, NT]: first[V, W] iff V =>* W ...
    first_term: np.ndarray = field(repr=False)   # bool [NT, T]: V =>* a ...
    last_term: np.ndarray = field(repr=False)    # bool [NT, T]: V =>* ... a
    follow: np.ndarray = field(repr=False)       # bool [T, T]: a b adjacent in some sentence

    def counts(self) -> dict:
        return {
            "binary_rules": len(self.binary),
            "terminal_rules": len(self.unary),
            "nonterminals": len(self.nonterminals),
            "left_nonterminals": self.n_left,
            "terminals": len(self.terminals),
        }


def _closure(rel: np.ndarray) -> np.ndarray:
    """Reflexive-transitive closure of a boolean relation (Warshall on rows of a uint8 matrix)."""
    n = rel.shape[0]
    m = rel.copy()
    np.fill_diagonal(m, True)
    for k in range(n):
        rows = m[:, k]
        if rows.any():
            m[rows] |= m[k]
    return m


def to_cnf(ir: GrammarIR) -> CNF:
    terms = set(ir.terminals)
    ignored = set(ir.ignore)
    rules: set[tuple[str, tuple[str, ...]]] = set()
    # TERM + BIN
    helper: dict[tuple[str, ...], str] = {}

    def nt_for_terminal(a: str) -> str:
        name = f"<{a}>"
        rules.add((name, (a,)))
        return name

    def nt_for_suffix(suffix: tuple[str, ...]) -> str:
        name = helper.get(suffix)
        if name is None:
            name = helper[suffix] = "<" + " ".join(suffix) + ">"
            rules.add((name, (suffix[0], suffix[1] if len(suffix) == 2 else nt_for_suffix(suffix[1:]))))
        return name

    for r in ir.rules:
        exp = r.expansion
        if len(exp) >= 2:
            exp = tuple(nt_for_terminal(s) if s in terms else s for s in exp)
        if len(exp) <= 2:
            rules.add((r.origin, exp))
        else:
            rules.add((r.origin, (exp[0], nt_for_suffix(exp[1:]))))
    # DEL
    nullable: set[str] = set()
    changed = True
    while changed:
        changed = False
        for o, e in rules:
            if o not in nullable and all(s in nullable for s in e):
                nullable.add(o)
                changed = True
    start_nullable = ir.start in nullable
    rules2: set[tuple[str, tuple[str, ...]]] = set()
    for o, e in rules:
        if len(e) == 2:
            rules2.add((o, e))
            if e[0] in nullable:
                rules2.add((o, (e[1],)))
            if e[1] in nullable:
                rules2.add((o, (e[0],)))
        elif len(e) == 1:
            rules2.add((o, e))
    # UNIT
    nts = sorted({o for o, _ in rules2} | {s for _, e in rules2 for s in e if s not in terms} | {ir.start})
    unit: dict[str, set[str]] = {n: {n} for n in nts}
    for o, e in rules2:
        if len(e) == 1 and e[0] not in terms:
            unit[o].add(e[0])
    changed = True
    while changed:
        changed = False
        for n in nts:
            new = set().union(*(unit[m] for m in unit[n]))
            if new != unit[n]:
                unit[n] = new
                changed = True
    by_origin: dict[str, list[tuple[str, ...]]] = {}
    for o, e in rules2:
        if not (len(e) == 1 and e[0] not in terms):
            by_origin.setdefault(o, []).append(e)
    final: set[tuple[str, tuple[str, ...]]] = set()
    for n in nts:
        for m in unit[n]:
            for e in by_origin.get(m, ()):
                final.add((n, e))
    # useless symbols
    productive: set[str] = set()
    changed = True
    while changed:
        changed = False
        for o, e in final:
            if o not in productive and all(s in terms or s in productive for s in e):
                productive.add(o)
                changed = True
    final = {(o, e) for o, e in final if o in productive and all(s in terms or s in productive for s in e)}
    reach = {ir.start} if ir.start in productive else set()
    todo = list(reach)
    by_o: dict[str, list[tuple[str, ...]]] = {}
    for o, e in final:
        by_o.setdefault(o, []).append(e)
    while todo:
        for e in by_o.get(todo.pop(), ()):
            for s in e:
                if s not in terms and s not in reach:
                    reach.add(s)
                    todo.append(s)
    final = {(o, e) for o, e in final if o in reach}
    if not final and not start_nullable:
        raise CompileError(f"the start symbol {ir.start!r} derives no string")
    # numbering: left-capable first
    left = sorted({e[0] for _, e in final if len(e) == 2})
    others = sorted({o for o, _ in final} | {e[1] for _, e in final if len(e) == 2} - set(left))
    names = left + [n for n in others if n not in set(left)]
    idx = {n: i for i, n in enumerate(names)}
    term_names = sorted({e[0] for _, e in final if len(e) == 1})
    tidx = {t: i for i, t in enumerate(term_names)}
    if set(term_names) & ignored:
        pass  # a terminal that is both used and %ignored is treated as ignored by the lexer (as the reference does)
    binary = sorted(
        ((idx[o], idx[e[0]], idx[e[1]]) for o, e in final if len(e) == 2), key=lambda r: (r[1], r[2], r[0])
    )
    unary = sorted((idx[o], tidx[e[0]]) for o, e in final if len(e) == 1)
    nn, nt = len(names), len(term_names)
    rel = np.zeros((nn, nn), dtype=bool)
    for p, a, _ in binary:
        rel[p, a] = True
    first = _closure(rel)
    rel_r = np.zeros((nn, nn), dtype=bool)
    for p, _, b in binary:
        rel_r[p, b] = True
    lastc = _closure(rel_r)
    direct = np.zeros((nn, nt), dtype=bool)
    for p, t in unary:
        direct[p, t] = True
    first_term = (first.astype(np.uint8) @ direct.astype(np.uint8)) > 0
    last_term = (lastc.astype(np.uint8) @ direct.astype(np.uint8)) > 0
    follow = np.zeros((nt, nt), dtype=bool)
    for _, a, b in binary:
        follow |= np.outer(last_term[a], first_term[b])
    start = idx.get(ir.start, -1)
    return CNF(
        nonterminals=names, n_left=len(left), terminals=term_names, start=start, start_nullable=start_nullable,
        binary=binary, unary=unary, first=first, first_term=first_term, last_term=last_term, follow=follow,
    )
