"""Device logic written once: the chart step and the depth-first terminal-tree search, for both targets.

The functions here and in ``device_search.py`` (the idem certificate ``certify``, the trie search ``dfs``)
are plain Python compiled by numba. These modules compile them for the CPU (``numba.njit``); ``cuda_kernels.py``
compiles the same code as CUDA device functions with ``device_search.for_cuda``, which rebinds the few target
primitives they call (defined here, with their CPU bindings):

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
CPU is the plain loop (a bitset's set bits: :func:`_next_turn`). Kernels only compute indices and call these functions.

The grammar travels as one record, :data:`Grammar` (a namedtuple of scalars and arrays whose fields
:data:`GRAMMAR_FIELDS` declares by name). Device logic reads ``G.<field>``. Jitted entry points take it in the form
numba dispatches fastest and rebuild the record first thing: CPU entry points as three flat arrays
(``packing.pack_grammar``, viewed again by ``packing.unpack_grammar``), CUDA kernels as a plain tuple of device arrays
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
  again gives an equivalent chart (``device_search.certify``): the search then takes the same chart for ``..a a a``
  without a chart step (a token of 98 ``-`` costs three steps, not 98).
"""
from __future__ import annotations

from collections import namedtuple

import numba
import numpy as np
from llvmlite import ir as llvm_ir
from numba.core import types as nbtypes
from numba.core.extending import intrinsic

from gcdbench.parsers.targets import callee_jit

#: The grammar record's fields in order, each (name, kind, what it holds), the one place they are declared:
#: :data:`Grammar` is built from it, and so are the CPU packing (``packing.pack_grammar``, ``unpack_grammar``) and
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
    "span_start", "span_row", "span_term",     # the merged pieces spanning a node (align.span_edges)
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
def _next_turn(words, nw, i, bits, skip, nth):
    """The set bits of the bitset ``words[:nw]`` handed out round-robin, one turn: the index of the next bit this
    thread takes, or -1 past the end, with the cursor after it, ``(bit, i, bits, skip)``. The cursor is the word
    ``i``, its bits not handed out yet ``bits``, and ``skip`` the bits the other threads take before this one's next
    turn; start from ``(-1, 0, tid)``. Each word is read when the walk reaches it (on the CPU: every bit in order)."""
    one = np.uint64(1)
    while True:
        while not bits:
            i += 1
            if i >= nw:
                return -1, i, bits, skip
            bits = words[i]
        low = bits & (~bits + one)
        bits ^= low
        if skip > 0:
            skip -= 1
        else:
            return i * 64 + _ctz(low), i, bits, nth - 1


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
        i, rbits, skip = -1, np.uint64(0), tid
        while True:
            r, i, rbits, skip = _next_turn(rowsum, W, i, rbits, skip, nth)
            if r < 0:
                break
            rl = one << np.uint64(r & 63)     # row r is bit rl of word i
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
    wi, bits, skip = -1, np.uint64(0), tid
    while True:
        xn, wi, bits, skip = _next_turn(seeds, WN, wi, bits, skip, nth)
        if xn < 0:
            break
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
