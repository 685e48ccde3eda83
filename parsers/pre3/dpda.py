"""The DPDA of seed 004 (Pre³) built from LALR(1) tables: prefix-conditioned edges, direct jumps, aggregation.

A *prefix-conditioned edge* is ``(src, symbols, cond, pop, push, kind, arg)``: in DPDA state ``src``, on an
input terminal in ``symbols``, if the stack holds ``cond`` (pairs ``(depth, LR state)``, depth 0 = the top),
pop ``pop`` states, push ``push`` (bottom to top), then by ``kind``:

* ``SHIFT``: consume the terminal: push ``shift_to[top][a]`` (the LR state on top after the pushes shifts it),
  the DPDA is back in the LR state on top of the stack;
* ``ACCEPT``: the terminal is ``$END`` and the sentence is complete;
* ``TO_R``: go to reduce state ``arg`` without consuming (see below);
* ``GOTO`` (one-step DPDA only): go to the LR state on top without consuming.

DPDA states are the LR states (``0 .. n_lr-1``; between two terminals the state is the top of the stack) and
*reduce states* ``n_lr + i`` ("nonterminal A was just reduced: take the goto from the state now on top").

Three forms, each a :class:`DPDA` (readable: Python objects, a reference interpreter ``feed``):

1. :func:`one_step`: the LR parser itself as a DPDA: a shift edge per shift action, a reduce edge per reduce
   action (pop the rule's length, go to reduce state A), and per reduce state one goto edge per LR state
   with a goto on A (condition: that state on top).
2. :func:`direct_jumps` (edge merging): every chain of reduce/goto edges followed by a shift is fused into one
   edge whose condition is the stack prefix the chain reads. A chain branches where a reduction exposes a real
   stack state that is not known yet; it is cut where it would read a configuration ``(A, a)`` (A just
   reduced, lookahead ``a``, nothing of its own left on the stack) already met on the same branch, i.e. a
   loop of the reduction graph (``not not not x``, ``- - - 1``): the cut edge ends in reduce state A, whose own
   edges for ``a`` are merged the same way, so one loop turn is one edge and the edge set is finite. A
   condition deeper than ``max_depth`` is cut the same way (a size bound; never needed on our grammars).
   Reduce states that no cut targets disappear.
3. :func:`aggregate`: edges that differ only in the input terminal become one edge with a symbol set (the
   shift target is looked up per terminal, so shift edges of different terminals merge too).

:func:`pack` turns a DPDA into flat int32 arrays (what the numba and CUDA kernels read); ``PackedDPDA.feed``
is the same interpreter over the arrays, tested equal to the readable one.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gcdbench.parsers.base import CompileError
from gcdbench.parsers.pre3.lalr import Tables

SHIFT, ACCEPT, TO_R, GOTO = 0, 1, 2, 3
KIND_NAMES = {SHIFT: "shift", ACCEPT: "accept", TO_R: "reduce-state", GOTO: "goto"}


@dataclass(frozen=True)
class Edge:
    src: int
    syms: frozenset
    cond: tuple                 # ((depth, state), ...) sorted by depth
    pop: int
    push: tuple
    kind: int
    arg: int = -1

    def key(self) -> tuple:
        """Everything but the input symbols (what aggregation compares)."""
        return (self.src, self.cond, self.pop, self.push, self.kind, self.arg)


@dataclass
class DPDA:
    """Readable DPDA: edges as Python objects; ``feed`` is the reference interpreter."""

    n_lr: int
    n_sym: int                       # terminals, $END last
    end_sym: int
    reduce_nt: list[int]             # reduce state n_lr + i -> nonterminal id
    edges: list[Edge]
    shift_to: dict                   # (LR state, terminal) -> LR state
    sym_names: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    _index: dict | None = field(default=None, repr=False)

    @property
    def n_states(self) -> int:
        return self.n_lr + len(self.reduce_nt)

    def index(self) -> dict:
        """(src, symbol) -> candidate edges."""
        if self._index is None:
            idx: dict = {}
            for e in self.edges:
                for a in e.syms:
                    idx.setdefault((e.src, a), []).append(e)
            self._index = idx
        return self._index

    def match(self, src: int, a: int, stack: list) -> Edge | None:
        """The edge whose condition the stack meets (at most one: conditions of a key are exclusive)."""
        n = len(stack)
        for e in self.index().get((src, a), ()):
            if all(d < n and stack[n - 1 - d] == s for d, s in e.cond):
                return e
        return None

    def feed(self, stack: list, a: int) -> str | None:
        """Run terminal ``a`` on ``stack`` (LR states, bottom first; changed in place).
        Returns 'shift', 'accept', or None (``a`` is not allowed; the stack is then unspecified)."""
        st = stack[-1]
        for _ in range(len(stack) + 2 * self.n_states + 8):
            e = self.match(st, a, stack)
            if e is None:
                return None
            if e.pop:
                del stack[len(stack) - e.pop:]
            stack.extend(e.push)
            if e.kind == SHIFT:
                stack.append(self.shift_to[(stack[-1], a)])
                return "shift"
            if e.kind == ACCEPT:
                return "accept"
            st = e.arg if e.kind == TO_R else stack[-1]
        raise RuntimeError("pre3: DPDA run did not terminate (a construction bug)")

    def describe(self, e: Edge) -> str:
        """One line per edge, for reading the automaton."""
        name = (lambda s: f"q{s}" if s < self.n_lr else f"R{s - self.n_lr}")
        syms = ",".join(sorted(self.sym_names[a] if self.sym_names else str(a) for a in e.syms))
        cond = " ".join(f"[{d}]=q{s}" for d, s in e.cond) or "-"
        tgt = {SHIFT: "shift", ACCEPT: "accept", GOTO: "goto top", TO_R: f"-> {name(e.arg) if e.arg >= 0 else ''}"}
        return f"{name(e.src)} on {{{syms}}} if {cond}: pop {e.pop} push {list(e.push)} {tgt[e.kind]}"


def _lr_parts(t: Tables):
    """Shift / reduce / goto views of the tables without the $END shift (the parse accepts before it)."""
    n_t = t.cfg.n_t
    end = n_t - 1
    shift_to: dict = {}
    reduce: dict = {}
    for q, act in enumerate(t.action):
        for a, (sh, arg) in act.items():
            if sh and a != end:
                shift_to[(q, a)] = arg
            elif not sh:
                lhs, rhs = t.cfg.rules[arg]
                reduce[(q, a)] = (lhs, len(rhs))
    goto_sources: dict[int, list[int]] = {}
    for q, gt in enumerate(t.goto):
        for A in gt:
            goto_sources.setdefault(A, []).append(q)
    return shift_to, reduce, goto_sources


def one_step(t: Tables) -> DPDA:
    """The LR parser as a DPDA: one edge per LR action, reduce states for the gotos."""
    n_lr = t.n_states
    n_sym = t.cfg.n_t
    end = n_sym - 1
    shift_to, reduce, goto_sources = _lr_parts(t)
    r_of = {A: n_lr + i for i, A in enumerate(sorted(goto_sources))}
    edges = [Edge(q, frozenset([a]), (), 0, (), SHIFT) for (q, a) in sorted(shift_to)]
    edges += [Edge(q, frozenset([a]), (), n, (), TO_R, r_of[A]) for (q, a), (A, n) in sorted(reduce.items())]
    every = frozenset(range(n_sym))
    for A, srcs in sorted(goto_sources.items()):
        for X in srcs:
            g = t.goto[X][A]
            if X == t.start_state and g == t.end_state:
                edges.append(Edge(r_of[A], frozenset([end]), ((0, X),), 0, (), ACCEPT))
                edges.append(Edge(r_of[A], every - {end}, ((0, X),), 0, (g,), GOTO))
            else:
                edges.append(Edge(r_of[A], every, ((0, X),), 0, (g,), GOTO))
    d = DPDA(n_lr, n_sym, end, sorted(goto_sources), edges, shift_to, list(t.cfg.terminals))
    d.stats = {"states": d.n_states, "edges": len(edges)}
    return d


class _Merger:
    """Symbolic runs of the LR driver for one lookahead, reading the real stack lazily (see module doc).

    A *branch point* is a run that has popped everything it pushed and must read the real stack to take the
    goto on a nonterminal A: its future depends only on ``(A, a)`` and the stack below, so its expansion
    ``E(A, a)`` (a list of leaves relative to that depth) is computed once. At a branch point a run either
    inlines ``E(A, a)`` (direct jumps: the condition grows by what E reads) or, when ``(A, a)`` is being
    expanded on the current path (a loop) or ``E(A, a)`` has more than ``inline_max`` leaves (to keep the edge
    set small: inlining multiplies the branches of successive reads), ends in reduce state A.
    """

    def __init__(self, t: Tables, inline_max: int, max_edges: int):
        self.t = t
        self.n_lr = t.n_states
        self.end = t.cfg.n_t - 1
        self.shift_to, self.reduce, self.goto_sources = _lr_parts(t)
        self.inline_max = inline_max
        self.max_edges = max_edges
        self.memo: dict[tuple[int, int], list] = {}
        self.active: set[tuple[int, int]] = set()
        self.cut_targets: set[tuple[int, int]] = set()   # (A, a): reduce state A must have edges for a
        self.n_cuts = 0
        self.n_leaves = 0

    def expand(self, A: int, a: int) -> list:
        """E(A, a): leaves ``(cond, pop, push, kind, arg)`` of the runs from a branch point on A at depth 0."""
        hit = self.memo.get((A, a))
        if hit is not None:
            return hit
        self.active.add((A, a))
        out: list = []
        for X in self.goto_sources.get(A, ()):
            self.run(a, (), 0, {0: X}, A, out)
        self.active.discard((A, a))
        self.memo[(A, a)] = out
        return out

    def run(self, a: int, S: tuple, d: int, known: dict, pending: int, out: list):
        """Continue a run: ``S`` the states this run pushed (top last), ``d`` real states popped, ``known`` real
        states read ({depth: state}), ``pending`` the nonterminal awaiting its goto (-1: none)."""
        t = self.t
        while True:
            if pending >= 0:
                A = pending
                if S:
                    X = S[-1]
                elif d in known:
                    X = known[d]
                else:   # branch point at depth d
                    key = (A, a)
                    sub = None if key in self.active else self.expand(A, a)
                    if sub is None or len(sub) > self.inline_max:
                        self.n_cuts += 1
                        self.cut_targets.add(key)
                        self._leaf(out, known, d, (), TO_R, A)
                    else:
                        for cond, pop, push, kind, arg in sub:
                            c = dict(known)
                            c.update((k + d, v) for k, v in cond)
                            self._leaf(out, c, d + pop, push, kind, arg)
                    return
                g = t.goto[X].get(A)
                if g is None:
                    return
                if a == self.end and g == t.end_state and X == t.start_state:
                    self._leaf(out, known, d, (), ACCEPT, -1)
                    return
                S = S + (g,)
                pending = -1
            top = S[-1] if S else known[d]
            if (top, a) in self.shift_to:
                self._leaf(out, known, d, S, SHIFT, -1)
                return
            red = self.reduce.get((top, a))
            if red is None:
                return
            A, n = red
            if n <= len(S):
                S = S[: len(S) - n]
            else:
                d += n - len(S)
                S = ()
            pending = A

    def _leaf(self, out, known, d, push, kind, arg):
        out.append((tuple(sorted(known.items())), d, push, kind, arg))
        self.n_leaves += 1
        if self.n_leaves > self.max_edges:
            raise CompileError(f"pre3: the DPDA exceeds max_edges={self.max_edges} edges (direct jumps); lower "
                               "inline_max")


def direct_jumps(t: Tables, *, inline_max: int, max_edges: int) -> DPDA:
    """Merge chains of reduce/goto edges and the shift that ends them into single edges (loop-aware).
    ``inline_max``, ``max_edges``: the engine's options of those names (Pre3Options)."""
    m = _Merger(t, inline_max, max_edges)
    n_lr = t.n_states
    n_sym = t.cfg.n_t
    leaves = []
    for q in range(n_lr):
        for a in range(n_sym):
            if (q, a) in m.shift_to or (q, a) in m.reduce:
                out: list = []
                m.run(a, (), 0, {0: q}, -1, out)
                # the top (depth 0) of an LR state's edge is the state itself: no need to test it
                leaves += [(q, a, tuple(c for c in cond if c[0] != 0), pop, push, kind, arg)
                           for cond, pop, push, kind, arg in out]
    # reduce states: one per nonterminal that some cut targets, with the edges E(A, a) of each cut lookahead
    r_index: dict[int, int] = {}
    done: set = set()
    while True:
        todo = sorted(m.cut_targets - done)
        if not todo:
            break
        for A, a in todo:
            done.add((A, a))
            src = n_lr + r_index.setdefault(A, len(r_index))
            leaves += [(src, a, cond, pop, push, kind, arg) for cond, pop, push, kind, arg in m.expand(A, a)]
    edges = []
    for src, a, cond, d, push, kind, arg in leaves:
        if kind == TO_R:
            arg = n_lr + r_index[arg]
        edges.append(Edge(src, frozenset([a]), cond, d, push, kind, arg))
    reduce_nt = [A for A, _i in sorted(r_index.items(), key=lambda kv: kv[1])]
    dp = DPDA(n_lr, n_sym, n_sym - 1, reduce_nt, edges, m.shift_to, list(t.cfg.terminals))
    dp.stats = {"states": dp.n_states, "edges": len(edges), "reduce_states": len(reduce_nt), "cuts": m.n_cuts,
                "max_condition": max((len(e.cond) for e in edges), default=0),
                "max_push": max((len(e.push) for e in edges), default=0)}
    return dp


def aggregate(dp: DPDA) -> DPDA:
    """Edges equal except for their input terminal become one edge over the set of terminals."""
    groups: dict[tuple, set] = {}
    order: list[tuple] = []
    for e in dp.edges:
        k = e.key()
        if k not in groups:
            groups[k] = set()
            order.append(k)
        groups[k] |= e.syms
    edges = [Edge(src, frozenset(groups[(src, cond, pop, push, kind, arg)]), cond, pop, push, kind, arg)
             for (src, cond, pop, push, kind, arg) in order]
    out = DPDA(dp.n_lr, dp.n_sym, dp.end_sym, dp.reduce_nt, edges, dp.shift_to, dp.sym_names)
    out.stats = {**dp.stats, "edges_aggregated": len(edges)}
    return out


# --------------------------------------------------------------------------------------------------
# packed form
# --------------------------------------------------------------------------------------------------
@dataclass
class PackedDPDA:
    """Flat int32 arrays of a DPDA (the kernels' input). Candidate edges of (state s, terminal a) are
    ``key_edge[key_ptr[s*n_sym+a] : key_ptr[s*n_sym+a+1]]``; edge e's condition is
    ``(cond_depth[i], cond_state[i])`` for i in ``cond_ptr[e] : cond_ptr[e+1]``, its push
    ``push_state[push_ptr[e] : push_ptr[e+1]]``; ``shift_to[q*n_sym+a]`` (-1: none)."""

    n_lr: int
    n_states: int
    n_sym: int
    key_ptr: np.ndarray
    key_edge: np.ndarray
    cond_ptr: np.ndarray
    cond_depth: np.ndarray
    cond_state: np.ndarray
    pop: np.ndarray
    push_ptr: np.ndarray
    push_state: np.ndarray
    kind: np.ndarray
    arg: np.ndarray
    shift_to: np.ndarray

    def arrays(self) -> tuple:
        """The arrays in the order of the kernels' record (``kernels.DPDA(*packed.arrays())``)."""
        return (self.key_ptr, self.key_edge, self.cond_ptr, self.cond_depth, self.cond_state, self.pop,
                self.push_ptr, self.push_state, self.kind, self.arg, self.shift_to)

    def feed(self, stack: list, a: int) -> str | None:
        """``DPDA.feed`` over the arrays (pure Python; tests compare the two)."""
        st = stack[-1]
        ns = self.n_sym
        for _ in range(len(stack) + 2 * self.n_states + 8):
            n = len(stack)
            k = st * ns + a
            found = -1
            for j in range(self.key_ptr[k], self.key_ptr[k + 1]):
                e = int(self.key_edge[j])
                ok = True
                for c in range(self.cond_ptr[e], self.cond_ptr[e + 1]):
                    d = int(self.cond_depth[c])
                    if d >= n or stack[n - 1 - d] != self.cond_state[c]:
                        ok = False
                        break
                if ok:
                    found = e
                    break
            if found < 0:
                return None
            e = found
            p = int(self.pop[e])
            if p:
                del stack[n - p:]
            stack.extend(int(x) for x in self.push_state[self.push_ptr[e]: self.push_ptr[e + 1]])
            kind = int(self.kind[e])
            if kind == SHIFT:
                stack.append(int(self.shift_to[stack[-1] * ns + a]))
                return "shift"
            if kind == ACCEPT:
                return "accept"
            st = int(self.arg[e]) if kind == TO_R else stack[-1]
        raise RuntimeError("pre3: DPDA run did not terminate (a construction bug)")


def pack(dp: DPDA) -> PackedDPDA:
    E = len(dp.edges)
    ns = dp.n_sym
    n_keys = dp.n_states * ns
    lists: list[list[int]] = [[] for _ in range(n_keys)]
    for i, e in enumerate(dp.edges):
        for a in sorted(e.syms):
            lists[e.src * ns + a].append(i)
    key_ptr = np.zeros(n_keys + 1, dtype=np.int32)
    key_ptr[1:] = np.cumsum([len(x) for x in lists])
    key_edge = np.array([i for x in lists for i in x], dtype=np.int32)
    cond_ptr = np.zeros(E + 1, dtype=np.int32)
    cond_ptr[1:] = np.cumsum([len(e.cond) for e in dp.edges])
    cond_depth = np.array([d for e in dp.edges for d, _s in e.cond], dtype=np.int32)
    cond_state = np.array([s for e in dp.edges for _d, s in e.cond], dtype=np.int32)
    push_ptr = np.zeros(E + 1, dtype=np.int32)
    push_ptr[1:] = np.cumsum([len(e.push) for e in dp.edges])
    push_state = np.array([s for e in dp.edges for s in e.push], dtype=np.int32)
    shift_to = np.full(dp.n_lr * ns, -1, dtype=np.int32)
    for (q, a), g in dp.shift_to.items():
        shift_to[q * ns + a] = g
    return PackedDPDA(
        dp.n_lr, dp.n_states, ns, key_ptr, key_edge, cond_ptr, cond_depth, cond_state,
        np.array([e.pop for e in dp.edges], dtype=np.int32), push_ptr, push_state,
        np.array([e.kind for e in dp.edges], dtype=np.int32), np.array([e.arg for e in dp.edges], dtype=np.int32),
        shift_to)
