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

The grammar travels as one record, :data:`Grammar` (a namedtuple of scalars and arrays whose fields
:data:`GRAMMAR_FIELDS` declares by name). Device logic reads ``G.<field>``. Jitted entry points take it in the form
numba dispatches fastest and rebuild the record first thing: CPU entry points as three flat arrays
(:func:`pack_grammar`, viewed again by :func:`unpack_grammar`), CUDA kernels as a plain tuple of device arrays
(``PackedGrammar.dev``, ``Grammar(*gt)``): numba types a plain tuple or an array on its fast dispatch path, a
namedtuple argument on a slower one (about 4 us a call).

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

from gcdbench.parsers.targets import borrowed, callee_jit

#: The grammar record's fields in order, each (name, kind, what it holds), the one place they are declared:
#: :data:`Grammar` is built from it, and so are the CPU packing (:func:`pack_grammar`, :func:`unpack_grammar`) and
#: the CUDA arguments (``PackedGrammar.dev``). Kind ``int``: a scalar; ``u64[2]``: uint64 [rows, cols];
#: ``i32[2]`` / ``i32[1]``: int32 [rows, cols] / [n]. A new table is one line here (and its array in PackedGrammar).
GRAMMAR_FIELDS = (
    ("n_nt", "int", "nonterminals"),
    ("n_left", "int", "left-capable nonterminals (0 .. n_left-1: the only ones a tier stores)"),
    ("WN", "int", "words of a set of nonterminals"),
    ("WT", "int", "words of a set of terminals"),
    ("start", "int", "start symbol, or -1"),
    ("term_nts", "u64[2]", "[T, WN] V -> t"),
    ("first", "u64[2]", "[NT, WN] FIRST closure"),
    ("first_term", "u64[2]", "[NT, WT] terminals starting V"),
    ("lb", "u64[2]", "[NT, WL] left children A of rules V -> A B, per right child B"),
    ("ab_id", "i32[2]", "[n_left, NT] (A, B) -> pair id, or -1"),
    ("ab_start", "i32[1]", "[pairs+1] CSR of the direct parents V per (A, B) pair (the others: cover)"),
    ("ab_parent", "i32[1]", "[R'] the direct parents"),
    ("za", "u64[2]", "[n_left, WN] parents Z of rules Z -> A X, per left child A"),
    ("az_id", "i32[2]", "[n_left, NT] (A, Z) -> pair id, or -1"),
    ("azx", "u64[2]", "[pairs, WN] right children X per (A, Z) pair"),
    ("ag_start", "i32[1]", "[n_left+1] CSR of the groups of A's parents Z that have the same right children"),
    ("ag_z", "u64[2]", "[groups, WN] the parents Z of a group"),
    ("ag_x", "u64[2]", "[groups, WN] their right children X"),
    ("term_z", "u64[2]", "[T, WN] parents Z of the items terminal t closes (close_z as a bitset)"),
    ("cover", "u64[2]", "[NT, WN] X != V having every rule V has (so X derives whatever V derives)"),
    ("has_cover", "u64[2]", "[1, WN] the V with a non-empty cover"),
    # the items each terminal t closes, (Z, X) for Z -> A X, A -> t (chart.closing_items): CSR over t
    ("close_start", "i32[1]", "[T+1] CSR over terminals"),
    ("close_z", "i32[1]", "[K] Z"),
    ("close_x", "u64[2]", "[K, WN] the X of (t, Z), over every A -> t"),
    ("close_pairs", "i32[1]", "[K] how many A -> t give (t, Z) (certify counts (A, Z) pairs)"),
    ("cg_start", "i32[1]", "[T+1] CSR over t of the groups of its items' Z with the same first terminals of the X"),
    ("cg_z", "u64[2]", "[groups, WN] the Z of a group"),
    ("cg_t", "u64[2]", "[groups, WT] first_term over the right children X of their items"),
)
Grammar = namedtuple("Grammar", [f for f, _, _ in GRAMMAR_FIELDS])
Trie = namedtuple("Trie", [
    "child_start", "child_ids", "node_term",   # CSR of children; a node's terminal (-1: root, merged boundary)
    "merge_start", "merge_row", "merge_term",  # a merged boundary's edges (align.py, "merged boundaries")
    "no_alias",                                # uint8: a merged node or an ancestor of one (align.alias_blocked)
])

# INFO word of a chart node (after its EXPECT words): bit 0 accept, bit 1 old items, bits 2.. idem terminal + 1
INFO_ACCEPT = 1
INFO_OLD = 2
IDEM_SHIFT = 2
MAX_IDEM_PAIRS = 16    # certify gives up (soundly) on larger item sets
# per-search work counters (``stats``): chart steps, trie nodes checked, viable nodes, chain nodes aliased, leaf
# children proven viable without their parent's chart (_row0_certifies)
ST_STEPS, ST_CHECKED, ST_VIABLE, ST_ALIASED, ST_CERTIFIED = 0, 1, 2, 3, 4
N_STATS = 5

_cpu = callee_jit(cache=True, nogil=True)
_cpu_small = callee_jit(cache=True, nogil=True)   # tiny primitives: LLVM inlines them
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


@_cpu_inline
def _close_row(cur, rows, rk, r, pa, mem, W, acc, tid, nth, G):
    """Close row ``r`` of the working tier (row-major words at ``rows[rk:]``) under ``cover``: every X covering
    a cell V of the row (X has all of V's rules) is a cell too, when X is in the ancestor set at ``pa`` of the
    row's start (other cells are never read). The step ORs only the direct parents of a rule pair; this adds the
    rest once per cell instead of once per derivation. ``acc`` is WN words of scratch; the threads share the
    words ``tid, tid + nth ...``; ends with every thread past a ``_sync``."""
    one = np.uint64(1)
    WN = G.WN
    rbit = one << np.uint64(r & 63)
    rw = r >> 6
    for j in range(tid, WN, nth):      # each thread owns its words of acc: no sync before the end
        acc[j] = 0
    for jv in range(WN):
        vbits = rows[rk + jv] & G.has_cover[0, jv]
        while vbits:
            vl = vbits & (~vbits + one)
            vbits ^= vl
            v = jv * 64 + _ctz(vl)
            for j in range(tid, WN, nth):
                acc[j] |= G.cover[v, j]
    for j in range(tid, WN, nth):
        new = acc[j] & mem[pa + j] & ~rows[rk + j]
        if new:
            rows[rk + j] |= new
            while new:
                xl = new & (~new + one)
                new ^= xl
                _or_word(cur, (j * 64 + _ctz(xl)) * W + rw, rbit)
    _sync()


@_cpu_inline
def _count_full(cur, voff, n, full, v):
    """Raise ``full[v]`` to the number of top rows n, n-1, ... of V's working column that are all set (a lower
    bound: rows are only ever added, so any count seen stays true, and a thread that writes a smaller count
    than another's only makes a later split skip less). A split at row r reaches rows r+1..n only, so once
    ``full[v] >= n - r`` it adds nothing to V (on a fully ambiguous grammar every column fills at its first
    split and the step's other n-1 splits cost a compare each)."""
    f = np.int64(full[v])
    k = n - f                         # the highest row not known to be set
    while k >= 0:
        word = cur[voff + (k >> 6)]
        if (k & 63) == 63 and word == np.uint64(0xFFFFFFFFFFFFFFFF):
            k -= 64
        elif (word >> np.uint64(k & 63)) & np.uint64(1):
            k -= 1
        else:
            break
    if n - k > f:
        full[v] = np.uint64(n - k)


@_cpu
def chart_step(mem, tier_offs, p_offs, n, t, out_tier, out_p, out_e, cur, seeds, G):
    """One chart step for terminal ``t`` after the chart whose tiers are ``tier_offs``: :func:`_step_core` with no
    other edge."""
    return _step_core(mem, tier_offs, p_offs, n, t, tier_offs, tier_offs, 0, out_tier, out_p, out_e, cur, seeds, G)


@_cpu
def chart_step_edges(mem, tier_offs, p_offs, n, t, e_rows, e_terms, ne, out_tier, out_p, out_e, cur, seeds, G):
    """A merged boundary's step (:func:`_step_core` with ``ne`` more edges)."""
    return _step_core(mem, tier_offs, p_offs, n, t, e_rows, e_terms, ne, out_tier, out_p, out_e, cur, seeds, G)


@_cpu_inline
def _step_core(mem, tier_offs, p_offs, n, t, e_rows, e_terms, ne, out_tier, out_p, out_e, cur, seeds, G):
    """Compute tier ``n`` for terminal ``t`` (tiers 0..n-1 at ``tier_offs``, ANC[0..n] at ``p_offs``) and write
    it at ``out_tier``, ANC[n+1] at ``out_p``, EXPECT[n+1] at ``out_e`` and the INFO word after EXPECT. Returns
    the INFO word (bit 0: t_0..t_n is a sentence; bit 1: old items). ``cur`` is scratch of
    ``PackedGrammar.scratch_words(n)`` words, ``seeds`` of ``WN`` words (both shared by the ``nth`` threads).

    The working tier is kept both by nonterminal (row bits, for the shifted ORs) and by row (nonterminal
    bits), plus a summary of its non-empty rows: for an older tier ``e`` only the pairs (A present in tier e)
    x (B present in row n-e-1 and in ANC[e+1]) that are rules are visited, split points whose row is empty
    are skipped, and each chart entry is touched once. Row n-e-1 is final when tier ``e`` is read (later
    ``e`` only write rows above it), so the threads read it while they OR into higher rows.

    Boundaries on a lattice (a merged boundary: several pieces of the bytes end at the new position, begun at
    different boundaries of the chain): ``t < 0`` means no terminal spans only the last gap, and each edge
    ``k < ne`` puts terminal ``e_terms[k]`` over the ``e_rows[k] + 1`` gaps before the new boundary (row
    ``e_rows[k]``, filtered by the ANC where it starts). The recurrence is unchanged: a row only receives cells
    from rows below it, so seeding every edge's row before the loop leaves each row final when it is read."""
    n_nt, n_left, WN = G.n_nt, G.n_left, G.WN
    tid, nth = _tid(), _nth()
    W = (n + 1 + 63) // 64
    WL = (n_left + 63) // 64
    one = np.uint64(1)
    rows = cur[n_nt * W:]
    rs = n_nt * W + (n + 1) * WN      # row summary (W words) after the row-major copy, then a flag word
    rowsum = cur[rs:]
    acc = cur[rs + W + 1:]            # then WN words for _close_row
    full = cur[rs + W + 1 + WN:]      # then n_nt words: f[V] = how many top rows n, n-1, ... of V are all set
    # the skip of a split whose rows are all set saves at most an OR of We words: only worth its bookkeeping once
    # a column spans more than two words (measured: TreeBank's prefixes of 20-60 terminals were 11% slower with
    # it, ambiguous_binary at 2,000 terminals 2x faster)
    track = W > 2
    for i in range(tid, rs + W + 1, nth):
        cur[i] = 0
    if track:
        for i in range(tid, n_nt, nth):
            full[i] = 0
    for i in range(tid, WN, nth):
        seeds[i] = 0
    _sync()
    # row 0: V -> t_n, V in ANC[n]
    pn = p_offs[n]
    if t >= 0:
        for wi in range(tid, WN, nth):
            bits = G.term_nts[t, wi] & mem[pn + wi]
            rows[wi] = bits
            if bits:
                _or_word(rowsum, 0, one)
            while bits:
                low = bits & (~bits + one)
                bits ^= low
                cur[(wi * 64 + _ctz(low)) * W] = one
    # the other edges of a merged boundary: V -> e_terms[k] over row e_rows[k], V in ANC at its start
    for k in range(ne):
        er = e_rows[k]
        ebit = one << np.uint64(er & 63)
        pr = p_offs[n - er]
        for wi in range(tid, WN, nth):
            bits = G.term_nts[e_terms[k], wi] & mem[pr + wi] & ~rows[er * WN + wi]
            if bits:
                rows[er * WN + wi] |= bits
                _or_word(rowsum, er >> 6, ebit)
            while bits:
                low = bits & (~bits + one)
                bits ^= low
                _or_word(cur, (wi * 64 + _ctz(low)) * W + (er >> 6), ebit)
    _sync()
    # once every direct parent V of the grammar has rows r+1..n all set, no later split adds anything: the rows
    # left are only closed (``wit``: the first parent not yet known full; a parent once full for row r stays
    # full for every later row, so it only moves on)
    n_par = G.ab_parent.size
    wit = 0
    done = False
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
        _close_row(cur, rows, rk, r, pe, mem, W, acc, tid, nth, G)
        if track and not done:
            while wit < n_par and np.int64(full[G.ab_parent[wit]]) >= n - r:
                wit += 1
            done = wit == n_par
        live = np.uint64(0)
        if not done:
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
            # right children B (row r, in ANC[e+1]) x left children A present in tier e with a rule V -> A B
            for j in range(WN):
                bbits = rows[rk + j] & mem[pe + j]
                while bbits:
                    blow = bbits & (~bbits + one)
                    bbits ^= blow
                    b = j * 64 + _ctz(blow)
                    for aw in range(WL):
                        cand = G.lb[b, aw] & mem[pres + aw]
                        while cand:
                            low = cand & (~cand + one)
                            cand ^= low
                            if skip > 0:
                                skip -= 1
                                continue
                            skip = nth - 1
                            a = aw * 64 + _ctz(low)
                            aoff = base + a * We
                            pid = G.ab_id[a, b]
                            for q in range(G.ab_start[pid], G.ab_start[pid + 1]):
                                v = G.ab_parent[q]
                                voff = v * W
                                if track and np.int64(full[v]) >= n - r:
                                    continue     # rows r+1..n of V, all this split can reach, are set already
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
                                if track:
                                    _count_full(cur, voff, n, full, v)
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
    rows = cur[n_nt * W:]
    rowsum = cur[n_nt * W + (n + 1) * WN:]
    # row n is never a right child: close it here
    _close_row(cur, rows, n * WN, n, p_offs[0], mem, W, cur[flag + 1:], tid, nth, G)
    # few non-empty rows (at most 64): the tier is written row by row from the row-major copy, each row filtered by
    # one AND with the ANC where it starts (a column loop reads every word of every column: n_left * W, most of
    # them empty on a long prefix); else column by column
    nrows = 0
    for i in range(W):
        x = rowsum[i]
        while x != 0 and nrows <= 64:
            x &= x - one
            nrows += 1
    byrow = nrows <= 64
    if byrow:
        for i in range(tid, n_left * W, nth):
            mem[out_tier + i] = 0
    for i in range(tid, WL, nth):
        mem[out_tier + n_left * W + i] = 0
    for i in range(tid, WN, nth):
        mem[out_p + i] = 0
    for i in range(tid, WT, nth):
        mem[out_e + i] = 0
    # on long prefixes (a column of more than two words) the nonterminals in ANC at every position 0..n, whose
    # rows need no filter (in the words after the old-items flag, free once row n is closed)
    every = cur[flag + 1:]
    wide = W > 2 and not byrow
    if wide:
        for j in range(tid, WN, nth):
            x = mem[p_offs[0] + j]
            p = 1
            while x != 0 and p <= n:
                x &= mem[p_offs[p] + j]
                p += 1
            every[j] = x
    _sync()
    if byrow:
        # rows handed out round-robin: each left cell of row r in ANC[n-r] sets its bit and its presence bit
        lastw = (one << np.uint64(n_left & 63)) - one if (n_left & 63) != 0 else ~np.uint64(0)
        skip = tid
        for i in range(W):
            rbits = rowsum[i]
            while rbits:
                rl = rbits & (~rbits + one)
                rbits ^= rl
                if skip > 0:
                    skip -= 1
                    continue
                skip = nth - 1
                r = i * 64 + _ctz(rl)
                pr = p_offs[n - r]
                for j in range(WL):
                    bits = rows[r * WN + j] & mem[pr + j]
                    if j == WL - 1:
                        bits &= lastw
                    if bits:
                        _or_word(mem, out_tier + n_left * W + j, bits)
                    while bits:
                        low = bits & (~bits + one)
                        bits ^= low
                        _or_word(mem, out_tier + (j * 64 + _ctz(low)) * W + i, rl)
        _sync()
    # left nonterminals handed out round-robin: store the filtered rows (column by column), presence bit, and the
    # seeds of ANC[n+1]: parents Z of A in the union of ANC over the starts of A's cells give right children X
    for a in range(tid, n_left, nth):
        aoff = a * W
        to = out_tier + aoff
        ab = one << np.uint64(a & 63)
        aw = a >> 6
        if byrow:
            if (mem[out_tier + n_left * W + aw] & ab) == 0:
                continue
        else:
            anyw = np.uint64(0)
            if wide and (every[aw] & ab) != 0:
                for w in range(W):
                    keep = cur[aoff + w]
                    mem[to + w] = keep
                    anyw |= keep
            else:
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
                if (m1 & zj) == zj:    # both results below are final: the other rows add nothing
                    break
            if zj & m1:
                _or_word(cur, flag, one)
            # the groups of parents (same right children) with a parent in ANC where A starts
            mz = m0 | m1
            for g in range(G.ag_start[a], G.ag_start[a + 1]):
                if G.ag_z[g, j] & mz:
                    for jj in range(WN):
                        _or_word(seeds, jj, G.ag_x[g, jj])
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
    for k in range(G.close_start[a], G.close_start[a + 1]):
        if G.close_z[k] == x:
            return (G.close_x[k, xw] & xb) != 0
    return False


@_cpu
def _in_first_of_rights(mem, pb, a, z, G):
    """Is ``z`` in FIRST(X) for some right child X of an item closed by ``a`` at ANC ``pb``?"""
    one = np.uint64(1)
    zw = z >> 6
    zb = one << np.uint64(z & 63)
    for k in range(G.close_start[a], G.close_start[a + 1]):
        y = G.close_z[k]
        if not (mem[pb + (y >> 6)] >> np.uint64(y & 63)) & one:
            continue
        for jj in range(G.WN):
            xs = G.close_x[k, jj]
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
    # the items closed by a at position m: (Z, X), Z in ANC[m], Z -> A X, A -> a (the (A, Z) pairs are counted)
    one = np.uint64(1)
    pairs = 0
    for k in range(G.close_start[a], G.close_start[a + 1]):
        z = G.close_z[k]
        zw = z >> 6
        zl = one << np.uint64(z & 63)
        if not mem[pb + zw] & zl:
            continue
        pairs += G.close_pairs[k]
        if pairs > MAX_IDEM_PAIRS:
            return info
        for jj in range(G.WN):
            xs = G.close_x[k, jj]
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
def _row0_certifies(mem, pm, a, v, needed, cur, seeds, T, G):
    """True when every needed child of trie node ``v`` (terminal ``a``, parent chart C with ANC at ``pm`` at its end)
    has no needed child itself and has a terminal surely in EXPECT(C + a): in the lower bound given by the items
    ``a`` closes on its own, ``first_term(X)`` for ``Z`` in ANC, ``Z -> A X``, ``A -> a`` (row 0 of the tier C + a would compute; the
    full step adds only more). Then the step for ``v`` decides nothing. ``cur`` (WT words) is scratch (``seeds`` is
    not used); the threads share the words and end past a ``_sync`` with the same answer."""
    one = np.uint64(1)
    tid, nth = _tid(), _nth()
    for ci in range(T.child_start[v], T.child_start[v + 1]):
        k = T.child_ids[ci]
        if needed[k]:
            if T.node_term[k] < 0:      # a merged boundary: viable by its edges, not by one terminal
                return False
            for cj in range(T.child_start[k], T.child_start[k + 1]):
                if needed[T.child_ids[cj]]:
                    return False
    WN, WT = G.WN, G.WT
    for tw in range(tid, WT, nth):      # each thread owns its words of the bound
        cur[tw] = 0
    # the items' Z grouped by the first terminals of their X (cg_*): a group with a Z in ANC adds its terminals
    # (Z in ANC puts A -> a in ANC too: FIRST)
    for g in range(G.cg_start[a], G.cg_start[a + 1]):
        hit = False
        for j in range(WN):
            if G.cg_z[g, j] & mem[pm + j]:
                hit = True
                break
        if hit:
            for tw in range(tid, WT, nth):
                cur[tw] |= G.cg_t[g, tw]
    _sync()
    ok = True
    for ci in range(T.child_start[v], T.child_start[v + 1]):
        k = T.child_ids[ci]
        if needed[k]:
            c = np.int64(T.node_term[k])
            if not (cur[c >> 6] >> np.uint64(c & 63)) & one:
                ok = False
                break
    _sync()
    return ok


@_cpu
def edges_viable(mem, p_offs, m, v, T, WN):
    """Is merged boundary ``v`` viable, its parent's chart ending at position ``m`` (ANC offsets ``p_offs``): is some
    edge's terminal in EXPECT of the position the edge starts at (``row`` positions before ``m``)?"""
    one = np.uint64(1)
    for i in range(T.merge_start[v], T.merge_start[v + 1]):
        a = np.int64(T.merge_term[i])
        if (mem[p_offs[m - T.merge_row[i]] + WN + (a >> 6)] >> np.uint64(a & 63)) & one:
            return True
    return False


#: where a depth-first walk (:func:`dfs`) starts: trie node ``u`` whose chart has ``n`` tiers, EXPECT at ``e_off`` and
#: last terminal ``u_term``; of ``u``'s own children only the child indices ``first, first + step, ...``
DfsStart = namedtuple("DfsStart", ["n", "u", "e_off", "u_term", "first", "step"])
#: the walk's state: the chart's tier and ANC offsets by tier index (written as it goes down), and per level of
#: its stack the node, its next child index, its chart's EXPECT offset and tier count
DfsState = namedtuple("DfsState", ["tier_offs", "p_offs", "stack_node", "stack_ci", "e_offs", "lv_n"])
#: where its charts go (tier slot ``scratch_off + depth * stride``; the kept root-child charts ``keep_off``,
#: ``keep_map``) and the step's scratch (``cur``, ``seeds``)
DfsScratch = namedtuple("DfsScratch", ["scratch_off", "stride", "keep_off", "keep_map", "cur", "seeds"])
#: what it reports: the viable nodes (``_emit(viable, cnt, v)``) and the work counters
DfsOut = namedtuple("DfsOut", ["viable", "stats"])


@_cpu
def dfs(mem, start, state, scr, needed, out, cnt, T, G):
    """Walk the terminal trie depth-first below node ``u`` (``start``: :data:`DfsStart`), whose chart has ``n``
    tiers (offsets in ``tier_offs``, ANC in ``p_offs`` of ``state``: :data:`DfsState`), EXPECT at ``e_off`` (its
    INFO word follows) and last terminal ``u_term``; of ``u``'s own children only ``first, first + step, ...``
    (child indices) are taken. A child is viable iff its terminal is in its parent's EXPECT; only nodes flagged in
    ``needed`` are visited. Each viable node goes to ``_emit(viable, cnt, v)`` (``out``: :data:`DfsOut`); a viable
    node with children gets its chart: its parent's own chart when the parent's is idem for its terminal (no
    step), else one more tier in the per-depth slot ``scratch_off + depth * stride`` (``scr``: :data:`DfsScratch`),
    its offsets written into ``tier_offs[m]`` / ``p_offs[m + 1]`` (``m`` its tier index; shared by the threads:
    thread 0 writes). Work is counted in ``stats`` (thread 0). Returns ``cnt`` plus the number of viable nodes.

    ``keep_off >= 0`` (CPU): the charts of ``u``'s own children are kept, one after another from ``keep_off``
    instead of in slot 0, and ``keep_map[k]`` gets the tier offset of child index ``first + k`` of ``u`` (its
    last entry counts the charts kept), so the caller can adopt them as chart nodes (the next mask's base charts
    are often among them)."""
    n, u, e_off, u_term, first, step = start
    tier_offs, p_offs, stack_node, stack_ci, e_offs, lv_n = state
    scratch_off, stride, keep_off, keep_map, cur, seeds = scr
    viable, stats = out
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
        m = lv_n[d]        # index of the new tier (terminal a, or the merged boundary's edges)
        if a >= 0:
            ok = ((mem[ex + (a >> 6)] >> np.uint64(a & 63)) & one) != 0
        else:
            ok = edges_viable(mem, p_offs, m, v, T, WN)
        if ok:
            _emit(viable, cnt, v)
            cnt += 1
            if tid == 0:
                stats[ST_VIABLE] += 1
            if T.child_start[v + 1] > T.child_start[v]:
                x_info = np.int64(mem[ex + WT])
                if a >= 0 and T.no_alias[v] == 0 and (x_info >> IDEM_SHIFT) == a + 1:
                    # C_x + a is equivalent to C_x: v's subtree is searched from x's chart
                    if tid == 0:
                        stats[ST_ALIASED] += 1
                    d += 1
                    stack_node[d] = v
                    stack_ci[d] = T.child_start[v]
                    e_offs[d] = ex
                    lv_n[d] = m
                    continue
                if a >= 0 and _row0_certifies(mem, ex - WN, a, v, needed, cur, seeds, T, G):
                    # every needed child is a leaf proven viable without C_x + a: emit them, no step
                    for cj in range(T.child_start[v], T.child_start[v + 1]):
                        k = T.child_ids[cj]
                        if needed[k]:
                            _emit(viable, cnt, k)
                            cnt += 1
                            if tid == 0:
                                stats[ST_CHECKED] += 1
                                stats[ST_VIABLE] += 1
                                stats[ST_CERTIFIED] += 1
                    continue
                t_off = scratch_off + d * stride
                p_off = t_off + n_left * ((m + 1 + 63) // 64) + (n_left + 63) // 64
                if d == 0 and keep_off >= 0:
                    K = keep_map.size - 1
                    nw = p_off - t_off + WN + WT + 1
                    t_off = keep_off + keep_map[K] * nw
                    p_off = t_off + nw - (WN + WT + 1)
                    if tid == 0:
                        keep_map[ci - T.child_start[x]] = t_off
                        keep_map[K] += 1
                if a >= 0:
                    info = chart_step(mem, tier_offs, p_offs, m, a, t_off, p_off, p_off + WN, cur, seeds, G)
                else:
                    lo, hi = T.merge_start[v], T.merge_start[v + 1]
                    info = chart_step_edges(mem, tier_offs, p_offs, m, -1, T.merge_row[lo:hi], T.merge_term[lo:hi],
                                            hi - lo, t_off, p_off, p_off + WN, cur, seeds, G)
                if tid == 0:
                    tier_offs[m] = t_off
                    p_offs[m + 1] = p_off
                    stats[ST_STEPS] += 1
                _sync()
                if a >= 0:
                    x_term = u_term if d == 0 else np.int64(T.node_term[x])
                    info2 = certify(mem, p_offs, m, a, x_info, info, x_term, G)
                else:              # no single last terminal: nothing is certified from a merged boundary
                    info2 = info | INFO_OLD
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
SHARED = (_or_track, _close_row, _count_full, step_epilogue, _step_core, chart_step, chart_step_edges, _has_self_item,
          _in_first_of_rights, certify, _row0_certifies, edges_viable, dfs)


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
#    of numba dispatch and a namedtuple argument about 4 us, so the tables travel as three flat arrays and are
#    viewed as the record again inside; the layout comes from GRAMMAR_FIELDS, by name) ----------------------------
_SCALARS = tuple(f for f, k, _ in GRAMMAR_FIELDS if k == "int")
_ARRAYS = tuple((f, k) for f, k, _ in GRAMMAR_FIELDS if k != "int")
_GM_HEAD = len(_SCALARS)
GM_LEN = _GM_HEAD + 3 * len(_ARRAYS)   # pack_grammar's header length


def pack_grammar(G) -> tuple:
    """``(gu, gi, gm)``: the uint64 tables of the record ``G`` end to end, the int32 ones, and an int64 header (the
    scalars, then offset, rows and columns of each table, in :data:`GRAMMAR_FIELDS` order). :func:`unpack_grammar`
    views them as ``G`` again."""
    meta = [int(getattr(G, f)) for f in _SCALARS]
    parts = {"u64": [], "i32": []}
    off = {"u64": 0, "i32": 0}
    for name, kind in _ARRAYS:
        flat = kind[:3]
        a = np.ascontiguousarray(getattr(G, name), dtype=np.uint64 if flat == "u64" else np.int32)
        if a.ndim != int(kind[4]):
            raise ValueError(f"Grammar.{name}: expected {kind[4]} dimensions ({kind}), got shape {a.shape}")
        r, c = a.shape if a.ndim == 2 else (a.size, 1)
        meta += [off[flat], r, c]
        parts[flat].append(a.ravel())
        off[flat] += a.size
    gu = np.concatenate(parts["u64"]) if parts["u64"] else np.zeros(0, np.uint64)
    gi = np.concatenate(parts["i32"]) if parts["i32"] else np.zeros(0, np.int32)
    return gu, gi, np.array(meta, dtype=np.int64)


@_cpu_inline
def _tab2(flat, gm, k):
    o, r, c = gm[_GM_HEAD + 3 * k], gm[_GM_HEAD + 3 * k + 1], gm[_GM_HEAD + 3 * k + 2]
    return borrowed(flat)[o:o + r * c].reshape((r, c))   # not reference counted (targets.borrowed)


@_cpu_inline
def _tab1(flat, gm, k):
    o, r = gm[_GM_HEAD + 3 * k], gm[_GM_HEAD + 3 * k + 1]
    return borrowed(flat)[o:o + r]


def _unpack_source() -> str:
    """Source of :func:`unpack_grammar`, one argument of ``Grammar(...)`` per field of :data:`GRAMMAR_FIELDS`."""
    args = []
    for name, kind, _ in GRAMMAR_FIELDS:
        if kind == "int":
            args.append(f"gm[{_SCALARS.index(name)}]")
        else:
            k = [f for f, _ in _ARRAYS].index(name)
            args.append(f"_tab{kind[4]}({'gu' if kind.startswith('u64') else 'gi'}, gm, {k})")
    return "def unpack_grammar(gu, gi, gm):\n    return Grammar(" + ", ".join(args) + ")\n"


_ns = {"Grammar": Grammar, "_tab1": _tab1, "_tab2": _tab2}
exec(_unpack_source(), _ns)
#: ``unpack_grammar(gu, gi, gm)``: the :data:`Grammar` record viewed from :func:`pack_grammar`'s arrays (no copy);
#: generated from GRAMMAR_FIELDS (numba's disk cache needs a source file: this one is inlined into its callers)
unpack_grammar = numba.njit(nogil=True, inline="always")(_ns["unpack_grammar"])


# -- CPU entry point of one chart step (the tree search's are in search.py) -----------------------------------
@_cpu_inline
def _fill_path(nodes, node, tiers, ps):
    """Tier offsets (0 .. n-1) and ANC offsets (0 .. n) of chart node ``node`` from the store's node rows
    (parent, depth, tier offset, ANC offset); returns n."""
    n = nodes[node, 1]
    c = node
    while c > 0:
        d = nodes[c, 1]
        tiers[d - 1] = nodes[c, 2]
        ps[d] = nodes[c, 3]
        c = nodes[c, 0]
    ps[0] = nodes[0, 3]
    return n


@_cpu_inline
def _extend_g(mem, nodes, node, t, out_tier, out_p, out_e, cur, seeds, pathbuf, prev_term, G):
    """:func:`extend` with the grammar record (what the jitted chart store calls)."""
    n = nodes[node, 1]
    tier_offs = pathbuf[:n + 1]
    p_offs = pathbuf[n + 1:2 * n + 3]
    _fill_path(nodes, node, tier_offs, p_offs)
    info = chart_step(mem, tier_offs, p_offs, n, t, out_tier, out_p, out_e, cur, seeds, G)
    prev_info = np.int64(mem[p_offs[n] + G.WN + G.WT])
    p_offs[n + 1] = out_p
    info2 = certify(mem, p_offs, n, t, prev_info, info, prev_term, G)
    if info2 != info:
        mem[out_e + G.WT] = np.uint64(info2)
    return info2


@_cpu
def extend(mem, nodes, node, t, out_tier, out_p, out_e, cur, seeds, pathbuf, prev_term, gu, gi, gm):
    """:func:`chart_step` on the CPU (one thread) from chart node ``node`` (rows of ``nodes``; ``pathbuf`` int64
    scratch of 2 (n + 2)), then :func:`certify` against that parent chart (last terminal ``prev_term``). Returns
    the INFO word."""
    mem, nodes, pathbuf, cur, seeds = borrowed(mem), borrowed(nodes), borrowed(pathbuf), borrowed(cur), borrowed(seeds)
    return _extend_g(mem, nodes, node, t, out_tier, out_p, out_e, cur, seeds, pathbuf, prev_term,
                     unpack_grammar(gu, gi, gm))


@_cpu_inline
def _extend_edges_g(mem, nodes, node, t, e_rows, e_terms, out_tier, out_p, out_e, cur, seeds, pathbuf, G):
    """:func:`extend_edges` with the grammar record."""
    n = nodes[node, 1]
    tier_offs = pathbuf[:n + 1]
    p_offs = pathbuf[n + 1:2 * n + 3]
    _fill_path(nodes, node, tier_offs, p_offs)
    info = chart_step_edges(mem, tier_offs, p_offs, n, t, e_rows, e_terms, e_rows.size, out_tier, out_p, out_e, cur,
                            seeds, G) | INFO_OLD
    mem[out_e + G.WT] = np.uint64(info)
    return info


@_cpu
def extend_edges(mem, nodes, node, t, e_rows, e_terms, out_tier, out_p, out_e, cur, seeds, pathbuf, gu, gi, gm):
    """A merged boundary after chart node ``node`` (CPU, one thread): terminal ``t`` (or none if < 0) from
    ``node`` itself and terminal ``e_terms[k]`` over row ``e_rows[k]`` (from an older node of the chain). No idem
    mark (the new node has no single last terminal); INFO_OLD is set, so nothing is certified from it."""
    mem, nodes, pathbuf, cur, seeds = borrowed(mem), borrowed(nodes), borrowed(pathbuf), borrowed(cur), borrowed(seeds)
    e_rows, e_terms = borrowed(e_rows), borrowed(e_terms)
    return _extend_edges_g(mem, nodes, node, t, e_rows, e_terms, out_tier, out_p, out_e, cur, seeds, pathbuf,
                           unpack_grammar(gu, gi, gm))


# -- CPU entry points of a mask: needed nodes, tree search, token assembly, in one call per base chart ----------
# (numba keys its on-disk cache by a function's own file; this package's __init__ keys it by every source of the
# package and targets.py instead (targets.stamp_cache_with), so these could move to a file of their own)
Tables = namedtuple("Tables", [
    "child_start", "child_ids", "node_term", "node_parent",      # the trie (int32)
    "bnd_tok0", "bnd_tok1", "call_tok", "cont_nodes", "cont_tok",  # token lists (int32)
    "d_b0", "d_b1", "d_call", "d_cont",                           # row of each list in ``dense``, or -1 (int32)
    "need_b0", "need_b1",                                         # first-phase nodes of the boundary lists (int32 0/1)
    "merge_row", "merge_term", "no_alias", "no_alias0",           # merged boundaries (int32; see Trie; no_alias0 zeros)
    "chain", "ct_tok", "ct_node", "ct_kind", "x_chain",           # the second phase (int32; search.chain_tables)
    "x_class",                                                    # lexer state -> residual class (align.py)
    "node_depth",
    "lx_trans", "lx_accept", "lx_term", "lx_start",               # the lexer (int32; lexer.py; trans flat [G * 256])
    "root_child",                                                 # terminal -> index among the root's children, or K
    "host",                                                       # int32 scalars: HOST_FIELDS
    "bnd_start", "call_start", "cont_xstart", "cont_nstart",      # CSR starts (int64; bnd_start is [2, N+1])
    "merge_start", "ct_start", "ct_gstart",
])
#: the scalars a mask's and a commit's bookkeeping read (``Tables.host``, in this order)
HOST_FIELDS = ("n_grammar", "n_lex", "start_nullable", "chain_b0", "chain_b1", "chain_any", "k_root", "depth")
HX_NG, HX_NLEX, HX_NULLABLE, HX_CB0, HX_CB1, HX_CANY, HX_K, HX_D = range(len(HOST_FIELDS))
_I_FIELDS = Tables._fields[:Tables._fields.index("bnd_start")]    # int32 (search.pack_statics: ``si``)
_L_FIELDS = Tables._fields[len(_I_FIELDS):]                           # int64 (``sl``)


@_cpu_inline
def _set_list(out, toks, lo, hi, dense_id, dense):
    """OR tokens toks[lo:hi] into ``out``; long lists have a packed copy (``dense_id >= 0``) OR-ed word-wise."""
    if dense_id >= 0:
        row = dense[dense_id]
        for w in range(out.size):
            out[w] |= row[w]
        return
    one = np.uint32(1)
    for j in range(lo, hi):
        tok = toks[j]
        out[tok >> 5] |= one << np.uint32(tok & 31)


@_cpu
def fill_tokens(out, viable, cnt, flags, use_b0, use_b1, xs, A, dense):
    """OR into the packed mask ``out`` (uint32) the tokens of the viable nodes for one base chart and its lexer
    states' residual classes ``xs``. ``flags`` is a zeroed uint8 [n_nodes] scratch, left zeroed. ``A`` is the
    :data:`Tables` record."""
    for k in range(cnt):
        flags[viable[k]] = 1
    for k in range(cnt):
        v = viable[k]
        if use_b0:
            _set_list(out, A.bnd_tok0, A.bnd_start[0, v], A.bnd_start[0, v + 1], A.d_b0[v], dense)
        if use_b1:
            _set_list(out, A.bnd_tok1, A.bnd_start[1, v], A.bnd_start[1, v + 1], A.d_b1[v], dense)
    for i in range(xs.size):
        x = xs[i]
        _set_list(out, A.call_tok, A.call_start[x], A.call_start[x + 1], A.d_call[x], dense)
        for gi in range(A.cont_xstart[x], A.cont_xstart[x + 1]):
            if flags[A.cont_nodes[gi]]:
                _set_list(out, A.cont_tok, A.cont_nstart[gi], A.cont_nstart[gi + 1], A.d_cont[gi], dense)
    for k in range(cnt):
        flags[viable[k]] = 0


#: ``tot`` slots of the assembled-token cache (:func:`fill_cached`): hits, then fills (a miss filling its slot)
AC_HITS, AC_FILLS = N_STATS + 3, N_STATS + 4


@_cpu_inline
def fill_cached(out, viable, cnt, flags, use_b0, use_b1, xs, A, dense, ac_rows, ac_keys, tot):
    """:func:`fill_tokens` through a direct-mapped cache of assembled token sets: the tokens a base adds to a mask
    depend only on (viable nodes, ``use_b0``, ``use_b1``, ``xs``), and those keys repeat across prefixes (Spider:
    81 distinct in 940 fills, TreeBank: 610 in 3,364). Slot ``s`` holds the packed tokens of one key in
    ``ac_rows[s]`` and the key in ``ac_keys[s]``: [hash (31 bits), key length, flags, len(xs), xs ..., viable ...],
    compared whole, so a hash collision only costs a miss. A miss fills its slot and ORs it into ``out``; a key
    longer than a slot (or no slots) fills ``out`` directly."""
    S = ac_rows.shape[0]
    n = 3 + xs.size + cnt
    if S == 0 or n + 1 > ac_keys.shape[1]:
        fill_tokens(out, viable, cnt, flags, use_b0, use_b1, xs, A, dense)
        return
    fl = np.int64(use_b0) + 2 * np.int64(use_b1)
    h = np.uint64(14695981039346656037) ^ np.uint64(fl)
    prime = np.uint64(1099511628211)
    h = (h ^ np.uint64(xs.size)) * prime
    for i in range(xs.size):
        h = (h ^ np.uint64(xs[i])) * prime
    for i in range(cnt):
        h = (h ^ np.uint64(viable[i])) * prime
    h ^= h >> np.uint64(29)
    hk = np.int64(h & np.uint64(0x7FFFFFFF))
    slot = np.int64(h % np.uint64(S))
    key = ac_keys[slot]
    row = ac_rows[slot]
    hit = key[0] == hk and key[1] == n and key[2] == fl and key[3] == xs.size
    if hit:
        for i in range(xs.size):
            if key[4 + i] != xs[i]:
                hit = False
                break
    if hit:
        o = 4 + xs.size
        for i in range(cnt):
            if key[o + i] != viable[i]:
                hit = False
                break
    if hit:
        tot[AC_HITS] += 1
    else:
        key[1] = 0                      # the slot holds no key while its row is rewritten
        row[:] = 0
        fill_tokens(row, viable, cnt, flags, use_b0, use_b1, xs, A, dense)
        key[0], key[2], key[3] = hk, fl, xs.size
        for i in range(xs.size):
            key[4 + i] = xs[i]
        o = 4 + xs.size
        for i in range(cnt):
            key[o + i] = viable[i]
        key[1] = n
        tot[AC_FILLS] += 1
    for w in range(out.size):
        out[w] |= row[w]


@_cpu
def needed_nodes(out, need_b0, need_b1, use_b0, use_b1, xs, cont_xstart, cont_nodes, node_parent, chain):
    """Nodes the first phase of a search from one base has to visit: those of the boundary lists in use, those of
    the continuation groups of its lexer states' classes ``xs`` outside the chains (``chain``), and all their
    ancestors."""
    for v in range(out.size):
        out[v] = (use_b0 and need_b0[v]) or (use_b1 and need_b1[v])
    out[0] = 1
    for i in range(xs.size):
        x = xs[i]
        for gi in range(cont_xstart[x], cont_xstart[x + 1]):
            v = cont_nodes[gi]
            if chain[v]:
                continue
            while not out[v]:
                out[v] = 1
                v = node_parent[v]


@_cpu
def needed_chain(got, out, use_b0, use_b1, xs, xflag, lo, hi, mem, e_off, A):
    """Nodes a round of the second phase has to visit (into ``out``, zeroed): those of the chain tuples
    (``search.chain_tables``) at depth ``lo < d <= hi`` of the tokens not in the mask ``got`` (uint32 words) for
    the lists in use, below the root children viable from the base (EXPECT at ``e_off``), and their ancestors.
    ``xflag`` is a zeroed uint8 scratch over lexer states (or their classes), left zeroed. Returns (nodes marked,
    whether such a token has a tuple deeper than ``hi``)."""
    for i in range(xs.size):
        xflag[xs[i]] = 1
    cnt = 0
    deeper = False
    one = np.uint32(1)
    one64 = np.uint64(1)
    c0 = A.child_start[0]
    for g in range(A.ct_gstart.size - 1):
        if A.ct_gstart[g + 1] == A.ct_gstart[g]:
            continue
        r = A.child_ids[c0 + g]
        a = A.node_term[r]
        if a >= 0:
            ok = ((mem[e_off + (a >> 6)] >> np.uint64(a & 63)) & one64) != 0
        else:                 # a merged root child: its edges begin at the base (row 0)
            ok = False
            for q in range(A.merge_start[r], A.merge_start[r + 1]):
                t = A.merge_term[q]
                if (mem[e_off + (t >> 6)] >> np.uint64(t & 63)) & one64:
                    ok = True
                    break
        if not ok:
            continue
        for i in range(A.ct_gstart[g], A.ct_gstart[g + 1]):
            tok = A.ct_tok[i]
            if (got[tok >> 5] >> np.uint32(tok & 31)) & one:
                continue
            for j in range(A.ct_start[i], A.ct_start[i + 1]):
                k = A.ct_kind[j]
                if (k == 0 and use_b0) or (k == 1 and use_b1) or (k >= 2 and xflag[k - 2]):
                    v = A.ct_node[j]
                    d = A.node_depth[v]
                    if d > hi:
                        deeper = True
                        continue
                    if d <= lo:
                        continue
                    while v > 0 and not out[v]:
                        out[v] = 1
                        cnt += 1
                        v = A.node_parent[v]
    for i in range(xs.size):
        xflag[xs[i]] = 0
    if cnt:
        out[0] = 1
    return cnt, deeper


#: the depth of the chain tuples a second phase's first round looks at (then 2x, 4x ... : kernels_common.mask_base)
FIRST_ROUND = 4


_GM_LEN = GM_LEN


@_cpu_inline
def _v(flat, sl, k):
    o = sl[_GM_LEN + 2 * k]
    return borrowed(flat)[o:o + sl[_GM_LEN + 2 * k + 1]]


@_cpu_inline
def _v2(flat, sl, k):
    a = _v(flat, sl, k)
    return a.reshape((2, a.size // 2))


def _tables_source() -> str:
    """Source of :func:`unpack_tables`: one view per :data:`Tables` field, by name (``bnd_start`` is [2, N+1])."""
    args = []
    for k, f in enumerate(Tables._fields):
        flat = "si" if f in _I_FIELDS else "sl"
        args.append(f"{'_v2' if f == 'bnd_start' else '_v'}({flat}, sl, {k})")
    return "def unpack_tables(si, sl):\n    return Tables(" + ", ".join(args) + ")\n"


_ns = {"Tables": Tables, "_v": _v, "_v2": _v2}
exec(_tables_source(), _ns)
#: ``unpack_tables(si, sl)``: the :data:`Tables` record viewed from ``search.pack_statics``'s arrays (no copy);
#: generated from the field names like :func:`unpack_grammar`
unpack_tables = numba.njit(nogil=True, inline="always")(_ns["unpack_tables"])


@_cpu_inline
def _trie(A, phase):
    """The :data:`Trie` record of a :data:`Tables` record for a search's ``phase``: the first visits no merged node,
    so it may take the idem shortcut anywhere (``no_alias0``)."""
    return Trie(A.child_start, A.child_ids, A.node_term, A.merge_start, A.merge_row, A.merge_term,
                A.no_alias0 if phase == 1 else A.no_alias)


def work_words(depth: int, n_max: int, k_root: int) -> int:
    """int64 workspace of one search from a base of at most ``n_max`` tiers: four stacks of ``depth + 2``
    levels, the work counters, the tier and ANC offsets of the path (``n_max + depth + 2`` and one more), and the
    map of kept root-child charts (``k_root + 1``: see ``kernels_common.dfs``)."""
    return 4 * (depth + 2) + N_STATS + 2 * (n_max + depth + 2) + 1 + k_root + 1


@_cpu_inline
def _search_one(mem, nodes, base, e_off, term, first, step, needed, viable, cnt, work, L, scr, scratch_off, stride, WN,
                keep_off, K, T, G):
    """One DFS from chart node ``base`` with the stacks, counters, path tables and the kept-chart map (last
    ``K + 1`` words) carved out of ``work`` and the step scratch out of ``scr`` (seeds first)."""
    st = 4 * L
    keep_map = work[work.size - K - 1:]
    keep_map[:K] = -1
    keep_map[K] = 0
    n = nodes[base, 1]
    tiers = work[st + N_STATS:]
    ps = tiers[L + n:]
    _fill_path(nodes, base, tiers, ps)
    return dfs(mem, DfsStart(n, 0, e_off, term, first, step),
               DfsState(tiers, ps, work[:L], work[L:2 * L], work[2 * L:3 * L], work[3 * L:4 * L]),
               DfsScratch(scratch_off, stride, keep_off, keep_map, scr[WN:], scr[:WN]), needed,
               DfsOut(viable, work[st:st + N_STATS]), cnt, T, G)


@_cpu_inline
def _mask_ends(out, clear, eos, acc):
    """``clear``: zero ``out`` (the first base of a mask); ``eos >= 0``: set the EOS bit to ``acc`` (the last)."""
    if clear:
        out[:] = 0
    if eos >= 0:
        b = np.uint32(1) << np.uint32(eos & 31)
        if acc:
            out[eos >> 5] |= b
        else:
            out[eos >> 5] &= ~b


@_cpu_inline
def _search_fill(out, mem, nodes, base, e_off, term, b0, b1, xs, needed, viable, work, L, flags, scr, scratch_off,
                 stride, keep_off, tot, T, A, G, dense, ac_rows, ac_keys):
    """One search among ``needed`` (viable nodes into ``viable``, root first) and their tokens OR-ed into ``out``
    (through the cache ``ac_rows``, ``ac_keys``: :func:`fill_cached`); the work counters added to ``tot``. Returns
    the number of viable nodes."""
    work[4 * L:4 * L + N_STATS] = 0
    viable[0] = 0
    nv = _search_one(mem, nodes, base, e_off, term, A.child_start[0], 1, needed, viable, 1, work, L, scr, scratch_off,
                     stride, G.WN, keep_off, A.child_start[1] - A.child_start[0], T, G)
    for i in range(N_STATS):
        tot[i] += work[4 * L + i]
    tot[N_STATS] += 1
    fill_cached(out, viable, nv, flags[A.node_parent.size:], b0, b1, xs, A, dense, ac_rows, ac_keys, tot)
    return nv


@_cpu
def _second_phase(out, mem, nodes, base, e_off, term, b0, b1, xs, viable, work, L, flags, scr, scratch_off, stride,
                  tot, xflag, A, G, dense):
    """The chains of a base for the tokens ``out`` does not allow yet, in rounds over the chain tuples by depth
    (:data:`FIRST_ROUND`, then twice as deep ...), each for the tokens still not allowed: a token is mostly decided
    by a shallow tuple (one piece after a short first one), and a deep chain is searched only for the tokens that
    need it."""
    needed = flags[:A.node_parent.size]
    lo, hi = 0, FIRST_ROUND
    while True:
        needed[:] = 0
        cnt, deeper = needed_chain(out, needed, b0, b1, xs, xflag, lo, hi, mem, e_off, A)
        if cnt:
            _search_fill(out, mem, nodes, base, e_off, term, b0, b1, xs, needed, viable, work, L, flags, scr,
                         scratch_off, stride, -1, tot, _trie(A, 2), A, G, dense, np.zeros((0, 1), np.uint32),
                         np.zeros((0, 1), np.int32))   # not cached: a few chain nodes a token
            tot[N_STATS + 2] += 1
        if not deeper:
            return
        lo, hi = hi, 2 * hi


@_cpu
def mask_base(out, mem, nodes, base, e_off, term, b0, b1, xs, search, viable, nv, work, L, flags, scr, scratch_off,
              stride, keep_off, clear, eos, acc, tot, phase, xflag, ac_rows, ac_keys, su, si, sl, dense):
    """One base chart's part of a mask, ``phase`` 1 or 2 (below): if ``search``, the needed nodes and the tree
    search (viable nodes into ``viable``, root first; else ``viable[:nv]`` holds a memoised first phase), then their
    tokens OR-ed into ``out``. ``nodes`` are the chart store's node rows, ``L`` the levels of a DFS stack (trie depth
    + 2), ``flags`` uint8 scratch of 2 x nodes (the second half zeroed), ``work`` int64 of :func:`work_words`,
    ``scr`` uint64 of ``WN + scratch_words(n + depth)``; the charts of the root's children are kept from ``keep_off``
    (if >= 0; map at the end of ``work``); the search's work counters are added to ``tot``; ``clear`` / ``eos``,
    ``acc``: see :func:`_mask_ends`. Returns the number of viable nodes of a first phase.

    Phase 1 searches every node outside the chains (search.chain_tables), for every base of a mask first; phase 2,
    once ``out`` holds all of them, searches the chain nodes of the tokens ``out`` does not allow yet
    (:func:`_second_phase`; ``xflag``: a zeroed uint8 scratch over lexer states). A first phase depends on its base
    only (memoised by the engine), a second phase on the whole mask. A first phase's tokens (searched or memoised)
    go through the assembled-token cache ``ac_rows``, ``ac_keys`` (:func:`fill_cached`; zero rows: none)."""
    out, mem, nodes, xs, viable, work = borrowed(out), borrowed(mem), borrowed(nodes), borrowed(xs), borrowed(viable), \
        borrowed(work)   # the caller's arrays, used without reference counts (targets.borrowed)
    flags, scr, tot, xflag, dense = borrowed(flags), borrowed(scr), borrowed(tot), borrowed(xflag), borrowed(dense)
    ac_rows, ac_keys = borrowed(ac_rows), borrowed(ac_keys)
    A = unpack_tables(si, sl)
    N = A.node_parent.size
    if clear:
        out[:] = 0
    if search:
        G = unpack_grammar(su, si, sl)
        if phase == 2:
            _second_phase(out, mem, nodes, base, e_off, term, b0, b1, xs, viable, work, L, flags, scr, scratch_off,
                          stride, tot, xflag, A, G, dense)
            nv = 0
        else:
            needed = flags[:N]
            needed_nodes(needed, A.need_b0, A.need_b1, b0, b1, xs, A.cont_xstart, A.cont_nodes, A.node_parent,
                         A.chain)
            nv = _search_fill(out, mem, nodes, base, e_off, term, b0, b1, xs, needed, viable, work, L, flags, scr,
                              scratch_off, stride, keep_off, tot, _trie(A, 1), A, G, dense, ac_rows, ac_keys)
    else:
        fill_cached(out, viable, nv, flags[N:], b0, b1, xs, A, dense, ac_rows, ac_keys, tot)
    _mask_ends(out, False, eos, acc)
    return nv


@_cpu
def search_nodes(mem, nodes, base, e_off, term, needed, viable, work, L, scr, scratch_off, stride, su, si, sl):
    """The viable trie nodes of a search from a base among ``needed`` (into ``viable``, root first); returns how
    many. For tests and the CUDA comparison (masks use :func:`mask_base`)."""
    A = unpack_tables(si, sl)
    G = unpack_grammar(su, si, sl)
    work[4 * L:4 * L + N_STATS] = 0
    viable[0] = 0
    return _search_one(mem, nodes, base, e_off, term, A.child_start[0], 1, needed, viable, 1, work, L, scr, scratch_off,
                       stride, G.WN, -1, A.child_start[1] - A.child_start[0], _trie(A, 2), G)


@_cpu
def chain_needed(got, needed, b0, b1, xs, xflag, lo, hi, mem, e_off, si, sl):
    """:func:`needed_chain` from the packed tables (``needed`` zeroed here): the CUDA backend's second phase."""
    needed[:] = 0
    return needed_chain(got, needed, b0, b1, xs, xflag, lo, hi, mem, e_off, unpack_tables(si, sl))


@_cpu
def mask_virtual(out, mem, nodes, c, t, xs, viable, flags, scr, clear, eos, acc, tot, ac_rows, ac_keys, su, si, sl,
                 dense):
    """A base chart ``c + t`` that only lexer states ``xs`` still inside ``t`` need (no boundary lists): if every
    trie node the first phase needs is a root child without needed children whose terminal the items ``t`` closes
    on its own surely predict (``_row0_certifies`` from ``c``'s ANC), the viable nodes are known without the
    chart: OR their tokens into ``out`` (``clear``, ``eos``, ``acc``: see :func:`_mask_ends`) and return how many;
    else return -1 and touch nothing but scratch. (A second phase, if the lexer states have chain continuations
    (``x_chain``), needs the chart.) The tokens go through the cache ``ac_rows``, ``ac_keys`` (:func:`fill_cached`)."""
    out, mem, nodes, xs, viable = borrowed(out), borrowed(mem), borrowed(nodes), borrowed(xs), borrowed(viable)
    flags, scr, tot, dense = borrowed(flags), borrowed(scr), borrowed(tot), borrowed(dense)
    ac_rows, ac_keys = borrowed(ac_rows), borrowed(ac_keys)
    A = unpack_tables(si, sl)
    G = unpack_grammar(su, si, sl)
    N = A.node_parent.size
    needed = flags[:N]
    needed_nodes(needed, A.need_b0, A.need_b1, False, False, xs, A.cont_xstart, A.cont_nodes, A.node_parent, A.chain)
    T = _trie(A, 1)
    if not _row0_certifies(mem, nodes[c, 3], t, 0, needed, scr[G.WN:], scr[:G.WN], T, G):
        return -1
    viable[0] = 0
    nv = 1
    for ci in range(T.child_start[0], T.child_start[1]):
        k = T.child_ids[ci]
        if needed[k]:
            viable[nv] = k
            nv += 1
    tot[ST_CERTIFIED] += nv - 1
    tot[ST_VIABLE] += nv - 1
    tot[N_STATS + 1] += 1
    _mask_ends(out, clear, -1, False)
    fill_cached(out, viable, nv, flags[N:], False, False, xs, A, dense, ac_rows, ac_keys, tot)
    _mask_ends(out, False, eos, acc)
    return nv


@numba.njit(cache=True, nogil=True, parallel=True)
def mask_base_par(out, mem, nodes, base, e_off, term, b0, b1, xs, search, viable, nv, work, L, flags, scr,
                  scratch_off, stride, keep_off, clear, eos, acc, tot, keep_words, vbuf, counts, phase, xflag, ac_rows,
                  ac_keys, su, si, sl, dense):
    """:func:`mask_base` with the search split over ``W = vbuf.shape[0]`` threads (numba ``prange``): worker w
    searches the root's children w, w + W, ... with its own row of ``work``, ``scr`` and ``vbuf``, its own
    scratch region ``scratch_off + w * stride * L`` and kept-chart region ``keep_off + w * keep_words`` (first
    phase). Chart tiers below the base are shared and only read. A first phase's tokens go through the cache
    ``ac_rows``, ``ac_keys`` after the parallel part (:func:`fill_cached`)."""
    A = unpack_tables(si, sl)
    N = A.node_parent.size
    if clear:
        out[:] = 0
    if search and phase == 2:     # the rounds of a second phase (one thread: they are a few chart steps each)
        _second_phase(out, mem, nodes, base, e_off, term, b0, b1, xs, viable, work[0], L, flags, scr[0], scratch_off,
                      stride, tot, xflag, A, unpack_grammar(su, si, sl), dense)
        _mask_ends(out, False, eos, acc)
        return 0
    if search:
        G = unpack_grammar(su, si, sl)
        needed = flags[:N]
        needed_nodes(needed, A.need_b0, A.need_b1, b0, b1, xs, A.cont_xstart, A.cont_nodes, A.node_parent, A.chain)
        T = _trie(A, phase)
        W = vbuf.shape[0]
        K = A.child_start[1] - A.child_start[0]
        for w in numba.prange(W):
            work[w, 4 * L:4 * L + N_STATS] = 0
            counts[w] = _search_one(mem, nodes, base, e_off, term, A.child_start[0] + w, W, needed, vbuf[w], 0, work[w],
                                    L, scr[w], scratch_off + w * stride * L, stride, G.WN,
                                    keep_off + w * keep_words if keep_off >= 0 else -1, K, T, G)
        viable[0] = 0
        nv = 1
        for w in range(W):
            for i in range(counts[w]):
                viable[nv] = vbuf[w, i]
                nv += 1
            for i in range(N_STATS):
                tot[i] += work[w, 4 * L + i]
        tot[N_STATS] += 1
    fill_cached(out, viable, nv, flags[N:], b0, b1, xs, A, dense, ac_rows, ac_keys, tot)
    _mask_ends(out, False, eos, acc)
    return nv


# -- the host's bookkeeping in one call (issue 29): a sequence's chart store, the lexer over its configurations, a
#    mask's bases and the memo of their searches, what the engine did in Python between the jitted calls above -----
#: columns of a chart store's node table (int64): parent, depth, tier offset, ANC offset (the four the chart step
#: reads), last terminal (-1: the root or a merged boundary), first child and next sibling (a node's children are a
#: list: ``(node, t)`` and merged boundaries are found by walking it), kept-chart row (or -1), memo head (or -1), a
#: merged boundary's edges (rows ``[e0, e1)`` of the edge table)
NC_PARENT, NC_DEPTH, NC_TIER, NC_P, NC_TERM, NC_CHILD, NC_NEXT, NC_KEPT, NC_MEMO, NC_E0, NC_E1 = range(11)
N_COLS = 11
#: a chart store's header words (int64): arena words used, nodes, chart steps, charts adopted from a search, edge
#: rows used, kept rows used, memo words used, memo entries, memo hits, configurations, then what a call that ran
#: out of room needs (resource, size: :data:`R_MEM` ...)
H_USED, H_NODES, H_STEPS, H_ADOPTED, H_EDGES, H_KEPT, H_MEMO, H_MEMO_N, H_MEMO_HITS, H_NCFG, H_NEED, H_SIZE = range(12)
H_LEN = 12
#: resources a call can run out of: arena words, node rows, edge rows, kept rows, scratch for charts of ``size``
#: tiers (the search's ``work`` and ``scr``), configuration rows
R_MEM, R_NODES, R_EDGES, R_KEPT, R_DEPTH, R_CFG = 1, 2, 3, 4, 5, 6
MEMO_MAX = 64      # viable-node sets kept per store (then all are dropped)
START = -1         # lexer state of a configuration at a boundary: a grammar terminal must start


@_cpu_inline
def _words(n):
    return (n + 63) >> 6


@_cpu_inline
def _tier_words(G, n):
    """``PackedGrammar.tier_words``."""
    return G.n_left * _words(n + 1) + _words(G.n_left)


@_cpu_inline
def _node_words(G, n):
    """``PackedGrammar.node_words``."""
    return _tier_words(G, n) + G.WN + G.WT + 1


@_cpu_inline
def _scratch_words(G, n):
    """``PackedGrammar.scratch_words``."""
    return G.n_nt * _words(n + 1) + (n + 1) * G.WN + _words(n + 1) + 1 + G.WN + G.n_nt


@_cpu_inline
def _need(hdr, what, size):
    """Record that the call ran out of room (``what``: an ``R_*``, ``size``: how much) and return -1."""
    hdr[H_NEED] = what
    hdr[H_SIZE] = size
    return -1


@_cpu_inline
def _kid(nodes, node, t):
    """The child of ``node`` by terminal ``t``, or -1."""
    c = nodes[node, NC_CHILD]
    while c >= 0:
        if nodes[c, NC_TERM] == t:
            return c
        c = nodes[c, NC_NEXT]
    return -1


@_cpu_inline
def _new_node(nodes, hdr, parent, t, t_off, p_off):
    c = hdr[H_NODES]
    hdr[H_NODES] = c + 1
    nodes[c, NC_PARENT] = parent
    nodes[c, NC_DEPTH] = nodes[parent, NC_DEPTH] + 1
    nodes[c, NC_TIER] = t_off
    nodes[c, NC_P] = p_off
    nodes[c, NC_TERM] = t
    nodes[c, NC_CHILD] = -1
    nodes[c, NC_NEXT] = nodes[parent, NC_CHILD]
    nodes[parent, NC_CHILD] = c
    nodes[c, NC_KEPT] = -1
    nodes[c, NC_MEMO] = -1
    nodes[c, NC_E0] = 0
    nodes[c, NC_E1] = 0
    return c


@_cpu_inline
def _step_room(mem, nodes, hdr, scr, n, G):
    """Whether a chart step from a node of ``n`` tiers has room (else the need is recorded)."""
    if hdr[H_NODES] >= nodes.shape[0]:
        return _need(hdr, R_NODES, hdr[H_NODES] + 1) == 0
    if hdr[H_USED] + _node_words(G, n) > mem.size:
        return _need(hdr, R_MEM, hdr[H_USED] + _node_words(G, n)) == 0
    if scr.size < G.WN + _scratch_words(G, n):
        return _need(hdr, R_DEPTH, n) == 0
    return True


@_cpu
def _child(mem, nodes, hdr, kept, scr, node, t, root_child, G):
    """The chart node of ``node`` plus terminal ``t``: found among its children, adopted from a search's kept chart,
    or one chart step; -1 if out of room (``hdr[H_NEED]``)."""
    c = _kid(nodes, node, t)
    if c >= 0:
        return c
    n = nodes[node, NC_DEPTH]
    if hdr[H_NODES] >= nodes.shape[0]:
        return _need(hdr, R_NODES, hdr[H_NODES] + 1)
    t_off = -1
    r = nodes[node, NC_KEPT]
    if r >= 0:
        k = root_child[t]
        if k < kept.shape[1]:
            t_off = kept[r, k]
    if t_off >= 0:      # the search from ``node`` computed this chart already (kernels_common.dfs)
        p_off = t_off + _tier_words(G, n)
        hdr[H_ADOPTED] += 1
    else:
        if not _step_room(mem, nodes, hdr, scr, n, G):
            return -1
        t_off = hdr[H_USED]
        hdr[H_USED] = t_off + _node_words(G, n)
        p_off = t_off + _tier_words(G, n)
        pathbuf = np.empty(2 * n + 4, np.int64)
        _extend_g(mem, nodes, node, t, t_off, p_off, p_off + G.WN, scr[G.WN:], scr[:G.WN], pathbuf,
                  nodes[node, NC_TERM], G)
        hdr[H_STEPS] += 1
    return _new_node(nodes, hdr, node, t, t_off, p_off)


@_cpu
def _merged(mem, nodes, hdr, kept, medge, scr, node, E, root_child, G):
    """The chart node of one boundary where several pieces end at once, a child of ``node``: ``E`` int64 [k, 2] the
    pieces ``(c, t)`` (sorted, distinct), each ``c`` on the chain of ``node``, ``t`` spanning from ``c``'s boundary
    to the new one (``ChartStore.merged``); -1 if out of room."""
    ne = E.shape[0]
    if ne == 1 and E[0, 0] == node:
        return _child(mem, nodes, hdr, kept, scr, node, E[0, 1], root_child, G)
    c = nodes[node, NC_CHILD]
    while c >= 0:
        if nodes[c, NC_TERM] < 0 and nodes[c, NC_E1] - nodes[c, NC_E0] == ne:
            o = nodes[c, NC_E0]
            k = 0
            while k < ne and medge[o + k, 0] == E[k, 0] and medge[o + k, 1] == E[k, 1]:
                k += 1
            if k == ne:
                return c
        c = nodes[c, NC_NEXT]
    n = nodes[node, NC_DEPTH]
    if hdr[H_EDGES] + ne > medge.shape[0]:
        return _need(hdr, R_EDGES, hdr[H_EDGES] + ne)
    if not _step_room(mem, nodes, hdr, scr, n, G):
        return -1
    t0 = -1
    rows = np.empty(ne, np.int32)     # int32 as the trie's merged edges (one compile of chart_step_edges)
    terms = np.empty(ne, np.int32)
    m = 0
    for k in range(ne):
        if E[k, 0] == node and t0 < 0:
            t0 = E[k, 1]
        else:
            rows[m] = n - nodes[E[k, 0], NC_DEPTH]
            terms[m] = E[k, 1]
            m += 1
    t_off = hdr[H_USED]
    hdr[H_USED] = t_off + _node_words(G, n)
    p_off = t_off + _tier_words(G, n)
    pathbuf = np.empty(2 * n + 4, np.int64)
    _extend_edges_g(mem, nodes, node, t0, rows[:m], terms[:m], t_off, p_off, p_off + G.WN, scr[G.WN:], scr[:G.WN],
                    pathbuf, G)
    hdr[H_STEPS] += 1
    c = _new_node(nodes, hdr, node, -1, t_off, p_off)
    o = hdr[H_EDGES]
    for k in range(ne):
        medge[o + k, 0] = E[k, 0]
        medge[o + k, 1] = E[k, 1]
    nodes[c, NC_E0] = o
    nodes[c, NC_E1] = o + ne
    hdr[H_EDGES] = o + ne
    return c


@_cpu_inline
def _accepts(mem, nodes, node, G):
    return (mem[nodes[node, NC_P] + G.WN + G.WT] & np.uint64(1)) != 0


@_cpu_inline
def _push_cfg(buf, cnt, c, x):
    """Append ``(c, x)`` to the growable buffer ``buf`` (returns it, maybe a larger copy)."""
    if cnt >= buf.shape[0]:
        big = np.empty((2 * buf.shape[0] + 8, 2), np.int64)
        big[:cnt] = buf[:cnt]
        buf = big
    buf[cnt, 0] = c
    buf[cnt, 1] = x
    return buf


@_cpu_inline
def _start_on(buf, cnt, b, u, byte, A):
    """Append ``(b, g)`` if lexer terminal ``u``'s DFA moves on ``byte`` from its start to ``g``."""
    s0 = A.lx_start[u]
    if s0 >= 0:
        g = A.lx_trans[s0 * 256 + byte]
        if g >= 0:
            buf = _push_cfg(buf, cnt, b, g)
            cnt += 1
    return buf, cnt


@_cpu_inline
def _starts(buf, cnt, mem, nodes, b, byte, with_ignored, A, G):
    """Append ``(b, g)`` for every terminal ``u`` expected at chart node ``b`` (and every ignored one if
    ``with_ignored``) whose DFA moves on ``byte`` from its start to ``g``."""
    H = A.host
    e = nodes[b, NC_P] + G.WN
    for w in range(G.WT):
        bits = mem[e + w]
        while bits:
            low = bits & (~bits + np.uint64(1))
            bits ^= low
            u = w * 64 + _ctz(low)
            if u < H[HX_NG]:
                buf, cnt = _start_on(buf, cnt, b, u, byte, A)
    if with_ignored:
        for u in range(H[HX_NG], H[HX_NLEX]):
            buf, cnt = _start_on(buf, cnt, b, u, byte, A)
    return buf, cnt


@_cpu_inline
def _sorted_unique(buf, cnt, key_base):
    """The rows ``buf[:cnt]`` sorted by ``(c, x)`` without repeats, as a new [k, 2] array."""
    keys = np.empty(cnt, np.int64)
    for i in range(cnt):
        keys[i] = buf[i, 0] * key_base + buf[i, 1] + 1
    keys.sort()
    out = np.empty((cnt, 2), np.int64)
    k = 0
    for i in range(cnt):
        if i == 0 or keys[i] != keys[i - 1]:
            out[k, 0] = keys[i] // key_base
            out[k, 1] = keys[i] % key_base - 1
            k += 1
    return out[:k].copy()


@_cpu
def _lex_step(mem, nodes, hdr, kept, medge, scr, cur, byte, A, G):
    """The configurations after one more byte (``ChartStore``'s chart nodes; ``cur`` [m, 2] sorted ``(c, x)``,
    ``x`` a lexer state or :data:`START`). Every piece that ends before ``byte`` ends at one boundary (a merged
    node, a child of the deepest chart node of ``cur``: they all lie on one chain), so the configurations stay one
    per (boundary, lexer state) however many ways the bytes can be cut into terminals. Returns (configurations,
    ok); not ok: out of room (``hdr[H_NEED]``)."""
    H = A.host
    ng = H[HX_NG]
    nxt = np.empty((2 * cur.shape[0] + 8, 2), np.int64)
    cnt = 0
    ends = np.empty((cur.shape[0], 2), np.int64)
    ne = 0
    bases = np.empty(cur.shape[0] + 1, np.int64)
    nb = 0
    deepest = cur[0, 0]
    for i in range(cur.shape[0]):
        c, x = cur[i, 0], cur[i, 1]
        if nodes[c, NC_DEPTH] > nodes[deepest, NC_DEPTH]:
            deepest = c
        if x == START:
            nxt, cnt = _starts(nxt, cnt, mem, nodes, c, byte, False, A, G)
            continue
        g = A.lx_trans[x * 256 + byte]
        if g >= 0:
            nxt = _push_cfg(nxt, cnt, c, g)
            cnt += 1
        if A.lx_accept[x]:
            t = A.lx_term[x]
            if t < ng:
                ends[ne, 0] = c
                ends[ne, 1] = t
                ne += 1
            else:           # an ignored piece ends: new pieces start from where it began
                seen = False
                for j in range(nb):
                    seen = seen or bases[j] == c
                if not seen:
                    bases[nb] = c
                    nb += 1
    if ne:
        E = _sorted_unique(ends, ne, H[HX_NG] + 1)
        b = _merged(mem, nodes, hdr, kept, medge, scr, deepest, E, A.root_child, G)
        if b < 0:
            return cur, False
        seen = False
        for j in range(nb):
            seen = seen or bases[j] == b
        if not seen:
            bases[nb] = b
            nb += 1
    for j in range(nb):
        nxt, cnt = _starts(nxt, cnt, mem, nodes, bases[j], byte, True, A, G)
    return _sorted_unique(nxt, cnt, A.lx_accept.size + 2), True


@_cpu
def walk_bytes(mem, nodes, hdr, kept, medge, scr, cfg, data, su, si, sl):
    """Commit the bytes ``data`` (uint8) from the configurations ``cfg[:hdr[H_NCFG]]``: on success the new ones
    replace them (sorted) and the count is returned (0: no configuration is left, ``cfg`` untouched); -1: out of room
    (``hdr[H_NEED]``: grow it and call again; the chart nodes made so far are kept and found again)."""
    mem, nodes, hdr, kept, medge, scr = borrowed(mem), borrowed(nodes), borrowed(hdr), borrowed(kept), \
        borrowed(medge), borrowed(scr)
    A = unpack_tables(si, sl)
    G = unpack_grammar(su, si, sl)
    cur = cfg[:hdr[H_NCFG]].copy()
    for i in range(data.size):
        if cur.shape[0] == 0:
            return 0
        cur, ok = _lex_step(mem, nodes, hdr, kept, medge, scr, cur, np.int64(data[i]), A, G)
        if not ok:
            return -1
    m = cur.shape[0]
    if m == 0:
        return 0
    if m > cfg.shape[0]:
        return _need(hdr, R_CFG, m)
    cfg[:m] = cur
    hdr[H_NCFG] = m
    return m


#: a mask's bases (:func:`_plan`), one row each: chart node (or -1: ``c + t`` not made yet), c, t, flags (bit 0:
#: boundary without leading ignore, bit 1: with it), start and end of its lexer states' classes in the plan's ``xs``
P_NODE, P_C, P_T, P_FLAGS, P_X0, P_X1 = range(6)


@_cpu_inline
def _group(rows, nr, node, c, t):
    """The row of ``rows[:nr]`` for base ``node`` (or, with ``node < 0``, the unmade ``c + t``); -1 if none."""
    for i in range(nr):
        if rows[i, P_NODE] == node and (node >= 0 or (rows[i, P_C] == c and rows[i, P_T] == t)):
            return i
    return -1


@_cpu
def _plan(mem, nodes, hdr, kept, medge, scr, cur, lazy, A, G):
    """A mask's bases from the configurations ``cur`` in one pass: (rows [nb, 6] (:data:`P_NODE` ...), ``xs`` the
    residual classes (``A.x_class``) of each base's lexer states, distinct, ascending, whether the prefix is a
    sentence, ok). The base of a lexer state ``x`` of a grammar terminal ``t`` is the boundary where its piece would
    end: ``c + t`` for its one configuration ``(c, x)``, or the merged boundary of all of them (a child of the
    deepest node of ``cur``). A configuration at a boundary (:data:`START`) or inside an ignored piece has its own
    node as base. With ``lazy``, a base ``c + t`` that is not made yet and that only non-final lexer states need
    stays unmade (row node -1): a mask may not need its chart (:func:`mask_virtual`). Not ok: out of room."""
    H = A.host
    ng, nullable = H[HX_NG], H[HX_NULLABLE] != 0
    m = cur.shape[0]
    rows = np.empty((m + 1, 6), np.int64)
    nr = 0
    xgrp = np.full(m, -1, np.int64)     # each configuration's row (its lexer state joins that base)
    xs0 = np.empty(m, np.int32)
    acc = False
    deepest = cur[0, 0] if m else 0
    gram = np.empty(m, np.int64)        # the configurations inside a grammar terminal, by (x, c)
    ng_ = 0
    for i in range(m):
        c, x = cur[i, 0], cur[i, 1]
        if nodes[c, NC_DEPTH] > nodes[deepest, NC_DEPTH]:
            deepest = c
        if x != START and A.lx_term[x] < ng:
            gram[ng_] = i
            ng_ += 1
            continue
        r = _group(rows, nr, c, c, -1)
        if r < 0:
            r = nr
            nr += 1
            rows[r, P_NODE], rows[r, P_C], rows[r, P_T], rows[r, P_FLAGS] = c, c, -1, 0
        if x == START:
            rows[r, P_FLAGS] |= 1
            acc = acc or nullable
        else:               # an ignored piece: its boundary is where it began
            xgrp[i] = r
            if A.lx_accept[x]:
                rows[r, P_FLAGS] |= 3
                acc = acc or _accepts(mem, nodes, c, G) or (c == 0 and nullable)
    # the grammar terminals' lexer states: each x with its configurations' boundaries (ascending)
    keys = np.empty(ng_, np.int64)
    for k in range(ng_):
        i = gram[k]
        keys[k] = cur[i, 1] * (nodes.shape[0] + 1) + cur[i, 0]
    order = np.argsort(keys)
    # pass 1: whether some lexer state of a single-boundary base c + t is final (then its chart is needed)
    final = np.zeros(ng_, np.bool_)
    k = 0
    while k < ng_:
        j = k
        x = cur[gram[order[k]], 1]
        while j < ng_ and cur[gram[order[j]], 1] == x:
            j += 1
        if j - k == 1 and A.lx_accept[x]:
            c = cur[gram[order[k]], 0]
            t = A.lx_term[x]
            for q in range(ng_):      # mark every single-boundary state of the same c + t
                xq = cur[gram[order[q]], 1]
                if cur[gram[order[q]], 0] == c and A.lx_term[xq] == t:
                    final[q] = True
        k = j
    k = 0
    while k < ng_:
        j = k
        x = cur[gram[order[k]], 1]
        while j < ng_ and cur[gram[order[j]], 1] == x:
            j += 1
        t = np.int64(A.lx_term[x])     # int64 as every other caller's (one compile of _child)
        c = cur[gram[order[k]], 0]
        node = -1
        if j - k == 1:
            node = _kid(nodes, c, t)
            if node < 0 and not (lazy and not final[k]):
                node = _child(mem, nodes, hdr, kept, scr, c, t, A.root_child, G)
                if node < 0:
                    return rows[:0], xs0[:0], False, False
        else:
            E = np.empty((j - k, 2), np.int64)
            for q in range(k, j):
                E[q - k, 0] = cur[gram[order[q]], 0]
                E[q - k, 1] = t
            node = _merged(mem, nodes, hdr, kept, medge, scr, deepest, E, A.root_child, G)
            if node < 0:
                return rows[:0], xs0[:0], False, False
        r = _group(rows, nr, node, c, t)
        if r < 0:
            r = nr
            nr += 1
            rows[r, P_NODE], rows[r, P_C], rows[r, P_T], rows[r, P_FLAGS] = node, c, t, 0
        for q in range(k, j):
            xgrp[gram[order[q]]] = r
        if A.lx_accept[x]:
            rows[r, P_FLAGS] |= 3
            if not acc and node >= 0:
                acc = _accepts(mem, nodes, node, G)
        k = j
    # each base's lexer states as their distinct residual classes, ascending (the token lists are per class)
    xs = xs0
    o = 0
    for r in range(nr):
        o0 = o
        rows[r, P_X0] = o0
        for i in range(m):
            if xgrp[i] == r:
                xs[o] = A.x_class[cur[i, 1]]
                o += 1
        xs[o0:o].sort()
        k = o0
        for i in range(o0, o):
            if i == o0 or xs[i] != xs[k - 1]:
                xs[k] = xs[i]
                k += 1
        o = k
        rows[r, P_X1] = o
    return rows[:nr], xs[:o], acc, True


@_cpu
def plan_bases(mem, nodes, hdr, kept, medge, scr, cfg, lazy, su, si, sl):
    """:func:`_plan` of the configurations ``cfg[:hdr[H_NCFG]]`` for the Python side (tests, ``accepting``, the
    CUDA backend's and the multi-threaded search's masks): (rows, xs, accept, ok)."""
    return _plan(mem, nodes, hdr, kept, medge, scr, cfg[:hdr[H_NCFG]], lazy, unpack_tables(si, sl),
                 unpack_grammar(su, si, sl))


@_cpu
def store_child(mem, nodes, hdr, kept, medge, scr, node, t, su, si, sl):
    """``ChartStore.child`` (-1: out of room)."""
    A = unpack_tables(si, sl)
    return _child(mem, nodes, hdr, kept, scr, node, t, A.root_child, unpack_grammar(su, si, sl))


@_cpu
def store_merged(mem, nodes, hdr, kept, medge, scr, node, E, su, si, sl):
    """``ChartStore.merged`` (``E``: int64 [k, 2] sorted distinct (c, t); -1: out of room)."""
    A = unpack_tables(si, sl)
    return _merged(mem, nodes, hdr, kept, medge, scr, node, E, A.root_child, unpack_grammar(su, si, sl))


_work_words = _cpu_inline(work_words)


@_cpu_inline
def _search_room(mem, hdr, work, scr, n, K, D, G):
    """Whether a search from a base of ``n`` tiers has its scratch and arena room (after the kept charts)."""
    if work.size < _work_words(D, n, K) or scr.size < G.WN + _scratch_words(G, n + D):
        return _need(hdr, R_DEPTH, n) == 0
    need = hdr[H_USED] + K * _node_words(G, n) + _node_words(G, n + D) * (D + 2)
    if need > mem.size:
        return _need(hdr, R_MEM, need) == 0
    return True


@_cpu_inline
def _memo_find(memo, nodes, base, fl, xa):
    """The memo entry of (base, flags, lexer states), or -1. An entry: [next, flags, len(xs), nv, xs ..., viable]."""
    o = nodes[base, NC_MEMO]
    while o >= 0:
        if memo[o + 1] == fl and memo[o + 2] == xa.size:
            k = 0
            while k < xa.size and memo[o + 4 + k] == xa[k]:
                k += 1
            if k == xa.size:
                return o
        o = memo[o]
    return -1


@_cpu_inline
def _memo_add(memo, nodes, hdr, base, fl, xa, viable, nv, N):
    """Keep the viable nodes of a first-phase search (all entries are dropped once :data:`MEMO_MAX` are kept or the
    arena after the ``N`` words of the search's buffer is full)."""
    size = 4 + xa.size + nv
    if hdr[H_MEMO_N] >= MEMO_MAX or hdr[H_MEMO] + size > memo.size:
        for c in range(hdr[H_NODES]):
            nodes[c, NC_MEMO] = -1
        hdr[H_MEMO] = N
        hdr[H_MEMO_N] = 0
    o = hdr[H_MEMO]
    if o + size > memo.size:
        return
    memo[o] = nodes[base, NC_MEMO]
    memo[o + 1] = fl
    memo[o + 2] = xa.size
    memo[o + 3] = nv
    for k in range(xa.size):
        memo[o + 4 + k] = xa[k]
    for k in range(nv):
        memo[o + 4 + xa.size + k] = viable[k]
    nodes[base, NC_MEMO] = o
    hdr[H_MEMO] = o + size
    hdr[H_MEMO_N] += 1


@_cpu
def fill_host(out, mem, nodes, hdr, kept, medge, memo, work, scr, cfg, flags, tot, eos, ac_rows, ac_keys, su, si,
              sl, dense):
    """The mask of the configurations ``cfg[:hdr[H_NCFG]]`` into ``out`` (uint32), one thread, in one call: the bases
    (:func:`_plan`, lazily), then per base its first phase (:func:`mask_virtual` for an unmade ``c + t``, else the
    memoised viable nodes or a search whose root-child charts are kept for the store to adopt, :func:`mask_base`),
    then the second phase of the bases whose lexer states or boundary lists have chains. ``memo``: int32, the search's
    viable-node buffer (first ``N`` words, N = trie nodes), then the memo (:func:`_memo_add`); ``flags``: uint8 [2 N]
    (second half zeroed) then the zeroed lexer-state flags of a second phase; ``tot``: the work counters. Returns 0,
    or -1 out of room (``hdr[H_NEED]``: grow it and call again; the mask is computed whole again)."""
    out, mem, nodes, hdr, kept, medge, memo = borrowed(out), borrowed(mem), borrowed(nodes), borrowed(hdr), \
        borrowed(kept), borrowed(medge), borrowed(memo)
    work, scr, flags, tot = borrowed(work), borrowed(scr), borrowed(flags), borrowed(tot)
    # the grammar's tables are shared by every sequence (and thread): views of them without a memory record, so
    # that no call below counts references on them (atomic adds on one cache line that threads fight for)
    su, si, sl, dense = borrowed(su), borrowed(si), borrowed(sl), borrowed(dense)
    ac_rows, ac_keys = borrowed(ac_rows), borrowed(ac_keys)
    A = unpack_tables(si, sl)
    G = unpack_grammar(su, si, sl)
    H = A.host
    N = A.node_parent.size
    rows, xs, acc, ok = _plan(mem, nodes, hdr, kept, medge, scr, cfg[:hdr[H_NCFG]], True, A, G)
    if not ok:
        return -1
    nb = rows.shape[0]
    if nb == 0:
        out[:] = 0
        return 0
    vbuf = memo[:N]
    fl2 = flags[:2 * N]
    xflag = flags[2 * N:]
    K, D = np.int64(H[HX_K]), np.int64(H[HX_D])
    L = D + 2
    later = np.empty(nb, np.int64)
    nl = 0
    for i in range(nb):
        fl = rows[i, P_FLAGS]
        b0, b1 = (fl & 1) != 0, (fl & 2) != 0
        xa = xs[rows[i, P_X0]:rows[i, P_X1]]
        e = eos if i == nb - 1 else -1
        if H[HX_CANY]:
            ch = (b0 and H[HX_CB0] != 0) or (b1 and H[HX_CB1] != 0)
            for k in range(xa.size):
                ch = ch or A.x_chain[xa[k]] != 0
            if ch:
                later[nl] = i
                nl += 1
        base = rows[i, P_NODE]
        if base < 0:        # c + t, needed only by lexer states inside t: maybe no chart at all
            if mask_virtual(out, mem, nodes, rows[i, P_C], rows[i, P_T], xa, vbuf, fl2, scr, i == 0, e, acc, tot,
                            ac_rows, ac_keys, su, si, sl, dense) >= 0:
                continue
            base = _child(mem, nodes, hdr, kept, scr, rows[i, P_C], rows[i, P_T], A.root_child, G)
            if base < 0:
                return -1
            rows[i, P_NODE] = base
        n = nodes[base, NC_DEPTH]
        e_off = nodes[base, NC_P] + G.WN
        o = _memo_find(memo, nodes, base, fl, xa)
        if o >= 0:
            hdr[H_MEMO_HITS] += 1
            nv = np.int64(memo[o + 3])
            mask_base(out, mem, nodes, base, e_off, nodes[base, NC_TERM], b0, b1, xa, False,
                      memo[o + 4 + xa.size:o + 4 + xa.size + nv], nv, work, L, fl2, scr, 0, 0, -1, i == 0, e, acc,
                      tot, 1, xflag, ac_rows, ac_keys, su, si, sl, dense)
            continue
        if not _search_room(mem, hdr, work, scr, n, K, D, G):
            return -1
        keep_words = K * _node_words(G, n)
        keep_off = -1
        if K > 0 and nodes[base, NC_KEPT] < 0:
            if hdr[H_KEPT] >= kept.shape[0]:
                return _need(hdr, R_KEPT, hdr[H_KEPT] + 1)
            keep_off = hdr[H_USED]
        nv = mask_base(out, mem, nodes, base, e_off, nodes[base, NC_TERM], b0, b1, xa, True, vbuf, 0, work, L, fl2,
                       scr, hdr[H_USED] + keep_words, _node_words(G, n + D), keep_off, i == 0, e, acc, tot, 1, xflag,
                       ac_rows, ac_keys, su, si, sl, dense)
        if keep_off >= 0:
            used = work[work.size - 1]
            if used:
                r = hdr[H_KEPT]
                hdr[H_KEPT] = r + 1
                for k in range(K):
                    kept[r, k] = work[work.size - K - 1 + k]
                nodes[base, NC_KEPT] = r
                hdr[H_USED] = keep_off + used * (keep_words // K)
        _memo_add(memo, nodes, hdr, base, fl, xa, vbuf, nv, N)
    for q in range(nl):      # the chains, for the tokens no base has allowed yet
        i = later[q]
        fl = rows[i, P_FLAGS]
        xa = xs[rows[i, P_X0]:rows[i, P_X1]]
        base = rows[i, P_NODE]
        if base < 0:
            base = _child(mem, nodes, hdr, kept, scr, rows[i, P_C], rows[i, P_T], A.root_child, G)
            if base < 0:
                return -1
            rows[i, P_NODE] = base
        n = nodes[base, NC_DEPTH]
        if not _search_room(mem, hdr, work, scr, n, K, D, G):
            return -1
        mask_base(out, mem, nodes, base, nodes[base, NC_P] + G.WN, nodes[base, NC_TERM], (fl & 1) != 0,
                  (fl & 2) != 0, xa, True, vbuf, 0, work, L, fl2, scr, hdr[H_USED] + K * _node_words(G, n),
                  _node_words(G, n + D), -1, False, -1, acc, tot, 2, xflag, ac_rows, ac_keys, su, si, sl, dense)
    return 0
