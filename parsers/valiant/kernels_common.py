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
``_ctz``       LLVM ``cttz`` (one instruction)     ``cuda.popc(low - 1)``
``_emit``      append to a list of viable nodes    set the node's flag (thread 0)
=============  ==================================  ==========================================

The threads of a block share the work by ``tid = _tid()`` and ``nth = _nth()`` (constants 0 and 1 on the CPU,
which the compiler folds away): loops over independent words run ``range(tid, N, nth)``; loops over irregular
work items (rule pairs, chart entries) hand the items out round-robin with a ``skip`` countdown, which on the
CPU is the plain loop. Kernels only compute indices and call these functions.

The grammar travels as one record, :data:`Grammar` (a namedtuple of scalars and arrays); jitted entry points
take it as a plain tuple (``grammar.dev``) and rebuild the record with ``Grammar(*gt)``: numba types a plain
tuple argument on its fast dispatch path, a namedtuple argument on a slower one.

What a step computes and why it is cheap (issue 14; chart.py states the invariant):

* **Top-down filter.** A stored cell ``A`` over ``t_i..t_n`` is kept only if ``A`` is in ``ANC[i]`` (it can
  start at ``i`` in a derivation consistent with the prefix); the right-hand rows a step combines are filtered
  the same way as they are read. Every node of a derivation of a viable prefix starting at ``i`` is in
  ``ANC[i]`` and the ancestor sets are closed under FIRST, so ANC, EXPECT and acceptance are exactly those of
  the unfiltered chart, with far fewer cells (tested against the brute force and the reference).
* **Row summary.** The working tier keeps a bitset of its non-empty rows; the step visits only the split
  points whose right-hand row has a cell.
* **Seeds once per (A, Z).** ANC[n+1] comes from the pairs (left child ``A`` of the new tier, parent ``Z`` in
  the ancestor set where ``A`` starts): each pair is OR-ed once, whatever the number of rows ``A`` spans.
* **Idempotent chains.** A chart node's INFO word records whether a rule pair starting before the last
  terminal feeds its ancestor set (``old items``), and, once proven, that appending its last terminal ``a``
  again gives an equivalent chart (:func:`certify`): the search then takes the same chart for ``..a a a``
  without a chart step (a token of 98 ``-`` costs three steps, not 98).
"""
from __future__ import annotations

import types
from collections import namedtuple

import numba
import numpy as np
from llvmlite import ir as llvm_ir
from numba.core import types as nbtypes
from numba.core.extending import intrinsic

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
    "term_z",      # uint64 [T, WN]   parents Z of rules Z -> A X with A -> t (the items a terminal can close)
])
Trie = namedtuple("Trie", ["child_start", "child_ids", "node_term"])

# INFO word of a chart node (after its EXPECT words): bit 0 accept, bit 1 old items, bits 2.. idem terminal + 1
INFO_ACCEPT = 1
INFO_OLD = 2
IDEM_SHIFT = 2
MAX_IDEM_PAIRS = 16    # certify gives up (soundly) on larger item sets
# per-search work counters (``stats``): chart steps, trie nodes checked, viable nodes, chain nodes aliased
ST_STEPS, ST_CHECKED, ST_VIABLE, ST_ALIASED = 0, 1, 2, 3
N_STATS = 4

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


@intrinsic
def _cttz64(typingctx, x):
    """LLVM's count-trailing-zeros of a uint64, as an int64 (``x`` is never 0 here)."""
    sig = nbtypes.int64(nbtypes.uint64)

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], llvm_ir.Constant(llvm_ir.IntType(1), 1))

    return sig, codegen


@_cpu_small
def _ctz(low):
    """Index of the lowest set bit of ``low`` (a power of two here)."""
    return _cttz64(low)


# -- shared device logic ------------------------------------------------------------------------------------
@_cpu_inline
def _or_track(cur, voff, d, val, rows, WN, v, rowsum):
    """cur[voff + d] |= val, recording each new (row, v) entry in the row-major copy ``rows`` and its row in
    the row summary ``rowsum``."""
    one = np.uint64(1)
    old = _or_old(cur, voff + d, val)
    add = val & ~old
    if add:
        _or_word(rowsum, d, add)
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
    it at ``out_tier``, ANC[n+1] at ``out_p``, EXPECT[n+1] at ``out_e`` and the INFO word after EXPECT. Returns
    the INFO word (bit 0: t_0..t_n is a sentence; bit 1: old items). ``cur`` is scratch of
    ``PackedGrammar.scratch_words(n)`` words, ``seeds`` of ``WN`` words (both shared by the ``nth`` threads).

    The working tier is kept both by nonterminal (row bits, for the shifted ORs) and by row (nonterminal
    bits), plus a summary of its non-empty rows: for an older tier ``e`` only the pairs (A present in tier e)
    x (B present in row n-e-1 and in ANC[e+1]) that are rules are visited, split points whose row is empty
    are skipped, and each chart entry is touched once. Row n-e-1 is final when tier ``e`` is read (later
    ``e`` only write rows above it), so the threads read it while they OR into higher rows."""
    n_nt, n_left, WN = G.n_nt, G.n_left, G.WN
    tid, nth = _tid(), _nth()
    W = (n + 1 + 63) // 64
    WL = (n_left + 63) // 64
    one = np.uint64(1)
    rows = cur[n_nt * W:]
    rs = n_nt * W + (n + 1) * WN      # row summary (W words) after the row-major copy, then a flag word
    rowsum = cur[rs:]
    for i in range(tid, rs + W + 1, nth):
        cur[i] = 0
    for i in range(tid, WN, nth):
        seeds[i] = 0
    _sync()
    # row 0: V -> t_n, V in ANC[n]
    pn = p_offs[n]
    for wi in range(tid, WN, nth):
        bits = G.term_nts[t, wi] & mem[pn + wi]
        rows[wi] = bits
        if bits:
            _or_word(rowsum, 0, one)
        while bits:
            low = bits & (~bits + one)
            bits ^= low
            cur[(wi * 64 + _ctz(low)) * W] = one
    _sync()
    # rows r = 0..n-1 as right children (split after t_e, e = n-1-r): only non-empty rows, in order
    r = 0
    while r < n:
        word = rowsum[r >> 6] >> np.uint64(r & 63)
        if word == 0:
            r = ((r >> 6) + 1) << 6
            continue
        r += _ctz(word & (~word + one))
        if r >= n:
            break
        e = n - 1 - r
        rk = r * WN
        pe = p_offs[e + 1]            # the right child starts at t_{e+1}
        live = np.uint64(0)
        for j in range(WN):
            live |= rows[rk + j] & mem[pe + j]
        if live != 0:
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
                        cand = G.rb[a, j] & rows[rk + j] & mem[pe + j]
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
                                        _or_track(cur, voff, d, val << sb, rows, WN, v, rowsum)
                                    if sb != 0 and d + 1 < W:
                                        _or_track(cur, voff, d + 1, val >> (np.uint64(64) - sb), rows, WN, v,
                                                  rowsum)
        _sync()
        r += 1
    return step_epilogue(mem, p_offs, n, out_tier, out_p, out_e, cur, seeds, G)


@_cpu_inline
def step_epilogue(mem, p_offs, n, out_tier, out_p, out_e, cur, seeds, G):
    """Second half of :func:`chart_step`, once the working tier ``cur`` is final: store the left-capable rows
    (only cells in the ancestor set of their start) and the bits of the left nonterminals present, ANC[n+1],
    EXPECT[n+1] and the INFO word; returns the INFO word."""
    n_nt, n_left, WN, WT = G.n_nt, G.n_left, G.WN, G.WT
    tid, nth = _tid(), _nth()
    W = (n + 1 + 63) // 64
    WL = (n_left + 63) // 64
    one = np.uint64(1)
    flag = n_nt * W + (n + 1) * WN + W     # the old-items flag word, after the row summary
    for i in range(tid, WL, nth):
        mem[out_tier + n_left * W + i] = 0
    for i in range(tid, WN, nth):
        mem[out_p + i] = 0
    for i in range(tid, WT, nth):
        mem[out_e + i] = 0
    _sync()
    # left nonterminals handed out round-robin: store the filtered rows, presence bit, and the seeds of
    # ANC[n+1]: parents Z of A in the union of ANC over the starts of A's cells give right children X
    for a in range(tid, n_left, nth):
        aoff = a * W
        to = out_tier + aoff
        ab = one << np.uint64(a & 63)
        aw = a >> 6
        anyw = np.uint64(0)
        for w in range(W):
            bits = cur[aoff + w]
            keep = np.uint64(0)
            while bits:
                low = bits & (~bits + one)
                bits ^= low
                if mem[p_offs[n - (w * 64 + _ctz(low))] + aw] & ab:
                    keep |= low
            mem[to + w] = keep
            anyw |= keep
        if anyw == 0:
            continue
        _or_word(mem, out_tier + n_left * W + aw, ab)
        for j in range(WN):
            zj = G.za[a, j]
            if zj == 0:
                continue
            m0 = np.uint64(0)
            m1 = np.uint64(0)
            for w in range(W):
                bits = mem[to + w]
                while bits:
                    low = bits & (~bits + one)
                    bits ^= low
                    row = w * 64 + _ctz(low)
                    if row == 0:
                        m0 |= mem[p_offs[n] + j]
                    else:
                        m1 |= mem[p_offs[n - row] + j]
            if zj & m1:
                _or_word(cur, flag, one)
            cand = zj & (m0 | m1)
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
    info = np.int64(0)
    if G.start >= 0:
        if (cur[G.start * W + (n >> 6)] >> np.uint64(n & 63)) & one:
            info = INFO_ACCEPT
    if cur[flag] != 0:
        info |= INFO_OLD
    if tid == 0:
        mem[out_e + WT] = np.uint64(info)
    _sync()
    return info


@_cpu
def _has_self_item(mem, pb, a, x, G):
    """Is (x, x) an item closed by terminal ``a`` at the position whose ANC is at ``pb``: ``x`` in ANC, a rule
    ``x -> A x`` with ``A -> a``?"""
    one = np.uint64(1)
    xw = x >> 6
    xb = one << np.uint64(x & 63)
    if not (mem[pb + xw] & G.term_z[a, xw] & xb):
        return False
    for aw in range((G.n_left + 63) // 64):
        abits = G.term_nts[a, aw]
        while abits:
            alow = abits & (~abits + one)
            abits ^= alow
            A = aw * 64 + _ctz(alow)
            if A >= G.n_left:
                break
            pid = G.az_id[A, x]
            if pid >= 0 and G.azx[pid, xw] & xb:
                return True
    return False


@_cpu
def _in_first_of_rights(mem, pb, a, z, G):
    """Is ``z`` in FIRST(X) for some right child X of an item closed by ``a`` at ANC ``pb``?"""
    one = np.uint64(1)
    zw = z >> 6
    zb = one << np.uint64(z & 63)
    for aw in range((G.n_left + 63) // 64):
        abits = G.term_nts[a, aw]
        while abits:
            alow = abits & (~abits + one)
            abits ^= alow
            A = aw * 64 + _ctz(alow)
            if A >= G.n_left:
                break
            for j in range(G.WN):
                cz = G.za[A, j] & mem[pb + j]
                while cz:
                    zl = cz & (~cz + one)
                    cz ^= zl
                    pid = G.az_id[A, j * 64 + _ctz(zl)]
                    for jj in range(G.WN):
                        xs = G.azx[pid, jj]
                        while xs:
                            xl = xs & (~xs + one)
                            xs ^= xl
                            if G.first[jj * 64 + _ctz(xl), zw] & zb:
                                return True
    return False


@_cpu
def certify(mem, p_offs, m, a, prev_info, info, prev_term, G):
    """INFO word of the chart ``C + a`` (tiers 0..m, just computed, INFO ``info``) given its parent chart ``C``
    (tiers 0..m-1, INFO ``prev_info``, last terminal ``prev_term``): with the idem mark ``a`` when
    ``C + a + a`` is provably equivalent to ``C + a`` for every continuation, else unchanged.

    Proof sketch (parsers/valiant/README.md has it in full). Let Q(C) be the set of sentential-form suffixes
    left after deriving C's terminals. When no item older than the last terminal feeds the ancestor set (INFO
    bit 1 clear), Q(C + a) = G_I(Q(C)) plus acceptance, where I is the set of items (Z -> A . X, A -> a) over
    the last terminal and G_I(Q) = U_{(Z,X) in I} FL(X) . Z^-1 Q. If C and C + a both end with ``a`` that way,
    with the same I and the same acceptance, then Q(C + a + a) = Q(C + a) as soon as G_I is idempotent; it is
    when (a) (X, X) is in I for every right child X of I, and (b) every (Z, X) in I with Z in FIRST of a right
    child of I has X = Z. An idem chart stays idem: C + a equivalent to C gives (C + a) + a equivalent to C + a."""
    if prev_term != a or m < 1:
        return info
    mark = np.int64(a + 1) << IDEM_SHIFT
    if (prev_info >> IDEM_SHIFT) == a + 1:
        return info | mark
    if (prev_info & 3) != (info & 3) or (info & INFO_OLD) != 0:
        return info
    pa = p_offs[m - 1]
    pb = p_offs[m]
    for j in range(G.WN):
        if (mem[pa + j] ^ mem[pb + j]) & G.term_z[a, j]:
            return info
    # the items closed by a at position m: (Z, X), Z in ANC[m], Z -> A X, A -> a
    one = np.uint64(1)
    pairs = 0
    for aw in range((G.n_left + 63) // 64):
        abits = G.term_nts[a, aw]
        while abits:
            alow = abits & (~abits + one)
            abits ^= alow
            A = aw * 64 + _ctz(alow)
            if A >= G.n_left:
                break
            for j in range(G.WN):
                cz = G.za[A, j] & mem[pb + j]
                while cz:
                    zl = cz & (~cz + one)
                    cz ^= zl
                    z = j * 64 + _ctz(zl)
                    pairs += 1
                    if pairs > MAX_IDEM_PAIRS:
                        return info
                    pid = G.az_id[A, z]
                    zw = z >> 6
                    for jj in range(G.WN):
                        xs = G.azx[pid, jj]
                        # (b): if z is in FIRST of some right child, its only right child is z itself
                        if xs & ~(zl if jj == zw else np.uint64(0)):
                            if _in_first_of_rights(mem, pb, a, z, G):
                                return info
                        while xs:
                            xl = xs & (~xs + one)
                            xs ^= xl
                            # (a): (X, X) is an item too
                            if not _has_self_item(mem, pb, a, jj * 64 + _ctz(xl), G):
                                return info
    if pairs == 0:
        return info
    return info | mark


@_cpu
def dfs(mem, tier_offs, p_offs, n, u, e_off, u_term, first, step, scratch_off, stride, T, needed, viable, cnt,
        stack_node, stack_ci, e_offs, lv_n, cur, seeds, stats, G):
    """Walk the terminal trie depth-first below node ``u``, whose chart has ``n`` tiers (offsets in ``tier_offs``,
    ANC in ``p_offs``), EXPECT at ``e_off`` (its INFO word follows) and last terminal ``u_term``; of ``u``'s own
    children only ``first, first + step, ...`` (child indices) are taken. A child is viable iff its terminal is
    in its parent's EXPECT; only nodes flagged in ``needed`` are visited. Each viable node goes to
    ``_emit(viable, cnt, v)``; a viable node with children gets its chart: its parent's own chart when the parent's
    is idem for its terminal (no step), else one more tier in the per-depth slot ``scratch_off + depth * stride``,
    its offsets written into ``tier_offs[m]`` / ``p_offs[m + 1]`` (``m`` its tier index; shared by the threads:
    thread 0 writes). Work is counted in ``stats`` (thread 0). Returns ``cnt`` plus the number of viable nodes."""
    one = np.uint64(1)
    n_left, WN, WT = G.n_left, G.WN, G.WT
    tid = _tid()
    d = 0
    stack_node[0] = u
    stack_ci[0] = first
    e_offs[0] = e_off
    lv_n[0] = n
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
        if tid == 0:
            stats[ST_CHECKED] += 1
        ex = e_offs[d]
        if (mem[ex + (a >> 6)] >> np.uint64(a & 63)) & one:
            _emit(viable, cnt, v)
            cnt += 1
            if tid == 0:
                stats[ST_VIABLE] += 1
            if T.child_start[v + 1] > T.child_start[v]:
                m = lv_n[d]        # index of the new tier (terminal a)
                x_info = np.int64(mem[ex + WT])
                if (x_info >> IDEM_SHIFT) == a + 1:
                    # C_x + a is equivalent to C_x: v's subtree is searched from x's chart
                    if tid == 0:
                        stats[ST_ALIASED] += 1
                    d += 1
                    stack_node[d] = v
                    stack_ci[d] = T.child_start[v]
                    e_offs[d] = ex
                    lv_n[d] = m
                    continue
                t_off = scratch_off + d * stride
                p_off = t_off + n_left * ((m + 1 + 63) // 64) + (n_left + 63) // 64
                info = chart_step(mem, tier_offs, p_offs, m, a, t_off, p_off, p_off + WN, cur, seeds, G)
                if tid == 0:
                    tier_offs[m] = t_off
                    p_offs[m + 1] = p_off
                    stats[ST_STEPS] += 1
                _sync()
                x_term = u_term if d == 0 else np.int64(T.node_term[x])
                info2 = certify(mem, p_offs, m, a, x_info, info, x_term, G)
                if info2 != info and tid == 0:
                    mem[p_off + WN + WT] = np.uint64(info2)
                _sync()
                d += 1
                stack_node[d] = v
                stack_ci[d] = T.child_start[v]
                e_offs[d] = p_off + WN
                lv_n[d] = m + 1
    return cnt


# Shared functions in dependency order: what for_cuda compiles, each seeing the CUDA versions of the others.
SHARED = (_or_track, step_epilogue, chart_step, _has_self_item, _in_first_of_rights, certify, dfs)


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


# -- the grammar packed into three arrays (CPU entry points: each array argument costs about 1,000 instructions
#    of numba dispatch, so the 16 tables travel as three flat arrays and are viewed again inside) -------------
_U_TABLES = ("term_nts", "first", "first_term", "rb", "za", "azx", "term_z")     # uint64, 2-D
_I_TABLES = ("ab_id", "ab_start", "ab_parent", "az_id")                          # int32, 2-D / 1-D / 1-D / 2-D
_GM_HEAD = 5     # n_nt, n_left, WN, WT, start


def pack_grammar(G) -> tuple:
    """``(gu, gi, gm)``: the uint64 tables of the record ``G`` end to end, the int32 ones, and an int64 header
    (scalars, then offset, rows and columns of each table). :func:`unpack_grammar` views them as ``G`` again."""
    meta = [G.n_nt, G.n_left, G.WN, G.WT, G.start]
    parts_u, parts_i, off_u, off_i = [], [], 0, 0
    for name in _U_TABLES:
        a = np.ascontiguousarray(getattr(G, name), dtype=np.uint64)
        r, c = a.shape
        meta += [off_u, r, c]
        parts_u.append(a.ravel())
        off_u += a.size
    for name in _I_TABLES:
        a = np.ascontiguousarray(getattr(G, name), dtype=np.int32)
        r, c = (a.shape if a.ndim == 2 else (a.size, 1))
        meta += [off_i, r, c]
        parts_i.append(a.ravel())
        off_i += a.size
    gu = np.concatenate(parts_u) if parts_u else np.zeros(0, np.uint64)
    gi = np.concatenate(parts_i) if parts_i else np.zeros(0, np.int32)
    return gu, gi, np.array(meta, dtype=np.int64)


@_cpu_inline
def _tab2(flat, gm, k):
    o, r, c = gm[_GM_HEAD + 3 * k], gm[_GM_HEAD + 3 * k + 1], gm[_GM_HEAD + 3 * k + 2]
    return flat[o:o + r * c].reshape((r, c))


@_cpu_inline
def _tab1(flat, gm, k):
    o, r = gm[_GM_HEAD + 3 * k], gm[_GM_HEAD + 3 * k + 1]
    return flat[o:o + r]


@_cpu_inline
def unpack_grammar(gu, gi, gm):
    """The :data:`Grammar` record viewed from :func:`pack_grammar`'s arrays (no copy)."""
    nu = 7
    return Grammar(gm[0], gm[1], gm[2], gm[3], gm[4], _tab2(gu, gm, 0), _tab2(gu, gm, 1), _tab2(gu, gm, 2),
                   _tab2(gu, gm, 3), _tab2(gi, gm, nu + 0), _tab1(gi, gm, nu + 1), _tab1(gi, gm, nu + 2),
                   _tab2(gu, gm, 4), _tab2(gi, gm, nu + 3), _tab2(gu, gm, 5), _tab2(gu, gm, 6))


# -- CPU entry point of one chart step (the tree search's are in search.py) -----------------------------------
@_cpu
def extend(mem, tier_offs, p_offs, n, t, out_tier, out_p, out_e, cur, seeds, prev_term, gu, gi, gm):
    """:func:`chart_step` on the CPU (one thread), then :func:`certify` against the parent chart (tiers 0..n-1,
    last terminal ``prev_term``, EXPECT at ``p_offs[n] + WN``). ``p_offs`` has room for ANC[n+1]. Returns the
    INFO word."""
    G = unpack_grammar(gu, gi, gm)
    info = chart_step(mem, tier_offs, p_offs, n, t, out_tier, out_p, out_e, cur, seeds, G)
    prev_info = np.int64(mem[p_offs[n] + G.WN + G.WT])
    p_offs[n + 1] = out_p
    info2 = certify(mem, p_offs, n, t, prev_info, info, prev_term, G)
    if info2 != info:
        mem[out_e + G.WT] = np.uint64(info2)
    return info2
