r"""Token/terminal alignment (paper section 6): the terminal tree and each token's tuples.

Scannerless lexing makes the "current lexer state" a set of configurations ``(chart, x)``: ``chart`` is
the chart after the terminals committed on that branch, ``x`` a global DFA state of the piece in progress
(terminal ``term(x)``, not yet committed to the chart). A token with bytes ``w`` is walked from ``x`` as
follows: ``term(x)``'s DFA reads on; wherever it is in a final state the piece may end (at offset ``j``,
``0 <= j < len(w)``; a piece still in progress at the token's end is never closed inside the token), and
from that *boundary* new pieces start: any grammar terminal, or an %ignored terminal. So with
``b = chart + term(x)`` (or ``chart`` when ``term(x)`` is ignored), ``w`` is allowed from ``(chart, x)`` iff

* ``x`` reads all of ``w`` staying live (``cont_all[x]``; ``chart + term(x)`` is viable by construction), or
* ``x`` is final after ``w[:j]`` (``j = 0`` allowed when ``x`` itself is final) and some terminal sequence
  ``seq`` that the boundary walk of ``w[j:]`` can start has ``b + seq`` viable.

The boundary walk of a byte string ``s`` gives the sequences of *grammar* terminals started in it
(ignored pieces are invisible to the chart; the last piece is in progress at the end). Those sequences
are nodes of one global trie ``T`` (the paper's flat array of terminal sequences); a token's tuples are
``<x, seq node>`` pairs, stored inverted (node -> tokens) so a mask touches only viable nodes:

* ``bnd[0]`` node -> tokens whose whole-token boundary walk starts with a grammar terminal,
* ``bnd[1]`` node -> tokens whose walk starts with an ignored piece (not allowed at the very start),
* ``cont_all`` x -> tokens that ``x`` reads entirely,
* ``cont`` x -> (node, token) for the walks that end ``term(x)`` at some ``1 <= j < len(w)``.

``cont_all`` and ``cont`` depend on ``x`` only through its residual class (``lexer.residual_classes``: the byte
strings it reads and where it is final; the boundary walk starts at the trie's root whatever ``term(x)`` is, and
the search checks the first terminal against the chart), so both are kept once per class (``x_class``), and a
mask's lexer states become classes where a base is planned (``store_mask._plan``).

Trie children are only created for terminal pairs that can be adjacent in some sentence (``follow``).

*Merged boundaries.* Where terminals overlap and may follow one another (``\w+`` beside ``[a-z]+``, a name beside
a number), the bytes of one token can be cut into exponentially many terminal sequences, and so would its trie
nodes be. A walk that holds more than ``max_states`` (trie node, DFA state) pairs after some byte is done again
as a *merged walk*, on a lattice of boundaries, as the reference and the committed chart do: every piece that
ends at one inner byte position ends at **one** trie node, the boundary after the previous one (its parent),
whose chart is a lattice step (``device.chart_step_edges``) holding an edge ``(row, t)`` per piece:
terminal ``t`` spans from the ancestor ``row`` levels above the parent to the new boundary. A merged node has
``node_term = -1`` and its edges in ``merge_start / merge_row / merge_term``; it is viable iff some edge's
terminal is in EXPECT of the boundary the edge starts at. The tuples of a merged walk are the usual
``child(start, t)`` of its pieces in progress at the end (``start`` a node of the chain). One chain per walk,
one state per (boundary, DFA state): polynomial in the token's length, and shared between tokens of one lexical
shape. The search takes no idem shortcut (``device_search.certify``) on the path to a merged node
(:func:`alias_blocked`), so along it trie depth is tier position, which the rows rely on.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .lexer import Lexer


@dataclass
class Alignment:
    node_parent: np.ndarray    # int32 [N]
    node_term: np.ndarray      # int32 [N] (-1 for the root and for merged boundaries)
    node_depth: np.ndarray     # int32 [N]
    child_start: np.ndarray    # int32 [N+1] CSR of children (sorted by terminal)
    child_ids: np.ndarray      # int32
    bnd_start: np.ndarray      # int64 [2, N+1]
    bnd_tok: list              # two int32 arrays
    call_start: np.ndarray     # int64 [C+1] (C residual classes of lexer states: ``x_class``)
    call_tok: np.ndarray       # int32
    cont_xstart: np.ndarray    # int64 [C+1] into cont_nodes / cont_nstart
    cont_nodes: np.ndarray     # int32 node of each (class, node) group
    cont_nstart: np.ndarray    # int64 [groups+1] into cont_tok
    cont_tok: np.ndarray       # int32
    merge_start: np.ndarray    # int64 [N+1] CSR of each node's merged edges (empty for a node with a terminal)
    merge_row: np.ndarray      # int32: the edge starts ``row`` levels above the node's parent
    merge_term: np.ndarray     # int32: the terminal the edge spans
    x_class: np.ndarray        # int32 [G]: lexer state -> residual class, the row of its call/cont lists

    @property
    def n_nodes(self) -> int:
        return int(self.node_parent.size)

    @property
    def max_depth(self) -> int:
        return int(self.node_depth.max()) if self.node_depth.size else 0

    def arrays(self) -> dict:
        return {
            "node_parent": self.node_parent, "node_term": self.node_term, "node_depth": self.node_depth,
            "child_start": self.child_start, "child_ids": self.child_ids, "bnd_start": self.bnd_start,
            "bnd_tok0": self.bnd_tok[0], "bnd_tok1": self.bnd_tok[1], "call_start": self.call_start,
            "call_tok": self.call_tok, "cont_xstart": self.cont_xstart, "cont_nodes": self.cont_nodes,
            "cont_nstart": self.cont_nstart, "cont_tok": self.cont_tok, "merge_start": self.merge_start,
            "merge_row": self.merge_row, "merge_term": self.merge_term, "x_class": self.x_class,
        }

    @classmethod
    def from_arrays(cls, a) -> "Alignment":
        return cls(
            a["node_parent"], a["node_term"], a["node_depth"], a["child_start"], a["child_ids"], a["bnd_start"],
            [a["bnd_tok0"], a["bnd_tok1"]], a["call_start"], a["call_tok"], a["cont_xstart"], a["cont_nodes"],
            a["cont_nstart"], a["cont_tok"], a["merge_start"], a["merge_row"], a["merge_term"], a["x_class"],
        )


class _Trie:
    def __init__(self, follow: np.ndarray):
        self.parent = [-1]
        self.term = [-1]
        self.depth = [0]
        self.edges: list[tuple] = [()]      # a merged node's sorted (row, terminal) edges, () otherwise
        self.kids: dict[tuple[int, int], int] = {}
        self.merged_kids: dict[tuple[int, tuple], int] = {}
        self.follow = follow

    def _new(self, node: int, t: int, edges: tuple) -> int:
        self.parent.append(node)
        self.term.append(t)
        self.depth.append(self.depth[node] + 1)
        self.edges.append(edges)
        return len(self.parent) - 1

    def can_follow(self, node: int, t: int) -> bool:
        """May terminal ``t`` start right after node ``node``'s boundary (some terminal ending there may precede
        it)?"""
        if node == 0:
            return True
        last = self.term[node]
        if last >= 0:
            return bool(self.follow[last, t])
        return any(self.follow[e, t] for _, e in self.edges[node])

    def child(self, node: int, t: int) -> int:
        key = (node, t)
        c = self.kids.get(key)
        if c is None:
            if not self.can_follow(node, t):
                return -1
            c = self.kids[key] = self._new(node, t, ())
        return c

    def merged(self, tip: int, ends) -> int:
        """The boundary after ``tip`` where the pieces ``ends`` (``(start node, terminal)``, every start node on the
        chain of ``tip``) end: a child of ``tip`` with terminal ``t`` if that is the only piece and it began at
        ``tip``, else a merged node."""
        edges = tuple(sorted({(self.depth[tip] - self.depth[s], t) for s, t in ends}))
        if edges[0][0] == 0 and len(edges) == 1:
            return self.child(tip, edges[0][1])
        key = (tip, edges)
        c = self.merged_kids.get(key)
        if c is None:
            c = self.merged_kids[key] = self._new(tip, -1, edges)
        return c


class Aligner:
    def __init__(self, lex: Lexer, follow: np.ndarray, max_states: int = 256):
        self.lex = lex
        self.trie = _Trie(follow)
        self.trans = lex.trans
        self.accept = lex.accept
        self.term_of = lex.term_of
        ng = lex.n_grammar
        # byte -> [(lexer terminal, state after that first byte)]
        self.starts: list[list[tuple[int, int]]] = [[] for _ in range(256)]
        for u, s0 in enumerate(lex.start_of.tolist()):
            if s0 < 0:
                continue
            row = self.trans[s0]
            for b in np.flatnonzero(row >= 0).tolist():     # a piece is named by its terminal's class
                self.starts[b].append((int(self.term_of[s0]), int(row[b])))   # (compiled.terminal_classes)
        self.ng = ng
        self.max_states = max_states
        self._memo: dict[bytes, frozenset] = {}

    def boundary(self, s: bytes) -> frozenset:
        """{(node, first_piece_ignored)} for the boundary walk of ``s`` (memoised): one trie node per terminal
        sequence, or, when more than ``max_states`` (node, DFA state, flag) triples are alive after some byte, the
        merged walk's nodes (:meth:`merged_walk`; the nodes the first walk made up to that byte stay in the trie)."""
        got = self._memo.get(s)
        if got is not None:
            return got
        trie, trans, accept, ng = self.trie, self.trans, self.accept, self.ng
        cur = set()
        for u, g in self.starts[s[0]]:
            if u >= ng:
                cur.add((0, g, True))
            else:
                c = trie.child(0, u)
                if c >= 0:
                    cur.add((c, g, False))
        over = len(cur) > self.max_states
        for b in s[1:]:
            if over:
                break
            nxt = set()
            starts_b = self.starts[b]
            for node, g, f in cur:
                g2 = trans[g, b]
                if g2 >= 0:
                    nxt.add((node, int(g2), f))
                if accept[g]:
                    for u, gu in starts_b:
                        if u >= ng:
                            nxt.add((node, gu, f))
                        else:
                            c = trie.child(node, u)
                            if c >= 0:
                                nxt.add((c, gu, f))
            cur = nxt
            if not cur:
                break
            over = len(cur) > self.max_states
        if over:
            out = frozenset({(v, False) for v in self.merged_walk(s, False)}
                            | {(v, True) for v in self.merged_walk(s, True)})
        else:
            out = frozenset((node, f) for node, _, f in cur)
        self._memo[s] = out
        return out

    def merged_walk(self, s: bytes, first_ignored: bool) -> set[int]:
        """The tuple nodes of the walk of ``s`` whose first piece is ignored (or a grammar terminal) on a lattice of
        boundaries: a state is (index of its piece's start boundary in the chain, DFA state); at each inner position
        the grammar pieces that end there make one boundary node (:meth:`_Trie.merged`), made only when some piece
        starts from it; a piece after an ignored one starts where the ignored piece began."""
        trie, trans, accept, term_of, ng = self.trie, self.trans, self.accept, self.term_of, self.ng
        chain = [0]
        cur = {(0, g) for u, g in self.starts[s[0]] if (u >= ng) == first_ignored}
        for b in s[1:]:
            starts_b = self.starts[b]
            nxt = set()
            ends = []
            for k, g in cur:
                g2 = trans[g, b]
                if g2 >= 0:
                    nxt.add((k, int(g2)))
                if accept[g]:
                    u = int(term_of[g])
                    if u < ng:                  # (a piece only starts where it may follow)
                        ends.append((k, u))
                    else:                   # an ignored piece ends: pieces start where it began
                        for u2, g2 in starts_b:
                            if u2 >= ng or trie.can_follow(chain[k], u2):
                                nxt.add((k, g2))
            if ends:
                fol = trie.follow
                new = [g2 for u2, g2 in starts_b if u2 >= ng or any(fol[t, u2] for _, t in ends)]
                if new:
                    chain.append(trie.merged(chain[-1], [(chain[k], t) for k, t in ends]))
                    nxt.update((len(chain) - 1, g2) for g2 in new)
            cur = nxt
            if not cur:
                break
        out = set()
        for k, g in cur:
            u = int(term_of[g])
            v = chain[k] if u >= ng else trie.child(chain[k], u)
            if v >= 0:
                out.add(v)
        return out

    def build(self, token_bytes: list[bytes], eos_id: int) -> Alignment:
        lex = self.lex
        toks = [(i, b) for i, b in enumerate(token_bytes) if b and i != eos_id]
        bnd: list[dict[int, list[int]]] = [{}, {}]
        for i, b in toks:
            for node, f in self.boundary(b):
                bnd[int(f)].setdefault(node, []).append(i)
        # token trie for the continuation walks
        root: dict = {}
        for i, b in toks:
            d = root
            for byte in b:
                d = d.setdefault(byte, {})
            d.setdefault(None, []).append(i)
        reps = class_reps(lex.x_class)
        C = reps.size
        call: list[list[int]] = [[] for _ in range(C)]
        cont: list[dict[int, set[int]]] = [{} for _ in range(C)]
        trans, accept = self.trans, self.accept
        for x, row in enumerate(trans[reps]):     # x: the class, walked from its first state
            stack = [(root[b], int(row[b]), 1, (b,)) for b in np.flatnonzero(row >= 0).tolist() if b in root]
            while stack:
                d, g, depth, path = stack.pop()
                ends = d.get(None)
                if ends:
                    call[x].extend(ends)
                if accept[g]:
                    # close term(x) after `depth` bytes, boundary walk of the rest of every longer token below
                    for i, tail in _tokens_below(d, ()):
                        if tail:
                            for node, _f in self.boundary(bytes(tail)):
                                cont[x].setdefault(node, set()).add(i)
                grow = trans[g]
                for b, sub in d.items():
                    if b is not None and grow[b] >= 0:
                        stack.append((sub, int(grow[b]), depth + 1, path + (b,)))
        t = self.trie
        n = len(t.parent)
        parent = np.array(t.parent, dtype=np.int32)
        term = np.array(t.term, dtype=np.int32)
        depth = np.array(t.depth, dtype=np.int32)
        order = np.lexsort((term[1:], parent[1:])) + 1 if n > 1 else np.zeros(0, np.int64)
        child_start = np.zeros(n + 1, dtype=np.int32)
        if n > 1:
            np.add.at(child_start, parent[1:] + 1, 1)
        child_start = np.cumsum(child_start).astype(np.int32)
        child_ids = order.astype(np.int32)
        bnd_start = np.zeros((2, n + 1), dtype=np.int64)
        bnd_tok = []
        for f in range(2):
            lists = [sorted(bnd[f].get(k, ())) for k in range(n)]
            bnd_start[f, 1:] = np.cumsum([len(x) for x in lists])
            bnd_tok.append(np.array([v for x in lists for v in x], dtype=np.int32))
        call_start = np.zeros(C + 1, dtype=np.int64)
        call_start[1:] = np.cumsum([len(set(c)) for c in call])
        call_tok = np.array([v for c in call for v in sorted(set(c))], dtype=np.int32)
        cont_xstart = np.zeros(C + 1, dtype=np.int64)
        cont_xstart[1:] = np.cumsum([len(c) for c in cont])
        nodes, nstart, ctok = [], [0], []
        for c in cont:
            for node in sorted(c):
                nodes.append(node)
                ctok.extend(sorted(c[node]))
                nstart.append(len(ctok))
        merge_start = np.zeros(n + 1, dtype=np.int64)
        merge_start[1:] = np.cumsum([len(e) for e in t.edges])
        flat = [e for es in t.edges for e in es]
        return Alignment(
            parent, term, depth, child_start, child_ids, bnd_start, bnd_tok, call_start, call_tok, cont_xstart,
            np.array(nodes, dtype=np.int32), np.array(nstart, dtype=np.int64), np.array(ctok, dtype=np.int32),
            merge_start, np.array([r for r, _ in flat], dtype=np.int32), np.array([e for _, e in flat], dtype=np.int32),
            lex.x_class.astype(np.int32),
        )


def class_reps(x_class: np.ndarray) -> np.ndarray:
    """The first lexer state of each residual class, by class."""
    return np.unique(x_class, return_index=True)[1].astype(np.int64)   # classes are 0 .. C-1


#: :func:`alias_blocked`'s bits: no idem shortcut; a piece of a merged node below spans this node
NO_ALIAS, SPANNED = 1, 2


def alias_blocked(al: Alignment) -> np.ndarray:
    """uint8 [N]: bit :data:`NO_ALIAS` for a merged node and each of its ancestors. The search takes no idem
    shortcut for such a node (a merged edge's row counts the tiers between its ends, so each node on the path needs
    its own). Bit :data:`SPANNED` for a node strictly inside some merged edge below it (the edge ``(row r, t)`` of
    merged node ``w`` begins at ``w``'s ancestor ``r + 1`` levels up and spans the ``r`` nodes between): the search
    of a chain walks such a node's subtree even when the node itself is not viable, since the piece spanning it may
    be (``device_search.dfs``)."""
    merged = np.diff(al.merge_start) > 0
    flags = merged.astype(np.uint8)
    par = al.node_parent
    for v in np.flatnonzero(flags)[::-1].tolist():   # a parent's id is smaller than its child's
        u = int(par[v])
        while u > 0 and not flags[u] & NO_ALIAS:
            flags[u] |= NO_ALIAS
            u = int(par[u])
    for w in np.flatnonzero(merged).tolist():
        r = int(al.merge_row[al.merge_start[w]:al.merge_start[w + 1]].max())
        u = int(par[w])
        for _ in range(r):
            if u <= 0:
                break
            flags[u] |= SPANNED
            u = int(par[u])
    if flags.any():
        flags[0] |= NO_ALIAS
    return flags


def span_edges(al: Alignment) -> tuple:
    """CSR over trie nodes ``(start int64 [N+1], row int32, term int32)``: the pieces of merged boundaries below a
    node that span it (the nodes :func:`alias_blocked` marks :data:`SPANNED`). A piece ``(row r, t)`` of merged
    node ``w`` begins at ``w``'s ancestor ``r + 1`` levels up; for a node ``v`` it spans, ``row`` is where it
    begins counted from ``v``'s parent (0: the parent, 1: its parent ...), as a merged edge's row counts from the
    merged node's parent. ``v``'s subtree can hold a viable node only if one of its pieces is viable where it
    begins: ``t`` in EXPECT there (``device_search.dfs``, ``cpu_mask.needed_chain``)."""
    par = al.node_parent
    per: dict = {}
    for w in np.flatnonzero(np.diff(al.merge_start) > 0).tolist():
        for i in range(int(al.merge_start[w]), int(al.merge_start[w + 1])):
            r, t = int(al.merge_row[i]), int(al.merge_term[i])
            u = int(par[w])
            for delta in range(1, r + 1):
                if u <= 0:
                    break
                per.setdefault(u, set()).add((r - delta, t))
                u = int(par[u])
    start = np.zeros(al.n_nodes + 1, dtype=np.int64)
    for u, s in per.items():
        start[u + 1] = len(s)
    np.cumsum(start, out=start)
    row = np.empty(int(start[-1]), dtype=np.int32)
    term = np.empty(int(start[-1]), dtype=np.int32)
    for u, s in per.items():
        k = np.array(sorted(s), dtype=np.int32).reshape(-1, 2)
        row[start[u]:start[u + 1]] = k[:, 0]
        term[start[u]:start[u + 1]] = k[:, 1]
    return start, row, term


def _tokens_below(d: dict, prefix: tuple):
    """(token id, bytes below ``d``) for every token in the sub-trie ``d``."""
    stack = [(d, prefix)]
    while stack:
        node, pre = stack.pop()
        for k, v in node.items():
            if k is None:
                for i in v:
                    yield i, pre
            else:
                stack.append((v, pre + (k,)))


def prune_dominated(al: Alignment) -> Alignment:
    """The same alignment without the tuples that can never decide a token (readable form; ``align_nb`` has the
    numba one, tested equal). The viable trie nodes of a search are closed under prefixes (a child is visited
    only from a viable parent), so a token listed at node ``v`` is already allowed by a listing at a proper
    ancestor ``u`` of ``v`` under the same condition. Dropped:

    * ``bnd[f]``: (v, tok) when tok is listed in ``bnd[f]`` at a proper ancestor of v, and, for ``f = 1``, also
      when it is in ``bnd[0]`` at v or an ancestor (``bnd[1]`` is used only together with ``bnd[0]``);
    * ``cont``: (x, v, tok) (``x`` a class) when tok is in ``cont_all[x]`` (allowed whenever x is) or listed for
      x at a proper ancestor of v.

    Fewer tuples make masks cheaper, and trie nodes left without tokens (nor needed descendants) are no longer
    searched: in Spider with Qwen3, English words such as ``class`` (also NAME AS NAME) are NAME tokens already."""
    n = al.n_nodes
    par = al.node_parent.tolist()

    def ancestors(v):
        out = []
        v = par[v]
        while v > 0:
            out.append(v)
            v = par[v]
        return out

    lists = []
    for f in range(2):
        st, tk = al.bnd_start[f], al.bnd_tok[f]
        lists.append({v: set(tk[st[v]:st[v + 1]].tolist()) for v in range(n) if st[v + 1] > st[v]})
    kept = [{}, {}]
    for f in range(2):
        for v, toks in lists[f].items():
            up = ancestors(v)
            dom = set()
            for u in up:
                dom |= lists[f].get(u, set())
            if f == 1:
                for u in up + [v]:
                    dom |= lists[0].get(u, set())
            rest = toks - dom
            if rest:
                kept[f][v] = rest
    bnd_start = np.zeros((2, n + 1), dtype=np.int64)
    bnd_tok = []
    for f in range(2):
        rows = [sorted(kept[f].get(v, ())) for v in range(n)]
        bnd_start[f, 1:] = np.cumsum([len(r) for r in rows])
        bnd_tok.append(np.array([t for r in rows for t in r], dtype=np.int32))
    G = al.call_start.size - 1
    nodes, nstart, ctok, xstart = [], [0], [], [0]
    for x in range(G):
        call = set(al.call_tok[al.call_start[x]:al.call_start[x + 1]].tolist())
        groups = {int(al.cont_nodes[g]): set(al.cont_tok[al.cont_nstart[g]:al.cont_nstart[g + 1]].tolist())
                  for g in range(al.cont_xstart[x], al.cont_xstart[x + 1])}
        for v in sorted(groups):
            dom = set(call)
            for u in ancestors(v):
                dom |= groups.get(u, set())
            rest = sorted(groups[v] - dom)
            if rest:
                nodes.append(v)
                ctok.extend(rest)
                nstart.append(len(ctok))
        xstart.append(len(nodes))
    return Alignment(
        al.node_parent, al.node_term, al.node_depth, al.child_start, al.child_ids, bnd_start, bnd_tok, al.call_start,
        al.call_tok, np.array(xstart, dtype=np.int64), np.array(nodes, dtype=np.int32),
        np.array(nstart, dtype=np.int64), np.array(ctok, dtype=np.int32), al.merge_start, al.merge_row, al.merge_term,
        al.x_class)
