"""Device logic written once: the chart step and the depth-first terminal-tree search, for both targets.

The functions below are plain Python compiled by numba. This module compiles them for the CPU
(``numba.njit``); ``cuda_kernels.py`` compiles the same code as CUDA device functions with :func:`for_cuda`,
which rebinds the few target primitives they call:

=============  ==================================  ==========================================
primitive      CPU (one thread does all the work)  CUDA (the threads of one block share it)
=============  ==================================  ==========================================
``_tid``       0                                   ``cuda.threadIdx.x``
``_nth``       1                                   ``cuda.blockDim.x``
``_or_word``   ``arr[i] |= val``                   ``cuda.atomic.or_``
``_or_old``    the same, returning the old word    ``cuda.atomic.or_`` (returns the old word)
``_sync``      nothing                             ``cuda.syncthreads``
``_ctz``       binary search                       ``cuda.popc(low - 1)``
``_emit``      append to a list of viable nodes    set the node's flag (thread 0)
=============  ==================================  ==========================================

The threads of a block share the work by ``tid = _tid()`` and ``nth = _nth()`` (constants 0 and 1 on the CPU,
which the compiler folds away): loops over independent words run ``range(tid, N, nth)``; loops over irregular
work items (rule pairs, chart entries) hand the items out round-robin with a ``skip`` countdown, which on the
CPU is the plain loop. Kernels only compute indices and call these functions.

The grammar travels as one record, :data:`Grammar` (a namedtuple of scalars and arrays); jitted entry points
take it as a plain tuple (``grammar.dev``) and rebuild the record with ``Grammar(*gt)``: numba types a plain
tuple argument on its fast dispatch path, a namedtuple argument on a slower one.
"""
from __future__ import annotations

import types
from collections import namedtuple

import numba
import numpy as np

Grammar = namedtuple("Grammar", [
    "n_nt", "n_left", "WN", "WT", "start",
    "term_nts",    # uint64 [T, WN]   V -> t
    "first",       # uint64 [NT, WN]  FIRST closure
    "first_term",  # uint64 [NT, WT]  terminals starting V
    "rb",          # uint64 [n_left, WN]  right children B of rules V -> A B, per left child A
    "ab_id",       # int32 [n_left, NT]  (A, B) -> pair id, or -1
    "ab_start",    # int32 [pairs+1]     CSR of parents V per (A, B) pair
    "ab_parent",   # int32 [R]
    "za",          # uint64 [n_left, WN]  parents Z of rules Z -> A X, per left child A
    "az_id",       # int32 [n_left, NT]  (A, Z) -> pair id, or -1
    "azx",         # uint64 [pairs, WN]  right children X per (A, Z) pair
])
Trie = namedtuple("Trie", ["child_start", "child_ids", "node_term"])

_cpu = numba.njit(cache=True, nogil=True)
_cpu_small = numba.njit(cache=True, nogil=True)   # tiny primitives: LLVM inlines them
# numba IR inlining for the helpers of the step's inner loops (as fast as one function; each site adds compile time)
_cpu_inline = numba.njit(cache=True, nogil=True, inline="always")


# -- target primitives, CPU bindings (cuda_kernels.py binds the CUDA ones) ----------------------------------
@_cpu_small
def _or_word(arr, i, val):
    arr[i] |= val


@_cpu_small
def _or_old(arr, i, val):
    old = arr[i]
    arr[i] = old | val
    return old


@_cpu_small
def _sync():
    pass


@_cpu_small
def _emit(out, cnt, v):
    out[cnt] = v


@_cpu_small
def _tid():
    return 0


@_cpu_small
def _nth():
    return 1


@_cpu_inline
def _ctz(low):
    """Index of the single set bit of ``low`` (a power of two), by binary search."""
    b = 0
    if low & np.uint64(0xFFFFFFFF) == 0:
        b += 32
        low >>= np.uint64(32)
    if low & np.uint64(0xFFFF) == 0:
        b += 16
        low >>= np.uint64(16)
    if low & np.uint64(0xFF) == 0:
        b += 8
        low >>= np.uint64(8)
    if low & np.uint64(0xF) == 0:
        b += 4
        low >>= np.uint64(4)
    if low & np.uint64(0x3) == 0:
        b += 2
        low >>= np.uint64(2)
    if low & np.uint64(0x1) == 0:
        b += 1
    return b


# -- shared device logic ------------------------------------------------------------------------------------
@_cpu_inline
def _or_track(cur, voff, d, val, rows, WN, v):
    """cur[voff + d] |= val, recording each new (row, v) entry in the row-major copy ``rows``."""
    one = np.uint64(1)
    old = _or_old(cur, voff + d, val)
    add = val & ~old
    if add:
        vb = one << np.uint64(v & 63)
        vw = v >> 6
        while add:
            low = add & (~add + one)
            add ^= low
            row = d * 64 + _ctz(low)
            _or_word(rows, row * WN + vw, vb)


@_cpu
def chart_step(mem, tier_offs, p_offs, n, t, out_tier, out_p, out_e, cur, seeds, G):
    """Compute tier ``n`` for terminal ``t`` (tiers 0..n-1 at ``tier_offs``, ANC[0..n] at ``p_offs``) and write
    it at ``out_tier``, ANC[n+1] at ``out_p``, EXPECT[n+1] at ``out_e``. Returns 1 if t_0..t_n is a sentence.
    ``cur`` is scratch of ``PackedGrammar.scratch_words(n)`` words, ``seeds`` of ``WN`` words (both shared by
    the ``nth`` threads).

    The working tier is kept both by nonterminal (row bits, for the shifted ORs) and by row (nonterminal
    bits): for an older tier ``e`` only the pairs (A present in tier e) x (B present in row n-e-1) that are
    rules are visited, and each chart entry is touched once. Row n-e-1 is final when tier ``e`` is read
    (later ``e`` only write rows above it), so the threads read it while they OR into higher rows."""
    n_nt, n_left, WN, WT = G.n_nt, G.n_left, G.WN, G.WT
    tid, nth = _tid(), _nth()
    W = (n + 1 + 63) // 64
    WL = (n_left + 63) // 64
    one = np.uint64(1)
    rows = cur[n_nt * W:]
    for i in range(tid, n_nt * W + (n + 1) * WN, nth):
        cur[i] = 0
    for i in range(tid, WN, nth):
        seeds[i] = 0
    _sync()
    # row 0: V -> t_n
    for wi in range(tid, WN, nth):
        bits = G.term_nts[t, wi]
        rows[wi] = bits
        while bits:
            low = bits & (~bits + one)
            bits ^= low
            cur[(wi * 64 + _ctz(low)) * W] = one
    _sync()
    # rows 1..n: one older tier e at a time, rule pairs (A, B) handed out round-robin
    for e in range(n - 1, -1, -1):
        rk = (n - e - 1) * WN
        shift = n - e
        We = (e + 1 + 63) // 64
        sw = shift >> 6
        sb = np.uint64(shift & 63)
        base = tier_offs[e]
        pres = base + n_left * We
        skip = tid
        for aw in range(WL):
            abits = mem[pres + aw]
            while abits:
                alow = abits & (~abits + one)
                abits ^= alow
                a = aw * 64 + _ctz(alow)
                aoff = base + a * We
                for j in range(WN):
                    cand = G.rb[a, j] & rows[rk + j]
                    while cand:
                        low = cand & (~cand + one)
                        cand ^= low
                        if skip > 0:
                            skip -= 1
                            continue
                        skip = nth - 1
                        pid = G.ab_id[a, j * 64 + _ctz(low)]
                        for q in range(G.ab_start[pid], G.ab_start[pid + 1]):
                            v = G.ab_parent[q]
                            voff = v * W
                            for w in range(We):
                                val = mem[aoff + w]
                                if val == 0:
                                    continue
                                d = w + sw
                                if d < W:
                                    _or_track(cur, voff, d, val << sb, rows, WN, v)
                                if sb != 0 and d + 1 < W:
                                    _or_track(cur, voff, d + 1, val >> (np.uint64(64) - sb), rows, WN, v)
        _sync()
    return step_epilogue(mem, p_offs, n, out_tier, out_p, out_e, cur, seeds, G)


@_cpu_inline
def step_epilogue(mem, p_offs, n, out_tier, out_p, out_e, cur, seeds, G):
    """Second half of :func:`chart_step`, once the working tier ``cur`` is final: store the left-capable rows
    and the bits of the left nonterminals present, ANC[n+1] and EXPECT[n+1]; returns the accept flag."""
    n_left, WN, WT = G.n_left, G.WN, G.WT
    tid, nth = _tid(), _nth()
    W = (n + 1 + 63) // 64
    WL = (n_left + 63) // 64
    one = np.uint64(1)
    for i in range(tid, n_left * W, nth):
        mem[out_tier + i] = cur[i]
    for aw in range(tid, WL, nth):
        acc = np.uint64(0)
        for a in range(aw * 64, min(n_left, aw * 64 + 64)):
            for w in range(W):
                if cur[a * W + w] != 0:
                    acc |= one << np.uint64(a & 63)
                    break
        mem[out_tier + n_left * W + aw] = acc
    for i in range(tid, WN, nth):
        mem[out_p + i] = 0
    for i in range(tid, WT, nth):
        mem[out_e + i] = 0
    # seeds of ANC[n+1]: for each entry (A, row) of the new tier, parents Z of A in ANC[n-row] give right
    # children X (entries handed out round-robin)
    skip = tid
    for a in range(n_left):
        aoff = a * W
        for w in range(W):
            bits = cur[aoff + w]
            while bits:
                low = bits & (~bits + one)
                bits ^= low
                if skip > 0:
                    skip -= 1
                    continue
                skip = nth - 1
                poff = p_offs[n - (w * 64 + _ctz(low))]
                for j in range(WN):
                    cand = G.za[a, j] & mem[poff + j]
                    while cand:
                        zl = cand & (~cand + one)
                        cand ^= zl
                        pid = G.az_id[a, j * 64 + _ctz(zl)]
                        for jj in range(WN):
                            _or_word(seeds, jj, G.azx[pid, jj])
    _sync()
    # ANC[n+1] = FIRST closure of the seeds, EXPECT[n+1] = their first terminals (seeds handed out round-robin)
    skip = tid
    for wi in range(WN):
        bits = seeds[wi]
        while bits:
            low = bits & (~bits + one)
            bits ^= low
            if skip > 0:
                skip -= 1
                continue
            skip = nth - 1
            xn = wi * 64 + _ctz(low)
            for j in range(WN):
                _or_word(mem, out_p + j, G.first[xn, j])
            for j in range(WT):
                _or_word(mem, out_e + j, G.first_term[xn, j])
    accept = 0
    if G.start >= 0:
        if (cur[G.start * W + (n >> 6)] >> np.uint64(n & 63)) & one:
            accept = 1
    _sync()
    return accept


@_cpu
def dfs(mem, tier_offs, p_offs, n, u, e_off, first, step, scratch_off, stride, T, needed, viable, cnt,
        stack_node, stack_ci, e_offs, cur, seeds, G):
    """Walk the terminal trie depth-first below node ``u``, whose chart has ``n`` tiers (offsets in ``tier_offs``,
    ANC in ``p_offs``) and EXPECT at ``e_off``; of ``u``'s own children only ``first, first + step, ...``
    (child indices) are taken. A child is viable iff its terminal is in its parent's EXPECT; only nodes flagged
    in ``needed`` are visited. Each viable node goes to ``_emit(viable, cnt, v)``; a viable node with
    children gets its chart (one more tier) in a per-depth slot ``scratch_off + depth * stride``, its offsets
    written into ``tier_offs[n + depth]`` / ``p_offs[n + depth + 1]`` (shared by the threads: thread 0
    writes). Returns ``cnt`` plus the number of viable nodes found."""
    one = np.uint64(1)
    n_left, WN = G.n_left, G.WN
    tid = _tid()
    d = 0
    stack_node[0] = u
    stack_ci[0] = first
    e_offs[0] = e_off
    while d >= 0:
        x = stack_node[d]
        ci = stack_ci[d]
        if ci >= T.child_start[x + 1]:
            d -= 1
            continue
        stack_ci[d] = ci + (step if d == 0 else 1)
        v = T.child_ids[ci]
        if not needed[v]:
            continue
        a = np.int64(T.node_term[v])
        if (mem[e_offs[d] + (a >> 6)] >> np.uint64(a & 63)) & one:
            _emit(viable, cnt, v)
            cnt += 1
            if T.child_start[v + 1] > T.child_start[v]:
                m = n + d          # index of the new tier (terminal a)
                t_off = scratch_off + d * stride
                p_off = t_off + n_left * ((m + 1 + 63) // 64) + (n_left + 63) // 64
                chart_step(mem, tier_offs, p_offs, m, a, t_off, p_off, p_off + WN, cur, seeds, G)
                if tid == 0:
                    tier_offs[m] = t_off
                    p_offs[m + 1] = p_off
                _sync()
                d += 1
                stack_node[d] = v
                stack_ci[d] = T.child_start[v]
                e_offs[d] = p_off + WN
    return cnt


# Shared functions in dependency order: what for_cuda compiles, each seeing the CUDA versions of the others.
SHARED = (_or_track, step_epilogue, chart_step, dfs)


def for_cuda(primitives: dict) -> dict:
    """CUDA device-function versions of the shared functions (name -> device function), compiled from the
    same Python code with the target primitives rebound to ``primitives`` (``_or_word``, ``_or_old``,
    ``_sync``, ``_ctz``, ``_emit``: CUDA device functions)."""
    from numba import cuda

    ns = dict(primitives)
    for disp in SHARED:
        fn = disp.py_func
        g = dict(fn.__globals__)
        g.update(ns)
        f = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
        f.__qualname__ = fn.__qualname__ + "_cuda"
        ns[fn.__name__] = cuda.jit(device=True)(f)
    return ns


# -- CPU entry points (called from Python; the grammar comes as a plain tuple, see the module docstring) ----
@_cpu
def extend(mem, tier_offs, p_offs, n, t, out_tier, out_p, out_e, cur, seeds, gt):
    """:func:`chart_step` on the CPU (one thread)."""
    return chart_step(mem, tier_offs, p_offs, n, t, out_tier, out_p, out_e, cur, seeds, Grammar(*gt))


@_cpu
def tree_search(mem, tier_offs, p_offs, n, base_e, scratch_off, stride, tt, needed, viable_out, stack_node, stack_ci,
                e_offs, cur, seeds, root_first, root_step, gt):
    """The viable trie nodes from a base chart (the root, node 0, first) into ``viable_out``; returns how many.
    Only the root's children ``root_first, root_first + root_step, ...`` are searched (``(child_start[0], 1)``
    is all of them). Writes only ``viable_out``, the stacks, ``cur``, ``seeds``, ``tier_offs[n:]``,
    ``p_offs[n+1:]`` and ``mem[scratch_off : scratch_off + stride * depth]``, so workers with their own copies
    of these run concurrently."""
    viable_out[0] = 0
    return dfs(mem, tier_offs, p_offs, n, 0, base_e, root_first, root_step, scratch_off, stride, Trie(*tt), needed,
               viable_out, 1, stack_node, stack_ci, e_offs, cur, seeds, Grammar(*gt))


@numba.njit(cache=True, nogil=True, parallel=True)
def tree_search_par(mem, tier_offs, p_offs, n, base_e, scratch_off, stride, depth, tt, needed, viable_out, counts,
                    stack_node, stack_ci, e_offs, cur, seeds, gt):
    """:func:`tree_search` split over ``W = viable_out.shape[0]`` threads (numba ``prange``): worker w searches
    the root's children w, w + W, ... with its own row of every per-worker array and its own scratch region
    ``scratch_off + w * stride * depth``. Chart tiers below the base are shared and only read. Returns the
    viable nodes (root first, then each worker's, in worker order)."""
    W = viable_out.shape[0]
    G = Grammar(*gt)
    T = Trie(*tt)
    for w in numba.prange(W):
        counts[w] = dfs(mem, tier_offs[w], p_offs[w], n, 0, base_e, T.child_start[0] + w, W,
                        scratch_off + w * stride * depth, stride, T, needed, viable_out[w], 0, stack_node[w],
                        stack_ci[w], e_offs[w], cur[w], seeds[w], G)
    total = 1
    for w in range(W):
        total += counts[w]
    out = np.empty(total, dtype=np.int32)
    out[0] = 0
    k = 1
    for w in range(W):
        for i in range(counts[w]):
            out[k] = viable_out[w, i]
            k += 1
    return out
