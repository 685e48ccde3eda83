"""CUDA backend (numba.cuda): the terminal tree search on the device, with the chart arena resident there.

Device logic comes from ``device.py`` and ``device_search.py`` (the chart step and the DFS, the same Python code
the CPU backend runs), compiled here as device functions with the CUDA primitives bound (atomic ORs, ``syncthreads``);
the kernels below only pick work items and compute offsets. Each kernel takes the arena and a few records
(:data:`Job`, :data:`Scratch`, :data:`Tree`, ``device.Grammar``; :data:`Step` for the test kernel), each
passed as a plain tuple and rebuilt as its namedtuple on the kernel's first line. (The grammar stays one device
array per table: viewed inside a kernel from the CPU's three packed arrays, ``PackedGrammar.packed``, the views
held 255 registers a thread with spills, against 136-157, in ptxas's report.) Launches go through
``parsers.cuda_launch.Launcher`` (each kernel specialized to its first launch's argument types, so later
launches skip numba's typing of every argument).

* One thread block per worker; the threads of a block share each chart step (rule pairs and chart entries
  handed out round-robin, ``atomic.or_`` on packed words, ``syncthreads`` between the phases of a step).
* A search from a base chart: ``bfs_depth`` launches of :func:`bfs_level_kernel` (level ``L``: the blocks
  share the trie nodes at depth ``L`` whose parent is viable; each viable node with children gets its chart
  in its own BFS slot), then one launch of :func:`dfs_kernel` (the blocks share the children of the last
  level's viable nodes and walk each one's subtree depth-first with their own stack of tiers).
* Host side (:class:`CudaSearch`): the device arena mirrors the host's append-only chart arena; a search
  copies the words committed since the last one (at most one copy), then one job buffer (base path, needed
  flags, zeroed viable flags), launches the kernels, and copies the viable flags back. Everything the
  kernels write (BFS slots, DFS stacks) lies past the committed words, and the arena's size is fixed before
  the first launch of a search, so no device-computed tier is ever lost to a reallocation.

Results are bit-for-bit those of the CPU backend (same tiers, same viable nodes). With
``NUMBA_ENABLE_CUDASIM=1`` the same kernels run in numba's simulator (slow; for tests).
"""
from __future__ import annotations

from collections import namedtuple

import numba
import numpy as np
from numba import cuda

from gcdbench.parsers.cuda_launch import Launcher, grown

from .device import INFO_OLD, N_STATS, Grammar, Trie
from .device_search import DfsOut, DfsScratch, DfsStart, DfsState, for_cuda

MAXD = 256      # deepest trie path a worker can walk (per-thread stack size)
THREADS = 128   # threads per block on a GPU


# -- CUDA bindings of the primitives the shared device logic calls (device.py) ---------------------------------
@cuda.jit(device=True)
def _or_word_gpu(arr, i, val):
    cuda.atomic.or_(arr, i, val)


@cuda.jit(device=True)
def _or_old_gpu(arr, i, val):
    return cuda.atomic.or_(arr, i, val)


@cuda.jit(device=True)
def _sync_gpu():
    cuda.syncthreads()


@cuda.jit(device=True)
def _ctz_gpu(low):
    return cuda.popc(low - np.uint64(1))      # low is a power of two


@cuda.jit(device=True)
def _emit_gpu(flags, cnt, v):
    if cuda.threadIdx.x == 0:
        flags[v] = 1


@cuda.jit(device=True)
def _tid_gpu():
    return cuda.threadIdx.x


@cuda.jit(device=True)
def _nth_gpu():
    return cuda.blockDim.x


DEVICE = for_cuda({"_or_word": _or_word_gpu, "_or_old": _or_old_gpu, "_sync": _sync_gpu, "_ctz": _ctz_gpu,
                   "_emit": _emit_gpu, "_tid": _tid_gpu, "_nth": _nth_gpu})
chart_step_gpu = DEVICE["chart_step"]
chart_step_edges_gpu = DEVICE["chart_step_edges"]
certify_gpu = DEVICE["certify"]
dfs_gpu = DEVICE["dfs"]


# -- the kernels' records: each travels as a plain tuple (numba's fast dispatch path) and is rebuilt first thing
#: the trie as the device search reads it: ``device.Trie``'s fields (what ``dfs`` reads), then the child
#: positions by level, the BFS slot of each node (or -1), parents and depths (int32, static)
Tree = namedtuple("Tree", Trie._fields + ("level_ci", "bfs_slot", "node_parent", "node_depth"))
#: one search: the base path (tier and ANC offsets), the needed and viable flags (views of the job buffer), the base
#: chart (tiers ``n``, EXPECT offset ``base_e``, last terminal ``base_term``), the arena regions of the BFS slots and
#: of the DFS stacks (``stride`` words a tier, ``depth`` tiers a block)
Job = namedtuple("Job", ["base_t", "base_p", "needed", "flags", "n", "base_e", "base_term", "bfs_base", "stride",
                         "dfs_base", "depth"])
#: per-block scratch (row ``blockIdx.x`` of each): tier and ANC tables of the path (``Lt`` and ``Lt + 1`` words of a
#: row of ``paths``), the step's working tier and seeds, the work counters
Scratch = namedtuple("Scratch", ["paths", "Lt", "cur_all", "seeds_all", "stats_all"])
#: one chart step by one block (:func:`step_kernel`): after the chart of tiers ``tiers`` and ANC ``ps`` (room for
#: ANC[n+1]), terminal ``t`` (the parent's last ``prev_term``), into ``out_*``; scratch ``cur``, ``seeds``; the INFO
#: word into ``accept[0]``
Step = namedtuple("Step", ["tiers", "ps", "n", "t", "prev_term", "out_tier", "out_p", "out_e", "cur", "seeds",
                           "accept"])


@cuda.jit(device=True)
def _node_chart(u, J, T, G):
    """(tier index m, tier offset, EXPECT offset) of trie node ``u``'s chart: the base's for the root, else
    its BFS slot's (``u`` at depth 1..bfs_depth, viable, with children)."""
    if u == 0:
        return J.n - 1, -1, J.base_e
    m = J.n + T.node_depth[u] - 1
    t_off = J.bfs_base + T.bfs_slot[u] * J.stride
    return m, t_off, t_off + G.n_left * ((m + 1 + 63) // 64) + (G.n_left + 63) // 64 + G.WN


@cuda.jit(device=True)
def _load_path(tiers, ps, u, J, T, G, tid, nth):
    """This block's tier and ANC tables for the chart of node ``u``: the base path plus ``u``'s BFS ancestors."""
    for i in range(tid, J.base_t.size, nth):
        tiers[i] = J.base_t[i]
    for i in range(tid, J.base_p.size, nth):
        ps[i] = J.base_p[i]
    cuda.syncthreads()
    if tid == 0:
        x = u
        while x != 0:
            m, t_off, e_off = _node_chart(x, J, T, G)
            tiers[m] = t_off
            ps[m + 1] = e_off - G.WN
            x = T.node_parent[x]
    cuda.syncthreads()


@cuda.jit(device=True)
def _some_expected_gpu(mem, u, lo, hi, rows, terms, J, T, G):
    """Is some piece ``k`` in ``lo:hi`` expected where it begins: ``terms[k]`` in EXPECT of the chart of ``u``'s
    ancestor ``rows[k]`` levels up (``u`` itself for 0; the BFS twin of ``device_search._some_expected``, which
    reads the DFS path's offsets instead of the nodes' charts)."""
    for k in range(lo, hi):
        s = u
        for _ in range(rows[k]):
            s = T.node_parent[s]
        m, t_off, e_off = _node_chart(s, J, T, G)
        a = terms[k]
        if (mem[e_off + (a >> 6)] >> np.uint64(a & 63)) & np.uint64(1):
            return True
    return False


@cuda.jit(device=True)
def _item(i, mem, J, T, G):
    """Work item ``i`` of a level list (a child position): returns (child v, its parent u) if u's chart exists
    (u is the root or a viable BFS node), v is needed and v is viable: its terminal is in u's EXPECT, or for a
    merged boundary some edge's terminal in EXPECT of the ancestor it starts at (``device_search.edges_viable``;
    every ancestor of u is the root or a viable BFS node too), or v is not viable but has children and a piece of a
    merged boundary below it spans it (the DFS walks it unemitted); else (-1, -1)."""
    ci = T.level_ci[i]
    v = T.child_ids[ci]
    u = T.node_parent[v]
    if u != 0 and J.flags[u] == 0:
        return -1, -1
    if not J.needed[v]:
        return -1, -1
    a = T.node_term[v]
    if a >= 0:
        m, t_off, e_off = _node_chart(u, J, T, G)
        if (mem[e_off + (a >> 6)] >> np.uint64(a & 63)) & np.uint64(1):
            return v, u
    if _some_expected_gpu(mem, u, T.merge_start[v], T.merge_start[v + 1], T.merge_row, T.merge_term, J, T, G):
        return v, u
    if T.child_start[v + 1] > T.child_start[v] and (T.no_alias[v] & 2) != 0:
        # not viable, but a piece of a merged boundary below spans it: the DFS walks it unemitted when such a piece
        # is expected where it begins (device_search.spans_viable; only the DFS kernel meets such a node:
        # CudaSearch keeps the BFS levels above the shallowest one)
        if _some_expected_gpu(mem, u, T.span_start[v], T.span_start[v + 1], T.span_row, T.span_term, J, T, G):
            return v, u
    return -1, -1


@cuda.jit
def bfs_level_kernel(mem, lo, hi, job, scr, tree, gt):
    """One BFS level: the children at positions ``level_ci[lo:hi]`` (one trie depth) whose parent is viable are
    checked against the parent's EXPECT; viable ones are flagged, and those with children get their chart
    (one more tier) in their BFS slot, its INFO word certified against the parent's (``certify``: the DFS below
    takes idem charts without a step; a merged boundary's lattice step is never certified from). Viable items go
    round-robin to the blocks. ``job``, ``scr``, ``tree``, ``gt``: :data:`Job`, :data:`Scratch`, :data:`Tree`,
    ``device.Grammar`` as plain tuples."""
    G, J, T, S = Grammar(*gt), Job(*job), Tree(*tree), Scratch(*scr)
    w = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nth = cuda.blockDim.x
    tiers = S.paths[w, 0:S.Lt]
    ps = S.paths[w, S.Lt:2 * S.Lt + 1]
    skip = w
    for i in range(lo, hi):
        v, u = _item(i, mem, J, T, G)
        if v < 0:
            continue
        if skip > 0:
            skip -= 1
            continue
        skip = cuda.gridDim.x - 1
        if tid == 0:
            J.flags[v] = 1
        if T.child_start[v + 1] > T.child_start[v]:
            _load_path(tiers, ps, u, J, T, G, tid, nth)
            m, t_off, e_off = _node_chart(v, J, T, G)
            a = np.int64(T.node_term[v])
            if a >= 0:
                info = chart_step_gpu(mem, tiers, ps, m, a, t_off, e_off - G.WN, e_off, S.cur_all[w], S.seeds_all[w],
                                      G)
                mu, tu, eu = _node_chart(u, J, T, G)
                u_term = J.base_term if u == 0 else np.int64(T.node_term[u])
                info2 = certify_gpu(mem, ps, m, a, np.int64(mem[eu + G.WT]), info, u_term, G)
            else:
                lo_e, hi_e = T.merge_start[v], T.merge_start[v + 1]
                info = chart_step_edges_gpu(mem, tiers, ps, m, -1, T.merge_row[lo_e:hi_e], T.merge_term[lo_e:hi_e],
                                            hi_e - lo_e, t_off, e_off - G.WN, e_off, S.cur_all[w], S.seeds_all[w], G)
                info2 = info | INFO_OLD     # nothing is certified from a merged boundary
            if info2 != info and tid == 0:
                mem[e_off + G.WT] = np.uint64(info2)
            cuda.syncthreads()


@cuda.jit
def dfs_kernel(mem, lo, hi, job, scr, tree, gt):
    """Below the last BFS level: the children at positions ``level_ci[lo:hi]`` whose parent is viable go
    round-robin to the blocks, and each block walks each of its children's subtrees depth-first
    (``device_search.dfs``) with a stack of ``depth`` tiers at ``dfs_base + block * depth * stride``. Arguments
    as :func:`bfs_level_kernel`'s."""
    G, J, T, S = Grammar(*gt), Job(*job), Tree(*tree), Scratch(*scr)
    w = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nth = cuda.blockDim.x
    tiers = S.paths[w, 0:S.Lt]
    ps = S.paths[w, S.Lt:2 * S.Lt + 1]
    stack_node = cuda.local.array(MAXD, dtype=numba.int32)
    stack_ci = cuda.local.array(MAXD, dtype=numba.int32)
    e_offs = cuda.local.array(MAXD, dtype=numba.int64)
    lv_n = cuda.local.array(MAXD, dtype=numba.int64)
    scratch = J.dfs_base + w * J.depth * J.stride
    skip = w
    for i in range(lo, hi):
        v, u = _item(i, mem, J, T, G)
        if v < 0:
            continue
        if skip > 0:
            skip -= 1
            continue
        skip = cuda.gridDim.x - 1
        _load_path(tiers, ps, u, J, T, G, tid, nth)
        m, t_off, e_off = _node_chart(u, J, T, G)
        ci = T.level_ci[i]
        u_term = J.base_term if u == 0 else np.int64(T.node_term[u])
        dfs_gpu(mem, DfsStart(m + 1, u, e_off, u_term, ci, T.child_start[u + 1] - ci),
                DfsState(tiers, ps, stack_node, stack_ci, e_offs, lv_n),
                DfsScratch(scratch, J.stride, -1, S.stats_all[w], S.cur_all[w], S.seeds_all[w]), J.needed,
                DfsOut(J.flags, S.stats_all[w]), 0, T, G)


@cuda.jit
def step_kernel(mem, step, gt):
    """One chart step by one block (``device.chart_step``, then ``certify`` as the CPU's ``extend`` does):
    for tests that compare it with the CPU's word for word. ``step``: :data:`Step` as a plain tuple."""
    G, P = Grammar(*gt), Step(*step)
    info = chart_step_gpu(mem, P.tiers, P.ps, P.n, P.t, P.out_tier, P.out_p, P.out_e, P.cur, P.seeds, G)
    prev_info = np.int64(mem[P.ps[P.n] + G.WN + G.WT])
    if cuda.threadIdx.x == 0:
        P.ps[P.n + 1] = P.out_p
    cuda.syncthreads()
    info2 = certify_gpu(mem, P.ps, P.n, P.t, prev_info, info, P.prev_term, G)
    if cuda.threadIdx.x == 0:
        if info2 != info:
            mem[P.out_e + G.WT] = np.uint64(info2)
        P.accept[0] = info2


KERNELS = {"bfs_level_kernel": bfs_level_kernel, "dfs_kernel": dfs_kernel, "step_kernel": step_kernel}

class CudaSearch:
    """Host side of the CUDA tree search (see the module docstring). ``stats`` counts kernel launches and
    host<->device copies (and their bytes) since construction: every launch and copy goes through
    :meth:`_launch`, :meth:`_h2d` and :meth:`_d2h`, every device allocation through :meth:`_to` and
    :meth:`_alloc`.

    ``dry=True`` touches no device: "device" arrays are numpy arrays and each launch is recorded in
    ``launched`` as (kernel, args) instead of run, so the exact argument types of the real launches can be read
    without a GPU (``experiments/ptx_report.py`` compiles the kernels for them)."""

    def __init__(self, comp, workers: int = 32, bfs_depth: int = 2, threads: int | None = None, dry: bool = False):
        g, al = comp.grammar, comp.align
        if threads is None:   # the simulator runs every thread as a Python thread: keep blocks small there
            threads = 4 if numba.config.ENABLE_CUDASIM else THREADS
        if al.max_depth + 2 > MAXD:
            from gcdbench.parsers.base import CompileError

            raise CompileError(f"valiant cuda: terminal tree depth {al.max_depth} exceeds the per-thread DFS stack "
                               f"({MAXD - 2}); raise cuda_kernels.MAXD")
        self.g, self.al = g, al
        self.workers = max(1, int(workers))
        self.bfs_depth = max(0, int(bfs_depth))
        self.threads = int(threads)
        self.dry = dry
        self._launcher = Launcher(dry)
        self.launched = self._launcher.launched
        self.stats = {"searches": 0, "launches": 0, "h2d": 0, "d2h": 0, "h2d_bytes": 0, "d2h_bytes": 0,
                      "arena_allocs": 0, "arena_words": 0, "arena_recopied": 0, "bfs_nodes_max": 0}
        self.D = al.max_depth
        # a node spanned by a piece of a merged boundary below it (bit 2 of align.alias_blocked) is walked even when
        # it is not viable, which the DFS does (device_search.dfs) and the BFS levels do not: they stop above the
        # shallowest such node with children
        from .align import SPANNED, alias_blocked, span_edges

        no_alias = alias_blocked(al)
        walk = ((no_alias & SPANNED) != 0) & (np.diff(al.child_start) > 0)
        if walk.any():
            self.bfs_depth = min(self.bfs_depth, int(al.node_depth[walk].min()) - 1)
        # static tables: child positions grouped by the child's depth (level L = depth L), BFS slots
        depth = al.node_depth.astype(np.int64)
        child_depth = depth[al.child_ids]
        order = np.argsort(child_depth, kind="stable").astype(np.int32)
        self.level_start = np.searchsorted(child_depth[order], np.arange(self.D + 3)).astype(np.int64)
        internal = np.diff(al.child_start) > 0
        slot_nodes = np.flatnonzero((depth >= 1) & (depth <= self.bfs_depth) & internal)
        bfs_slot = np.full(al.n_nodes, -1, dtype=np.int32)
        bfs_slot[slot_nodes] = np.arange(slot_nodes.size, dtype=np.int32)
        self.n_slots = int(slot_nodes.size)
        self._slotted = slot_nodes
        to = self._to
        self.gt = tuple(to(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else x for x in g.dev)
        self.tree = tuple(Tree(to(al.child_start), to(al.child_ids), to(al.node_term), to(al.merge_start),
                               to(al.merge_row), to(al.merge_term), to(no_alias),
                               *(to(x) for x in span_edges(al)), to(order), to(bfs_slot),
                               to(al.node_parent.astype(np.int32)), to(al.node_depth.astype(np.int32))))
        self.work_stats = to(np.zeros((self.workers, N_STATS), dtype=np.int64))   # per-block work counters (dfs)
        self.dmem = None          # device arena
        self.synced = 0           # host arena words [0, synced) are on the device
        self._store = None
        self._job = None          # device job buffer (and its host twin)
        self._scratch = None      # (cur_all, seeds_all, paths) sized for the largest search so far

    # -- every launch and copy goes through these (counted) --------------------------------------------------
    def _launch(self, kernel, grid: int, *args) -> None:
        self.stats["launches"] += 1
        self._launcher(kernel, grid, self.threads, *args)

    def _h2d(self, dst, src: np.ndarray) -> None:
        self.stats["h2d"] += 1
        self.stats["h2d_bytes"] += src.nbytes
        if self.dry:
            dst[...] = src
        else:
            dst.copy_to_device(src)

    def _d2h(self, src) -> np.ndarray:
        self.stats["d2h"] += 1
        out = src.copy() if self.dry else src.copy_to_host()
        self.stats["d2h_bytes"] += out.nbytes
        return out

    def _to(self, host: np.ndarray):
        return np.array(host) if self.dry else cuda.to_device(host)

    def _alloc(self, shape, dtype):
        return np.zeros(shape, dtype=dtype) if self.dry else cuda.device_array(shape, dtype=dtype)

    # -- device buffers ---------------------------------------------------------------------------------------
    def _sync_arena(self, store, need: int) -> None:
        """Make the device arena hold ``need`` words and the host's committed words (copying only new ones)."""
        if store is not self._store:     # reset() made a new arena: the device copy is stale
            self._store = store
            self.synced = 0
        dmem = grown(self.dmem, (need,), np.uint64, self._alloc)
        if dmem is not self.dmem:
            # between searches the device holds nothing but the committed words: a bigger arena is a new one
            # filled from the host (nothing computed on the device is alive at this point)
            self.dmem = dmem
            self.stats["arena_allocs"] += 1
            self.stats["arena_recopied"] += self.synced
            self.synced = 0
        if store.used > self.synced:
            self._h2d(self.dmem[self.synced:store.used], store.mem[self.synced:store.used])
            self.stats["arena_words"] += store.used - self.synced
            self.synced = store.used

    def _buffers(self, n: int, Lt: int, job_words: int):
        g = self.g
        w, a = self.workers, self._alloc
        cur, seeds, paths = self._scratch or (None, None, None)
        self._scratch = s = (grown(cur, (w, g.scratch_words(n + self.D)), np.uint64, a, axis=1),
                             grown(seeds, (w, g.WN), np.uint64, a), grown(paths, (w, 2 * Lt + 1), np.int64, a, axis=1))
        djob, job = self._job or (None, None)
        self._job = (grown(djob, (job_words,), np.int64, a), grown(job, (job_words,), np.int64, np.zeros))
        return s

    # -- one search ---------------------------------------------------------------------------------------------
    def search(self, store, base: int, needed: np.ndarray | None = None) -> np.ndarray:
        """Viable trie nodes (node ids, ascending) from chart node ``base`` among ``needed`` (default: all)."""
        g, al, D = self.g, self.al, self.D
        N = al.n_nodes
        self.stats["searches"] += 1
        if needed is None:
            needed = np.ones(N, dtype=np.uint8)
        n = store.depth[base]
        stride = g.node_words(n + D)
        bfs_base = store.used
        dfs_base = bfs_base + self.n_slots * stride
        self._sync_arena(store, dfs_base + self.workers * (D + 1) * stride)
        tiers, ps = store.path(base, extra=D + 1)
        Lt = tiers.size
        o_p, o_need, o_flag = Lt, 2 * Lt + 1, 2 * Lt + 1 + N
        total = o_flag + N
        cur_all, seeds_all, paths = self._buffers(n, Lt, total)
        djob, job = self._job
        job[:Lt] = tiers
        job[o_p:o_need] = ps
        job[o_need:o_flag] = needed
        job[o_flag:total] = 0
        self._h2d(djob[:total], job[:total])
        dflags = djob[o_flag:total]
        job = tuple(Job(djob[:Lt], djob[o_p:o_need], djob[o_need:o_flag], dflags, n, store.e_off[base],
                        store.term[base], bfs_base, stride, dfs_base, D + 1))
        scr = tuple(Scratch(paths, Lt, cur_all, seeds_all, self.work_stats))
        ls = self.level_start
        for L in range(1, self.bfs_depth + 1):
            lo, hi = int(ls[L]), int(ls[L + 1])
            if hi > lo:
                self._launch(bfs_level_kernel, min(self.workers, hi - lo), self.dmem, lo, hi, job, scr, self.tree,
                             self.gt)
        L = self.bfs_depth + 1
        lo, hi = (int(ls[L]), int(ls[L + 1])) if L < ls.size - 1 else (0, 0)
        if hi > lo:
            self._launch(dfs_kernel, min(self.workers, hi - lo), self.dmem, lo, hi, job, scr, self.tree, self.gt)
        flags = self._d2h(dflags)
        flags[0] = 1
        self.stats["bfs_nodes_max"] = max(self.stats["bfs_nodes_max"], int(np.count_nonzero(flags[self._slotted])))
        return np.flatnonzero(flags).astype(np.int32)
