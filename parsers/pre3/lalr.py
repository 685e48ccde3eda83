"""LALR(1) tables built here (LR(0) automaton + DeRemer-Pennello lookaheads), with every conflict listed.

Why our own and not Lark's analysis (PSC uses Lark's): the same tables come out for a conflict-free grammar
(LALR(1) tables are canonical; ``tests/test_pre3.py`` checks they are isomorphic to Lark's on the SQL
grammars), but Lark's ``compute_includes_lookback`` runs for minutes on the induced TreeBank grammar, which
the issue wants refused in seconds, and Lark resolves shift/reduce conflicts silently. Here the relations
are computed with integer bitsets and an iterative digraph traversal, and a grammar with conflicts is
refused with all of them named. The character-level front end (``charlevel.py``) runs the same analysis on
the byte-level expansion of a grammar.

Symbols are ints: terminals ``0 .. n_t-1`` (``$END`` is the last), nonterminal ``A`` is ``n_t + A``;
nonterminal 0 is the augmented root ``$root -> start $END`` (rule 0), as in Lark's tables: the parse is
accepted when, reading ``$END``, a reduction's goto from the bottom state lands on ``end_state``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gcdbench.parsers.base import CompileError, GrammarSpec
from gcdbench.parsers.lr.lexer import lark_terminals

END = "$END"
ROOT = "$root"


@dataclass
class CFG:
    """A context-free grammar over named terminals; rule 0 is ``$root -> start $END``."""

    terminals: list[str]                       # index = terminal id; the last one is $END
    nonterminals: list[str]                    # index = nonterminal id; 0 is $root
    rules: list[tuple[int, tuple[int, ...]]]   # (lhs nonterminal id, rhs symbols)

    @property
    def n_t(self) -> int:
        return len(self.terminals)

    def sym_name(self, s: int) -> str:
        return self.terminals[s] if s < self.n_t else self.nonterminals[s - self.n_t]

    def rule_str(self, r: int) -> str:
        lhs, rhs = self.rules[r]
        return f"{self.nonterminals[lhs]} -> " + (" ".join(self.sym_name(s) for s in rhs) or "<empty>")

    @classmethod
    def build(cls, start: str, rules: list[tuple[str, list[tuple[str, bool]]]], terminals: list[str]) -> "CFG":
        """From named rules ``(lhs, [(symbol, is_terminal), ...])``; ``terminals`` fixes the terminal order."""
        terms = [t for t in terminals if t != END] + [END]
        tix = {t: i for i, t in enumerate(terms)}
        nts = [ROOT]
        nix = {ROOT: 0}
        for lhs, _ in rules:
            if lhs not in nix:
                nix[lhs] = len(nts)
                nts.append(lhs)
        if start not in nix:
            raise CompileError(f"pre3: start symbol {start!r} has no rule")
        n_t = len(terms)
        out = [(0, (n_t + nix[start], tix[END]))]
        for lhs, rhs in rules:
            enc = []
            for name, is_term in rhs:
                if is_term:
                    if name not in tix:
                        raise CompileError(f"pre3: terminal {name!r} is used but not defined")
                    enc.append(tix[name])
                else:
                    if name not in nix:
                        raise CompileError(f"pre3: nonterminal {name!r} is used but has no rule")
                    enc.append(n_t + nix[name])
            out.append((nix[lhs], tuple(enc)))
        return cls(terms, nts, out)


def lark_grammar(grammar: GrammarSpec):
    """(CFG, terminal definitions for the lexer, ignored terminal names), from Lark's own grammar compiler.

    Terminal definitions are ``(name, regex, is_literal, literal_len, priority, ignore_case)``, the form the
    byte lexer (:mod:`gcdbench.parsers.lr.lexer`) takes. Lark is built with its Earley front end, which only
    compiles the grammar (no LR analysis), so this is fast even for the induced TreeBank grammar.
    """
    import lark
    from lark.exceptions import LarkError

    try:
        lk = lark.Lark(grammar.lark, parser="earley", lexer="dynamic", start=grammar.start)
    except LarkError as err:
        raise CompileError(f"pre3: malformed grammar: {err}") from err
    terms = lark_terminals(lk)
    rules = [(r.origin.name, [(s.name, s.is_term) for s in r.expansion]) for r in lk.rules]
    used = {s for _lhs, rhs in rules for s, is_t in rhs if is_t}
    ignored = set(lk.ignore_tokens)
    names = [t[0] for t in terms if t[0] in used or t[0] not in ignored]   # unused ones: no action anywhere
    return CFG.build(grammar.start, rules, names), terms, list(lk.ignore_tokens)


@dataclass
class Tables:
    """LALR(1) tables. ``action[q]``: terminal -> ``(True, target)`` shift or ``(False, rule)`` reduce;
    ``goto[q]``: nonterminal -> target. ``start_state`` is the bottom of every stack."""

    cfg: CFG
    action: list[dict[int, tuple[bool, int]]]
    goto: list[dict[int, int]]
    start_state: int
    end_state: int
    conflicts: list[str] = field(default_factory=list)

    @property
    def n_states(self) -> int:
        return len(self.action)


def _digraph(n: int, rel: list[list[int]], init: list[int]) -> list[int]:
    """DeRemer-Pennello's digraph: F(x) = init(x) | union of F(y) over x rel+ y (Tarjan's SCCs, iterative)."""
    INF = n + 10
    N = [0] * n
    F = list(init)
    S: list[int] = []
    for x0 in range(n):
        if N[x0]:
            continue
        S.append(x0)
        N[x0] = len(S)
        frames = [[x0, 0, len(S)]]
        while frames:
            fr = frames[-1]
            x = fr[0]
            if fr[1] < len(rel[x]):
                y = rel[x][fr[1]]
                fr[1] += 1
                if N[y] == 0:
                    S.append(y)
                    N[y] = len(S)
                    frames.append([y, 0, len(S)])
                    continue
                N[x] = min(N[x], N[y])
                F[x] |= F[y]
                continue
            frames.pop()
            if N[x] == fr[2]:
                while True:
                    top = S.pop()
                    N[top] = INF
                    F[top] = F[x]
                    if top == x:
                        break
            if frames:
                p = frames[-1][0]
                N[p] = min(N[p], N[x])
                F[p] |= F[x]
    return F


def build_tables(cfg: CFG, what: str = "grammar", max_states: int = 200_000) -> Tables:
    """LR(0) automaton and LALR(1) lookaheads; ``Tables.conflicts`` lists every conflict (empty = LALR(1))."""
    n_t = cfg.n_t
    n_nt = len(cfg.nonterminals)
    rules = cfg.rules
    by_lhs: list[list[int]] = [[] for _ in range(n_nt)]
    for r, (lhs, _rhs) in enumerate(rules):
        by_lhs[lhs].append(r)
    # nullable nonterminals
    nullable = [False] * n_nt
    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            if not nullable[lhs] and all(s >= n_t and nullable[s - n_t] for s in rhs):
                nullable[lhs] = changed = True
    # closure of a nonterminal: the rules whose items at dot 0 are added when it follows a dot
    first_nts: list[set[int]] = [set() for _ in range(n_nt)]
    for A in range(n_nt):
        seen = {A}
        todo = [A]
        while todo:
            B = todo.pop()
            for r in by_lhs[B]:
                rhs = rules[r][1]
                if rhs and rhs[0] >= n_t and rhs[0] - n_t not in seen:
                    seen.add(rhs[0] - n_t)
                    todo.append(rhs[0] - n_t)
        first_nts[A] = seen
    closure_rules = [tuple(r for B in sorted(first_nts[A]) for r in by_lhs[B]) for A in range(n_nt)]

    # LR(0) states: kernels as sorted tuples of (rule, dot); items encoded as rule * W + dot
    W = max((len(rhs) for _l, rhs in rules), default=0) + 1
    kernels: list[tuple[int, ...]] = []
    index: dict[tuple[int, ...], int] = {}
    trans: list[dict[int, int]] = []
    complete: list[list[int]] = []   # rules completed in each state (reduce items)

    def intern(k: tuple[int, ...]) -> int:
        j = index.get(k)
        if j is None:
            j = index[k] = len(kernels)
            kernels.append(k)
            if len(kernels) > max_states:
                raise CompileError(f"pre3: the LR(0) automaton of the {what} exceeds {max_states} states")
        return j

    intern((0 * W + 0,))
    q = 0
    while q < len(kernels):
        items = list(kernels[q])
        added: set[int] = set()
        for it in kernels[q]:
            r, d = divmod(it, W)
            rhs = rules[r][1]
            if d < len(rhs) and rhs[d] >= n_t:
                A = rhs[d] - n_t
                if A not in added:
                    added.add(A)
                    for r2 in closure_rules[A]:
                        items.append(r2 * W)
        items = list(dict.fromkeys(items))
        nxt: dict[int, list[int]] = {}
        done = []
        for it in items:
            r, d = divmod(it, W)
            rhs = rules[r][1]
            if d < len(rhs):
                nxt.setdefault(rhs[d], []).append(it + 1)
            else:
                done.append(r)
        trans.append({X: intern(tuple(sorted(set(ks)))) for X, ks in nxt.items()})
        complete.append(done)
        q += 1
    n_states = len(kernels)

    # nonterminal transitions (p, A)
    nt_index: dict[tuple[int, int], int] = {}
    nt_list: list[tuple[int, int]] = []
    for p in range(n_states):
        for X in trans[p]:
            if X >= n_t:
                nt_index[(p, X - n_t)] = len(nt_list)
                nt_list.append((p, X - n_t))
    m = len(nt_list)
    DR = [0] * m
    reads: list[list[int]] = [[] for _ in range(m)]
    for i, (p, A) in enumerate(nt_list):
        r_ = trans[p][n_t + A]
        bits = 0
        for X, _t in trans[r_].items():
            if X < n_t:
                bits |= 1 << X
            elif nullable[X - n_t]:
                reads[i].append(nt_index[(r_, X - n_t)])
        DR[i] = bits
    Read = _digraph(m, reads, DR)
    includes: list[list[int]] = [[] for _ in range(m)]
    lookback: dict[tuple[int, int], list[int]] = {}
    for i, (p0, B) in enumerate(nt_list):
        for r in by_lhs[B]:
            rhs = rules[r][1]
            st = p0
            for k, X in enumerate(rhs):
                if X >= n_t and all(Y >= n_t and nullable[Y - n_t] for Y in rhs[k + 1:]):
                    includes[nt_index[(st, X - n_t)]].append(i)
                st = trans[st][X]
            lookback.setdefault((st, r), []).append(i)
    Follow = _digraph(m, includes, Read)

    # tables and conflicts
    action: list[dict[int, tuple[bool, int]]] = []
    goto: list[dict[int, int]] = []
    conflicts: list[str] = []
    for q in range(n_states):
        act: dict[int, tuple[bool, int]] = {}
        gt: dict[int, int] = {}
        for X, t in trans[q].items():
            if X < n_t:
                act[X] = (True, t)
            else:
                gt[X - n_t] = t
        for r in complete[q]:
            if r == 0:
                continue
            la = 0
            for i in lookback.get((q, r), ()):
                la |= Follow[i]
            a = 0
            while la:
                if la & 1:
                    prev = act.get(a)
                    if prev is None:
                        act[a] = (False, r)
                    elif prev[0]:
                        conflicts.append(f"shift/reduce on {cfg.terminals[a]} in state {q}: shift, or reduce "
                                         f"<{cfg.rule_str(r)}>")
                    else:
                        conflicts.append(f"reduce/reduce on {cfg.terminals[a]} in state {q}: "
                                         f"<{cfg.rule_str(prev[1])}> | <{cfg.rule_str(r)}>")
                la >>= 1
                a += 1
        action.append(act)
        goto.append(gt)
    start_nt = rules[0][1][0]
    return Tables(cfg, action, goto, 0, trans[0][start_nt], conflicts)


def conflict_message(what: str, conflicts: list[str], limit: int = 20) -> str:
    """One line naming the conflicts: examples from different states, reduce/reduce ones first."""
    import re

    rr = [c for c in conflicts if c.startswith("reduce/reduce")]
    sr = [c for c in conflicts if not c.startswith("reduce/reduce")]
    shown, per_state = [], {}
    for c in rr + sr:
        m = re.search(r" in state (\d+)", c)
        st = m.group(1) if m else ""
        if per_state.get(st, 0) >= 2 and len(conflicts) > limit:
            continue
        per_state[st] = per_state.get(st, 0) + 1
        shown.append(c)
        if len(shown) == limit:
            break
    n_rr = len(rr)
    more = f" (and {len(conflicts) - len(shown)} more)" if len(conflicts) > len(shown) else ""
    return (f"not LALR(1): the {what} has {len(conflicts)} conflict(s) ({n_rr} reduce/reduce, {len(sr)} "
            f"shift/reduce): " + "; ".join(shown) + more)
