"""The chart of one sequence (:class:`ChartStore`): tiers of bit rows in one arena, a node table, the sequence's lexer
configurations and the memo of its searches, all in numpy arrays that the jitted bookkeeping of ``store_kernels``
(``walk_bytes``, ``store_child`` ...) and ``store_mask`` (``fill_host``) read and write without Python in between;
what a fork owns in batch mode."""
from __future__ import annotations

import numpy as np

from .chart import PackedGrammar
from .cpu_mask import work_words
from .store_kernels import (H_ADOPTED, H_KEPT, H_LEN, H_MEMO, H_MEMO_HITS, H_NCFG, H_NEED, H_NODES, H_SIZE, H_STEPS,
                            H_USED, N_COLS, NC_DEPTH, NC_E0, NC_E1, NC_KEPT, NC_P, NC_PARENT, NC_TERM, NC_TIER, R_CFG,
                            R_DEPTH, R_EDGES, R_KEPT, R_MEM, R_NODES, START, store_child, store_merged)
from .store_mask import plan_bases


def _hdr_word(k: int) -> property:
    """A read-only view of header word ``k`` of a store (``store_kernels.H_*``)."""
    return property(lambda self: int(self.hdr[k]))


#: the arrays the jitted calls take, in ``fill_host``'s order; setting one bumps ``ChartStore.gen`` (batch.Lanes
#: re-reads them then)
ARRAYS = ("mem", "nodes", "hdr", "kept", "medge", "memo", "work", "scr", "cfg")


class ChartStore:
    """Chart nodes (one per committed terminal sequence, or per boundary where several pieces end at once) in one
    uint64 arena; tiers are never rewritten, a child node only adds its own tier, so branches share everything below
    them. Each node is a row of ``nodes`` (``store_kernels.NC_*``: parent, depth, tier offset, ANC offset, last
    terminal, children list, kept charts, memo). ``statics``: the engine's packed tables (``search.pack_statics``;
    default: the grammar's alone, enough for chart steps); ``depth``, ``k_root``, ``n_trie``: the trie's depth, the
    root's children and the trie's nodes (a mask's search scratch, kept charts and memo). ``gen`` counts the
    arrays replaced (set) so far."""

    def __init__(self, g: PackedGrammar, statics: tuple | None = None, depth: int = 0, k_root: int = 0,
                 n_trie: int = 0):
        self.g = g
        if statics is None:
            from .search import pack_statics_grammar

            statics = pack_statics_grammar(g)
        self.statics = tuple(statics[:3])
        self.D, self.K, self.N = int(depth), int(k_root), int(n_trie)
        self.mem = np.zeros(1 << 16, dtype=np.uint64)
        self.hdr = np.zeros(H_LEN, dtype=np.int64)
        self.nodes = np.zeros((256, N_COLS), dtype=np.int64)
        self.kept = np.zeros((8, max(self.K, 1)), dtype=np.int64)
        self.medge = np.zeros((64, 2), dtype=np.int64)
        self.cfg = np.zeros((64, 2), dtype=np.int64)
        self.memo = np.zeros(self.N + max(1 << 14, 4 * self.N), dtype=np.int32)
        self.m = -1
        self._depth_room(32)
        self._start()

    def clear(self) -> None:
        """Back to the empty prefix in place: every array zeroed as a new store's, none replaced, so the room it grew
        to stays (a sequence that takes its next sample grows only past its longest so far, allocates nothing, and
        ``gen`` is unchanged)."""
        for name in ARRAYS:
            getattr(self, name)[...] = 0
        self._start()

    def _start(self) -> None:
        """The empty prefix in zeroed arrays: the root node and the start configuration."""
        g = self.g
        p = self._alloc(g.WN + g.WT + 1)
        g.root(self.mem, p, p + g.WN)
        self.nodes[0] = -1
        self.nodes[0, [NC_DEPTH, NC_E0, NC_E1]] = 0
        self.nodes[0, NC_P] = p
        self.hdr[H_NODES] = 1
        self.hdr[H_MEMO] = self.N
        self.cfg[0] = (0, START)
        self.hdr[H_NCFG] = 1
        self._expected: dict[int, list[int]] = {}

    def __setattr__(self, name, value) -> None:
        if name in ARRAYS:
            object.__setattr__(self, "gen", self.__dict__.get("gen", 0) + 1)
        object.__setattr__(self, name, value)

    # -- room ---------------------------------------------------------------------------------------------------
    def _alloc(self, nwords: int) -> int:
        self._ensure(self.used + nwords)
        off = self.used
        self.hdr[H_USED] = off + nwords
        return off

    def _ensure(self, total: int) -> None:
        if total > self.mem.size:
            new = np.zeros(max(total, 2 * self.mem.size), dtype=np.uint64)
            new[: self.used] = self.mem[: self.used]
            self.mem = new

    def _depth_room(self, n: int) -> None:
        """Search and step scratch for charts of up to ``n`` tiers (sized for ``2 n + 64``)."""
        if n <= self.m:
            return
        g, m = self.g, 2 * n + 64
        self.m = m
        self.work = np.zeros(work_words(self.D, m, self.K), dtype=np.int64)
        self.scr = np.zeros(g.WN + g.scratch_words(m + self.D), dtype=np.uint64)

    @staticmethod
    def _rows(a: np.ndarray, rows: int) -> np.ndarray:
        new = np.zeros((max(rows, 2 * a.shape[0]),) + a.shape[1:], dtype=a.dtype)
        new[: a.shape[0]] = a
        return new

    def grow(self) -> None:
        """Make the room a jitted call ran out of (``hdr[H_NEED]``, ``hdr[H_SIZE]``)."""
        what, size = int(self.hdr[H_NEED]), int(self.hdr[H_SIZE])
        self.hdr[H_NEED] = 0
        if what == R_MEM:
            self._ensure(size)
        elif what == R_NODES:
            self.nodes = self._rows(self.nodes, size)
        elif what == R_EDGES:
            self.medge = self._rows(self.medge, size)
        elif what == R_KEPT:
            self.kept = self._rows(self.kept, size)
        elif what == R_DEPTH:
            self.m = min(self.m, size - 1)     # the call found the scratch short for ``size`` tiers: make it anew
            self._depth_room(size)
        elif what == R_CFG:
            self.cfg = self._rows(self.cfg, size)
        else:
            raise RuntimeError(f"valiant: a jitted call of the chart store stopped without a need ({what}, {size})")

    def args(self) -> tuple:
        """The arrays of the jitted store functions: mem, nodes, hdr, kept, medge, scr."""
        return self.mem, self.nodes, self.hdr, self.kept, self.medge, self.scr

    # -- the node table, read from Python ------------------------------------------------------------------------
    @property
    def used(self) -> int:
        return int(self.hdr[H_USED])

    @used.setter
    def used(self, v: int) -> None:
        self.hdr[H_USED] = v

    n_nodes = _hdr_word(H_NODES)
    steps = _hdr_word(H_STEPS)          # chart steps computed
    adopted = _hdr_word(H_ADOPTED)      # chart nodes adopted from searches
    memo_hits = _hdr_word(H_MEMO_HITS)  # first-phase searches taken from the memo

    def _col(self, k: int) -> np.ndarray:
        return self.nodes[: self.n_nodes, k]

    parent = property(lambda self: self._col(NC_PARENT))
    term = property(lambda self: self._col(NC_TERM))
    depth = property(lambda self: self._col(NC_DEPTH))
    tier_off = property(lambda self: self._col(NC_TIER))
    p_off = property(lambda self: self._col(NC_P))
    e_off = property(lambda self: self._col(NC_P) + self.g.WN)

    @property
    def accept(self) -> np.ndarray:
        return (self.mem[self.e_off + self.g.WT] & np.uint64(1)).astype(bool)

    @property
    def configs(self) -> list[tuple[int, int]]:
        """The sequence's lexer configurations ``(chart node, lexer state or START)``, sorted."""
        return [(int(c), int(x)) for c, x in self.cfg[: int(self.hdr[H_NCFG])]]

    def kept_row(self, node: int) -> np.ndarray | None:
        """Tier offset per root child (or -1) of the charts a search from ``node`` kept, or None."""
        r = int(self.nodes[node, NC_KEPT])
        return None if r < 0 else self.kept[r, : self.K]

    def keep(self, node: int, offsets: np.ndarray) -> None:
        """Record the charts a search from ``node`` kept (the multi-threaded and CUDA searches' Python side)."""
        r = int(self.hdr[H_KEPT])
        if r >= self.kept.shape[0]:
            self.kept = self._rows(self.kept, r + 1)
        self.kept[r, : self.K] = offsets
        self.nodes[node, NC_KEPT] = r
        self.hdr[H_KEPT] = r + 1

    def path(self, node: int, extra: int = 0):
        """tier offsets (tier 0 .. n-1) and ANC offsets (0 .. n) of ``node``, with ``extra`` spare slots."""
        nd = self.nodes
        n = int(nd[node, NC_DEPTH])
        tiers = np.zeros(n + extra + 1, dtype=np.int64)
        ps = np.zeros(n + extra + 2, dtype=np.int64)
        c = node
        while c > 0:
            d = int(nd[c, NC_DEPTH])
            tiers[d - 1] = nd[c, NC_TIER]
            ps[d] = nd[c, NC_P]
            c = int(nd[c, NC_PARENT])
        ps[0] = nd[0, NC_P]
        return tiers, ps

    # -- nodes made from Python (tests, the CUDA backend's masks) ------------------------------------------------
    def child(self, node: int, t: int) -> int:
        """The chart node of ``node`` plus terminal ``t``: a child it has, adopted from a search's kept chart, or one
        chart step (``store_kernels._child``)."""
        while True:
            c = store_child(*self.args(), node, t, *self.statics)
            if c >= 0:
                return int(c)
            self.grow()

    def merged(self, node: int, edges) -> int:
        """The chart node of one boundary where several pieces end at once: ``edges`` are ``(chart node c,
        terminal t)``, each ``c`` on the chain of ``node`` (``node`` itself or an ancestor), ``t`` spanning from
        ``c``'s boundary to the new one. The new node is a child of ``node`` whose tier holds every edge (a lattice
        chart: the tiers of later nodes never need to know). One edge from ``node`` itself is :meth:`child`."""
        E = np.array(sorted(set(edges)), dtype=np.int64).reshape(-1, 2)
        while True:
            m = store_merged(*self.args(), node, E, *self.statics)
            if m >= 0:
                return int(m)
            self.grow()

    def boundary(self, configs, ends) -> int:
        """The one chart node of the boundary where the pieces ``ends`` (``(c, t)`` pairs) of ``configs`` end:
        a child of the deepest chart node of ``configs`` (every chart node of a state lies on one chain, since
        each byte position has one boundary node)."""
        deepest = max((c for c, _ in configs), key=lambda c: int(self.nodes[c, NC_DEPTH]))
        return self.merged(deepest, ends)

    def plan(self, lazy: bool = False):
        """A mask's bases from the configurations (``store_mask._plan``): (rows, xs, accept)."""
        while True:
            rows, xs, acc, ok = plan_bases(*self.args(), self.cfg, lazy, *self.statics)
            if ok:
                return rows, xs, bool(acc)
            self.grow()

    def expects(self, node: int, t: int) -> bool:
        w = self.mem[int(self.nodes[node, NC_P]) + self.g.WN + (t >> 6)]
        return bool((int(w) >> (t & 63)) & 1)

    def expected(self, node: int) -> list[int]:
        """EXPECT of ``node`` (terminal ids, ascending; memoised: a chart node never changes)."""
        got = self._expected.get(node)
        if got is None:
            e = int(self.nodes[node, NC_P]) + self.g.WN
            bits = np.unpackbits(self.mem[e:e + self.g.WT].view(np.uint8), bitorder="little")
            got = self._expected[node] = np.flatnonzero(bits[: self.g.n_term]).tolist()
        return got
