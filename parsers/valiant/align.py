"""Token/terminal alignment (paper section 6): the terminal tree and each token's tuples.

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

Trie children are only created for terminal pairs that can be adjacent in some sentence (``follow``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .lexer import Lexer


@dataclass
class Alignment:
    node_parent: np.ndarray    # int32 [N]
    node_term: np.ndarray      # int32 [N] (-1 for the root)
    node_depth: np.ndarray     # int32 [N]
    child_start: np.ndarray    # int32 [N+1] CSR of children (sorted by terminal)
    child_ids: np.ndarray      # int32
    bnd_start: np.ndarray      # int64 [2, N+1]
    bnd_tok: list              # two int32 arrays
    call_start: np.ndarray     # int64 [G+1]
    call_tok: np.ndarray       # int32
    cont_xstart: np.ndarray    # int64 [G+1] into cont_nodes / cont_nstart
    cont_nodes: np.ndarray     # int32 node of each (x, node) group
    cont_nstart: np.ndarray    # int64 [groups+1] into cont_tok
    cont_tok: np.ndarray       # int32

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
            "cont_nstart": self.cont_nstart, "cont_tok": self.cont_tok,
        }

    @classmethod
    def from_arrays(cls, a) -> "Alignment":
        return cls(
            a["node_parent"], a["node_term"], a["node_depth"], a["child_start"], a["child_ids"], a["bnd_start"],
            [a["bnd_tok0"], a["bnd_tok1"]], a["call_start"], a["call_tok"], a["cont_xstart"], a["cont_nodes"],
            a["cont_nstart"], a["cont_tok"],
        )


class _Trie:
    def __init__(self, follow: np.ndarray):
        self.parent = [-1]
        self.term = [-1]
        self.depth = [0]
        self.kids: dict[tuple[int, int], int] = {}
        self.follow = follow

    def child(self, node: int, t: int) -> int:
        key = (node, t)
        c = self.kids.get(key)
        if c is None:
            last = self.term[node]
            if last >= 0 and not self.follow[last, t]:
                return -1
            c = self.kids[key] = len(self.parent)
            self.parent.append(node)
            self.term.append(t)
            self.depth.append(self.depth[node] + 1)
        return c


class Aligner:
    def __init__(self, lex: Lexer, follow: np.ndarray):
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
            for b in np.flatnonzero(row >= 0).tolist():
                self.starts[b].append((u, int(row[b])))
        self.ng = ng
        self._memo: dict[bytes, frozenset] = {}

    def boundary(self, s: bytes) -> frozenset:
        """{(node, first_piece_ignored)} for the boundary walk of ``s`` (memoised)."""
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
        for b in s[1:]:
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
        out = frozenset((node, f) for node, _, f in cur)
        self._memo[s] = out
        return out

    def build(self, token_bytes: list[bytes], eos_id: int) -> Alignment:
        lex = self.lex
        G = lex.n_states
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
        call: list[list[int]] = [[] for _ in range(G)]
        cont: list[dict[int, set[int]]] = [{} for _ in range(G)]
        trans, accept = self.trans, self.accept
        for x in range(G):
            row = trans[x]
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
        call_start = np.zeros(G + 1, dtype=np.int64)
        call_start[1:] = np.cumsum([len(set(c)) for c in call])
        call_tok = np.array([v for c in call for v in sorted(set(c))], dtype=np.int32)
        cont_xstart = np.zeros(G + 1, dtype=np.int64)
        cont_xstart[1:] = np.cumsum([len(c) for c in cont])
        nodes, nstart, ctok = [], [0], []
        for c in cont:
            for node in sorted(c):
                nodes.append(node)
                ctok.extend(sorted(c[node]))
                nstart.append(len(ctok))
        return Alignment(
            parent, term, depth, child_start, child_ids, bnd_start, bnd_tok, call_start, call_tok, cont_xstart,
            np.array(nodes, dtype=np.int32), np.array(nstart, dtype=np.int64), np.array(ctok, dtype=np.int32),
        )


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
    * ``cont``: (x, v, tok) when tok is in ``cont_all[x]`` (allowed whenever x is) or listed for x at a proper
      ancestor of v.

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
        np.array(nstart, dtype=np.int64), np.array(ctok, dtype=np.int32))
