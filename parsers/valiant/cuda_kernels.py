"""CUDA backend (numba.cuda): the chart step and the terminal tree search as kernels.

* One thread block per worker; inside a block the CNF binary rules are spread over the threads (rules are
  sorted by left child, so neighbouring threads read the same left-child rows), each thread ORs whole
  packed row words (all rows of a cell at once) with ``atomic.or_``; ``syncthreads`` separates the tiers
  ``e`` (the right child's row must be final before it is read).
* Tree search: the trie is walked breadth-first to ``bfs_depth`` (one block per node of a level, each
  computing that node's chart into a BFS arena), then each worker block takes frontier nodes and walks
  their subtrees depth-first with its own stack of tiers (every thread of the block runs the same control
  flow on the same data, so they reach each ``syncthreads`` together).

Results are bit-for-bit those of the CPU backend (same tiers, same viable nodes). With
``NUMBA_ENABLE_CUDASIM=1`` the same kernels run in numba's simulator (slow; tests keep inputs tiny).
The row-level helpers (kernels_common.py) are the same Python code as the CPU's ``extend_rules``, compiled
as device functions; only the word-OR differs (plain ``|=`` on the CPU, ``atomic.or_`` on the device).
"""
from __future__ import annotations

import numba
import numpy as np
from numba import cuda

from .kernels_common import any_word, bit, shift_or_rows, variant

MAXD = 256      # deepest trie path a worker can walk (per-thread stack size)
THREADS = 128


# -- helpers shared with the CPU step (kernels_common.py), compiled here as device functions -------------
def _or_word_gpu(arr, i, val):
    cuda.atomic.or_(arr, i, val)


or_word_gpu = cuda.jit(device=True)(_or_word_gpu)
bit_gpu = variant(bit, "cuda")
any_word_gpu = variant(any_word, "cuda")
shift_or_rows_gpu = variant(shift_or_rows, "cuda", _or_word=or_word_gpu)


@cuda.jit(device=True)
def block_extend(mem, tier_offs, p_offs, n, t, out_tier, out_p, out_e, cur, seeds,
                 n_nt, n_left, WN, WT, start, rule_left, rule_parent, rule_right, term_nts, first, first_term):
    """One incremental Valiant step by the whole block (see chart.extend for the algorithm). Returns accept."""
    tid = cuda.threadIdx.x
    nth = cuda.blockDim.x
    one = np.uint64(1)
    W = (n + 1 + 63) // 64
    R = rule_parent.size
    for i in range(tid, n_nt * W, nth):
        cur[i] = 0
    for i in range(tid, WN, nth):
        seeds[i] = 0
    cuda.syncthreads()
    for v in range(tid, n_nt, nth):
        if bit_gpu(term_nts[t], 0, v):
            cur[v * W] = one
    cuda.syncthreads()
    for e in range(n - 1, -1, -1):
        k = n - e - 1
        We = (e + 1 + 63) // 64
        base = tier_offs[e]
        for r in range(tid, R, nth):
            a = rule_left[r]
            b = rule_right[r]
            if (cur[b * W + (k >> 6)] >> np.uint64(k & 63)) & one:
                aoff = base + a * We
                if any_word_gpu(mem, aoff, We):
                    shift_or_rows_gpu(cur, rule_parent[r] * W, W, mem, aoff, We, n - e)
        cuda.syncthreads()
    for i in range(tid, n_left * W, nth):
        mem[out_tier + i] = cur[i]
    WL = (n_left + 63) // 64
    for i in range(tid, WL, nth):
        mem[out_tier + n_left * W + i] = 0
    cuda.syncthreads()
    for a in range(tid, n_left, nth):
        if any_word_gpu(cur, a * W, W):
            or_word_gpu(mem, out_tier + n_left * W + (a >> 6), one << np.uint64(a & 63))
    # seeds of ANC[n+1]
    for r in range(tid, R, nth):
        a = rule_left[r]
        z = rule_parent[r]
        for row in range(n + 1):
            if (cur[a * W + (row >> 6)] >> np.uint64(row & 63)) & one:
                if bit_gpu(mem, p_offs[n - row], z):
                    x = rule_right[r]
                    or_word_gpu(seeds, x >> 6, one << np.uint64(x & 63))
    cuda.syncthreads()
    for j in range(tid, WN, nth):
        acc = np.uint64(0)
        for xn in range(n_nt):
            if (seeds[xn >> 6] >> np.uint64(xn & 63)) & one:
                acc |= first[xn, j]
        mem[out_p + j] = acc
    for j in range(tid, WT, nth):
        acc = np.uint64(0)
        for xn in range(n_nt):
            if (seeds[xn >> 6] >> np.uint64(xn & 63)) & one:
                acc |= first_term[xn, j]
        mem[out_e + j] = acc
    accept = 0
    if start >= 0:
        if (cur[start * W + (n >> 6)] >> np.uint64(n & 63)) & one:
            accept = 1
    cuda.syncthreads()
    return accept


@cuda.jit
def bfs_level_kernel(mem, terms, ms, t_tab, p_tab, outs, cur_all, seeds_all,
                     n_nt, n_left, WN, WT, start, rule_left, rule_parent, rule_right, term_nts, first, first_term):
    """Block i appends terminal ``terms[i]`` as tier ``ms[i]`` to the path in ``t_tab[i]``/``p_tab[i]`` and
    writes the new tier, ANC and EXPECT at ``outs[i, 0..2]`` (one BFS node per block)."""
    i = cuda.blockIdx.x
    if i >= terms.size:
        return
    block_extend(mem, t_tab[i], p_tab[i], ms[i], terms[i], outs[i, 0], outs[i, 1], outs[i, 2], cur_all[i],
                 seeds_all[i], n_nt, n_left, WN, WT, start, rule_left, rule_parent, rule_right, term_nts, first,
                 first_term)


@cuda.jit
def dfs_kernel(mem, frontier, frontier_e, frontier_m, t_tab, p_tab, stride, scratch_base,
               child_start, child_ids, node_term, needed, viable, cur_all, seeds_all,
               n_nt, n_left, WN, WT, start, rule_left, rule_parent, rule_right, term_nts, first, first_term):
    """Worker block w walks the subtrees of frontier nodes w, w+grid, ... depth-first. Row f of
    ``t_tab``/``p_tab`` holds frontier node f's path (deeper entries are written as the walk goes); the
    worker's stack of tiers lives at ``scratch_base + w * MAXD * stride``."""
    w = cuda.blockIdx.x
    one = np.uint64(1)
    stack_node = cuda.local.array(MAXD, dtype=numba.int32)
    stack_ci = cuda.local.array(MAXD, dtype=numba.int32)
    e_offs = cuda.local.array(MAXD, dtype=numba.int64)
    mybase = scratch_base + w * (MAXD * stride)
    f = w
    while f < frontier.size:
        tiers = t_tab[f]
        ps = p_tab[f]
        root = frontier[f]
        d = 0
        stack_node[0] = root
        stack_ci[0] = child_start[root]
        e_offs[0] = frontier_e[f]
        while d >= 0:
            u = stack_node[d]
            ci = stack_ci[d]
            if ci >= child_start[u + 1]:
                d -= 1
                continue
            stack_ci[d] = ci + 1
            v = child_ids[ci]
            if not needed[v]:
                continue
            a = node_term[v]
            if (mem[e_offs[d] + (a >> 6)] >> np.uint64(a & 63)) & one:
                if cuda.threadIdx.x == 0:
                    viable[v] = 1
                if child_start[v + 1] > child_start[v] and d + 1 < MAXD:
                    m = frontier_m[f] + d
                    slot = mybase + d * stride
                    t_off = slot
                    p_off = slot + n_left * ((m + 1 + 63) // 64) + (n_left + 63) // 64
                    e_off = p_off + WN
                    block_extend(mem, tiers, ps, m, a, t_off, p_off, e_off, cur_all[w], seeds_all[w],
                                 n_nt, n_left, WN, WT, start, rule_left, rule_parent, rule_right, term_nts, first,
                                 first_term)
                    if cuda.threadIdx.x == 0:
                        tiers[m] = t_off
                        ps[m + 1] = p_off
                    cuda.syncthreads()
                    d += 1
                    stack_node[d] = v
                    stack_ci[d] = child_start[v]
                    e_offs[d] = e_off
        f += cuda.gridDim.x


class CudaSearch:
    """Host side of the CUDA tree search: keeps a device mirror of the chart arena (tiers are never
    rewritten, so only new words are copied), BFS level by level, then the DFS kernel."""

    def __init__(self, comp, workers: int = 32, bfs_depth: int = 2, threads: int | None = None):
        g, al = comp.grammar, comp.align
        if threads is None:   # the simulator runs every thread as a Python thread: keep blocks small there
            threads = 4 if numba.config.ENABLE_CUDASIM else THREADS
        if al.max_depth >= MAXD:
            from gcdbench.parsers.base import CompileError

            raise CompileError(f"terminal tree depth {al.max_depth} exceeds the CUDA stack ({MAXD})")
        self.g, self.al = g, al
        self.workers = max(1, workers)
        self.bfs_depth = max(0, bfs_depth)
        self.threads = threads
        rule_left = np.zeros(g.rule_parent.size, dtype=np.int32)
        for a in range(g.n_left):
            rule_left[g.rule_lstart[a]:g.rule_lstart[a + 1]] = a
        self.gargs_host = (g.n_nt, g.n_left, g.WN, g.WT, g.start, rule_left, g.rule_parent, g.rule_right,
                           g.term_nts, g.first, g.first_term)
        to = cuda.to_device
        self.gargs = (g.n_nt, g.n_left, g.WN, g.WT, g.start, to(rule_left), to(g.rule_parent), to(g.rule_right),
                      to(g.term_nts), to(g.first), to(g.first_term))
        self.trie = (to(al.child_start), to(al.child_ids), to(al.node_term))
        self.dmem = None
        self.synced = 0
        self._store = None

    def _mirror(self, store, extra: int):
        if store is not self._store:     # reset() made a new arena: the device copy is stale
            self._store = store
            self.synced = 0
        need = store.used + extra
        if self.dmem is None or self.dmem.size < need:
            self.dmem = cuda.to_device(np.zeros(max(need, 2 * store.used + extra), dtype=np.uint64))
            self.synced = 0
        if store.used > self.synced:
            self.dmem[self.synced:store.used].copy_to_device(store.mem[self.synced:store.used])
            self.synced = store.used

    def search(self, store, base: int, needed: np.ndarray | None = None) -> np.ndarray:
        g, al = self.g, self.al
        if needed is None:
            needed = np.ones(al.n_nodes, dtype=np.uint8)
        D = al.max_depth
        n = store.depth[base]
        stride = g.node_words(n + D)
        tiers0, ps0 = store.path(base, extra=D + 1)
        cs, ci, nt = al.child_start, al.child_ids, al.node_term
        # BFS levels; slot words are allocated right after the arena, DFS stacks after them
        levels_nodes = [[0]]
        info = {0: (tiers0, ps0, store.e_off[base])}     # node -> (tier table, p table, EXPECT offset)
        viable = [0]
        n_bfs = 0
        frontier = []
        bfs_words_guess = stride * 64
        self._mirror(store, bfs_words_guess + self.workers * MAXD * stride)
        bfs_base = store.used
        host_e = {}
        depth = 0
        while levels_nodes[-1]:
            level = levels_nodes[-1]
            nxt = []
            if depth >= self.bfs_depth:
                frontier = level
                break
            todo = []
            for u in level:
                e_off = info[u][2]
                ew = host_e.get(u)
                if ew is None:
                    ew = store.mem[e_off:e_off + g.WT] if e_off < store.used else self.dmem[e_off:e_off + g.WT].copy_to_host()
                for j in range(cs[u], cs[u + 1]):
                    v = int(ci[j])
                    if not needed[v]:
                        continue
                    a = int(nt[v])
                    if (int(ew[a >> 6]) >> (a & 63)) & 1:
                        viable.append(v)
                        if cs[v + 1] > cs[v]:
                            todo.append((u, v, a))
            if todo:
                k = len(todo)
                if (n_bfs + k) * stride > bfs_words_guess:
                    bfs_words_guess = 2 * (n_bfs + k) * stride
                    self._mirror(store, bfs_words_guess + self.workers * MAXD * stride)
                L = tiers0.size
                t_tab = np.zeros((k, L), dtype=np.int64)
                p_tab = np.zeros((k, L + 1), dtype=np.int64)
                ms = np.zeros(k, dtype=np.int64)
                terms = np.zeros(k, dtype=np.int32)
                outs = np.zeros((k, 3), dtype=np.int64)
                for i, (u, v, a) in enumerate(todo):
                    tt, pp, _ = info[u]
                    m = n + depth
                    slot = bfs_base + (n_bfs + i) * stride
                    t_tab[i] = tt
                    p_tab[i] = pp
                    ms[i], terms[i] = m, a
                    outs[i] = (slot, slot + g.tier_words(m), slot + g.tier_words(m) + g.WN)
                    t2, p2 = tt.copy(), pp.copy()
                    t2[m] = outs[i, 0]
                    p2[m + 1] = outs[i, 1]
                    info[v] = (t2, p2, int(outs[i, 2]))
                    nxt.append(v)
                Wc = g.n_nt * ((n + D + 1 + 63) // 64)
                cur_all = cuda.device_array((k, Wc), dtype=np.uint64)
                seeds_all = cuda.device_array((k, g.WN), dtype=np.uint64)
                bfs_level_kernel[k, self.threads](self.dmem, cuda.to_device(terms), cuda.to_device(ms),
                                                  cuda.to_device(t_tab), cuda.to_device(p_tab), cuda.to_device(outs),
                                                  cur_all, seeds_all, *self.gargs)
                n_bfs += k
            levels_nodes.append(nxt)
            depth += 1
        vflags = np.zeros(al.n_nodes, dtype=np.uint8)
        vflags[viable] = 1
        if frontier:
            F = len(frontier)
            L = tiers0.size
            t_tab = np.stack([info[u][0] for u in frontier])
            p_tab = np.stack([info[u][1] for u in frontier])
            fe = np.array([info[u][2] for u in frontier], dtype=np.int64)
            fm = np.array([n + int(al.node_depth[u]) for u in frontier], dtype=np.int64)
            scratch = bfs_base + bfs_words_guess
            Wc = g.n_nt * ((n + D + 1 + 63) // 64)
            wk = min(self.workers, F)
            dv = cuda.to_device(vflags)
            dfs_kernel[wk, self.threads](self.dmem, cuda.to_device(np.array(frontier, dtype=np.int32)),
                                         cuda.to_device(fe), cuda.to_device(fm), cuda.to_device(t_tab),
                                         cuda.to_device(p_tab), stride, scratch, *self.trie, cuda.to_device(needed), dv,
                                         cuda.device_array((wk, Wc), dtype=np.uint64),
                                         cuda.device_array((wk, g.WN), dtype=np.uint64), *self.gargs)
            vflags = dv.copy_to_host()
            del L
        return np.flatnonzero(vflags).astype(np.int32)
