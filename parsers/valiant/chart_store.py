"""The chart of one sequence (:class:`ChartStore`): tiers of bit rows in one arena, grown and extended by the
numba kernels of ``kernels_common``; what a fork owns in batch mode."""
from __future__ import annotations

import numpy as np

from .chart import PackedGrammar
from .kernels_common import extend, extend_edges


class ChartStore:
    """Chart nodes (one per committed terminal sequence) in one uint64 arena; tiers are never rewritten,
    a child node only adds its own tier, so branches share everything below them. Each node's (parent, depth,
    tier offset, ANC offset) is also a row of ``nodes`` (int64), from which the jitted code walks a path."""

    def __init__(self, g: PackedGrammar):
        self.g = g
        self.gp = g.packed
        self.mem = np.zeros(1 << 16, dtype=np.uint64)
        self.used = 0
        self.parent = [-1]
        self.term = [-1]
        self.depth = [0]
        self.tier_off = [-1]
        p = self._alloc(g.WN + g.WT + 1)
        self.p_off = [p]
        self.e_off = [p + g.WN]
        g.root(self.mem, p, p + g.WN)
        self.accept = [False]
        self.nodes = np.zeros((256, 4), dtype=np.int64)
        self.nodes[0] = (-1, 0, -1, p)
        self.kids: dict[tuple[int, int], int] = {}
        self.cur = np.zeros(64, dtype=np.uint64)
        self.seeds = np.zeros(g.WN, dtype=np.uint64)
        self.pathbuf = np.zeros(64, dtype=np.int64)
        self.steps = 0                     # chart steps computed (extend calls)
        self.adopted = 0                   # chart nodes adopted from searches
        # node -> tier offset per root child (or -1) of the charts a search from ``node`` kept
        self.kept: dict[int, np.ndarray] = {}
        self.root_child_of: np.ndarray | None = None   # terminal -> root child index (the engine sets it)
        self._expected: dict[int, list[int]] = {}

    def _ensure(self, total: int) -> None:
        if total > self.mem.size:
            new = np.zeros(max(total, 2 * self.mem.size), dtype=np.uint64)
            new[: self.used] = self.mem[: self.used]
            self.mem = new

    def _alloc(self, nwords: int) -> int:
        self._ensure(self.used + nwords)
        off = self.used
        self.used += nwords
        return off

    def _scratch_cur(self, n: int) -> np.ndarray:
        """Step scratch for tier ``n`` (and ``pathbuf`` room for a path of ``n`` tiers: 2 (n + 2) words)."""
        need = self.g.scratch_words(n)
        if self.cur.size < need:
            self.cur = np.zeros(2 * need, dtype=np.uint64)
        if self.pathbuf.size < 2 * n + 4:
            self.pathbuf = np.zeros(4 * n + 64, dtype=np.int64)
        return self.cur

    def path(self, node: int, extra: int = 0):
        """tier offsets (tier 0 .. n-1) and ANC offsets (0 .. n) of ``node``, with ``extra`` spare slots."""
        n = self.depth[node]
        tiers = np.zeros(n + extra + 1, dtype=np.int64)
        ps = np.zeros(n + extra + 2, dtype=np.int64)
        c = node
        while c > 0:
            d = self.depth[c]
            tiers[d - 1] = self.tier_off[c]
            ps[d] = self.p_off[c]
            c = self.parent[c]
        ps[0] = self.p_off[0]
        return tiers, ps

    def child(self, node: int, t: int) -> int:
        """The chart node of ``node`` plus terminal ``t``: memoised, adopted from a search's kept chart, or one
        chart step."""
        key = (node, t)
        c = self.kids.get(key)
        if c is not None:
            return c
        g = self.g
        n = self.depth[node]
        kept = self.kept.get(node)
        t_off = -1
        if kept is not None:
            k = self.root_child_of[t]
            if k < kept.size:
                t_off = int(kept[k])
        if t_off >= 0:            # the search from ``node`` computed this chart already (kernels_common.dfs)
            p_off = t_off + g.tier_words(n)
            e_off = p_off + g.WN
            info = int(self.mem[e_off + g.WT])
            self.adopted += 1
        else:
            t_off, p_off, e_off = self._slot(n)
            info = extend(self.mem, self.nodes, node, t, t_off, p_off, e_off, self._scratch_cur(n), self.seeds,
                          self.pathbuf, self.term[node], *self.gp)
            self.steps += 1
        return self._add(key, node, t, t_off, p_off, e_off, info)

    def _slot(self, n: int) -> tuple[int, int, int]:
        """Arena room for the new tier of a child of a node with ``n`` tiers: (tier, ANC, EXPECT) offsets."""
        g = self.g
        t_off = self._alloc(g.node_words(n))
        p_off = t_off + g.tier_words(n)
        return t_off, p_off, p_off + g.WN

    def _add(self, key, node: int, t: int, t_off: int, p_off: int, e_off: int, info: int) -> int:
        """Record a new chart node, child of ``node`` (last terminal ``t``, -1 for a merged boundary), memoised
        under ``key``."""
        c = self.kids[key] = len(self.parent)
        self.parent.append(node)
        self.term.append(t)
        self.depth.append(self.depth[node] + 1)
        self.tier_off.append(t_off)
        self.p_off.append(p_off)
        self.e_off.append(e_off)
        self.accept.append(bool(info & 1))
        if c >= self.nodes.shape[0]:
            self.nodes = np.concatenate([self.nodes, np.zeros_like(self.nodes)])
        self.nodes[c] = (node, self.depth[c], t_off, p_off)
        return c

    def merged(self, node: int, edges: frozenset) -> int:
        """The chart node of one boundary where several pieces end at once: ``edges`` is a set of ``(chart node c,
        terminal t)``, each ``c`` on the chain of ``node`` (``node`` itself or an ancestor), ``t`` spanning from
        ``c``'s boundary to the new one. The new node is a child of ``node`` whose tier holds every edge (a lattice
        chart: the tiers of later nodes never need to know). One edge from ``node`` itself is :meth:`child`."""
        if len(edges) == 1:
            (c, t), = edges
            if c == node:
                return self.child(node, t)
        key = (node, edges)
        m = self.kids.get(key)
        if m is not None:
            return m
        n = self.depth[node]
        t0, rows, terms = -1, [], []
        for c, t in sorted(edges):
            if c == node and t0 < 0:
                t0 = t
            else:
                rows.append(n - self.depth[c])
                terms.append(t)
        t_off, p_off, e_off = self._slot(n)
        info = extend_edges(self.mem, self.nodes, node, t0, np.array(rows, dtype=np.int64),
                            np.array(terms, dtype=np.int64), t_off, p_off, e_off, self._scratch_cur(n), self.seeds,
                            self.pathbuf, *self.gp)
        self.steps += 1
        return self._add(key, node, -1, t_off, p_off, e_off, info)

    def boundary(self, configs, ends) -> int:
        """The one chart node of the boundary where the pieces ``ends`` (``(c, t)`` pairs) of ``configs`` end:
        a child of the deepest chart node of ``configs`` (every chart node of a state lies on one chain, since
        each byte position has one boundary node)."""
        deepest = max((c for c, _ in configs), key=self.depth.__getitem__)
        return self.merged(deepest, frozenset(ends))

    def expects(self, node: int, t: int) -> bool:
        w = self.mem[self.e_off[node] + (t >> 6)]
        return bool((int(w) >> (t & 63)) & 1)

    def expected(self, node: int) -> list[int]:
        """EXPECT of ``node`` (terminal ids, ascending; memoised: a chart node never changes)."""
        got = self._expected.get(node)
        if got is None:
            e = self.e_off[node]
            bits = np.unpackbits(self.mem[e:e + self.g.WT].view(np.uint8), bitorder="little")
            got = self._expected[node] = np.flatnonzero(bits[: self.g.n_term]).tolist()
        return got
