"""The CPU entry points of a mask, one jitted call per base chart (the Python side is ``search.py``): the trie
nodes a search needs (:func:`needed_nodes`, :func:`needed_chain`), the tree search (``device_search.dfs``, split
over threads by :func:`mask_base_par`), and the token sets of the viable nodes assembled into the mask
(:func:`fill_tokens`, through the cache of assembled sets :func:`fill_cached`): :func:`mask_base` for a base chart,
:func:`mask_virtual` for a base whose chart a mask may not need."""
from __future__ import annotations

import numba
import numpy as np

from gcdbench.parsers.targets import borrowed

from .device import N_STATS, ST_CERTIFIED, ST_VIABLE, Trie, _cpu, _cpu_inline
from .device_search import DfsOut, DfsScratch, DfsStart, DfsState, _row0_certifies, dfs
from .packing import unpack_grammar, unpack_tables
from .store_kernels import _fill_path


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
def fill_cached(out, viable, cnt, flags, use_b0, use_b1, xs, A, dense, ac_rows, ac_keys, tot, clear=False):
    """:func:`fill_tokens` through a direct-mapped cache of assembled token sets: the tokens a base adds to a mask
    depend only on (viable nodes, ``use_b0``, ``use_b1``, ``xs``), and those keys repeat across prefixes (Spider:
    81 distinct in 940 fills, TreeBank: 610 in 3,364). Slot ``s`` holds the packed tokens of one key in
    ``ac_rows[s]`` and the key in ``ac_keys[s]``: [hash (31 bits), key length, flags, len(xs), xs ..., viable ...],
    compared whole, so a hash collision only costs a miss. A miss fills its slot and ORs it into ``out``; a key
    longer than a slot (or no slots) fills ``out`` directly. ``clear``: ``out`` holds nothing yet (the first base of a
    mask): the set is copied into it instead of zeroing it and OR-ing (one pass over the mask, not two)."""
    S = ac_rows.shape[0]
    n = 3 + xs.size + cnt
    if S == 0 or n + 1 > ac_keys.shape[1]:
        if clear:
            out[:] = 0
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
    if clear:
        for w in range(out.size):
            out[w] = row[w]
    else:
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


@_cpu_inline
def _any_expected(mem, e_off, terms, lo, hi):
    """Is some terminal ``terms[lo:hi]`` in the EXPECT at ``e_off``?"""
    for q in range(lo, hi):
        t = terms[q]
        if (mem[e_off + (t >> 6)] >> np.uint64(t & 63)) & np.uint64(1):
            return True
    return False


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
        else:               # a merged root child: its edges begin at the base (row 0)
            ok = _any_expected(mem, e_off, A.merge_term, A.merge_start[r], A.merge_start[r + 1])
        # a root child spanned by pieces of merged boundaries below it (bit 2 of no_alias; they begin at the base,
        # row 0: align.span_edges) is walked when one of them is expected, viable or not (device_search.dfs)
        if not ok and (A.no_alias[r] & 2) != 0:
            ok = _any_expected(mem, e_off, A.span_term, A.span_start[r], A.span_start[r + 1])
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


#: the depth of the chain tuples a second phase's first round looks at (then 2x, 4x ... : :func:`mask_base`)
FIRST_ROUND = 4


@_cpu_inline
def _trie(A, phase):
    """The :data:`Trie` record of a :data:`Tables` record for a search's ``phase``: the first visits no merged node,
    so it may take the idem shortcut anywhere (``no_alias0``)."""
    return Trie(A.child_start, A.child_ids, A.node_term, A.merge_start, A.merge_row, A.merge_term,
                A.no_alias0 if phase == 1 else A.no_alias, A.span_start, A.span_row, A.span_term)


def work_words(depth: int, n_max: int, k_root: int) -> int:
    """int64 workspace of one search from a base of at most ``n_max`` tiers: four stacks of ``depth + 2``
    levels, the work counters, the tier and ANC offsets of the path (``n_max + depth + 2`` and one more), and the
    map of kept root-child charts (``k_root + 1``: see ``device_search.dfs``)."""
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
                 stride, keep_off, tot, T, A, G, dense, ac_rows, ac_keys, clear):
    """One search among ``needed`` (viable nodes into ``viable``, root first) and their tokens OR-ed into ``out``
    (through the cache ``ac_rows``, ``ac_keys``: :func:`fill_cached`); the work counters added to ``tot``. Returns
    the number of viable nodes. ``clear``: ``out`` holds nothing yet (:func:`fill_cached`)."""
    work[4 * L:4 * L + N_STATS] = 0
    viable[0] = 0
    nv = _search_one(mem, nodes, base, e_off, term, A.child_start[0], 1, needed, viable, 1, work, L, scr, scratch_off,
                     stride, G.WN, keep_off, A.child_start[1] - A.child_start[0], T, G)
    for i in range(N_STATS):
        tot[i] += work[4 * L + i]
    tot[N_STATS] += 1
    fill_cached(out, viable, nv, flags[A.node_parent.size:], b0, b1, xs, A, dense, ac_rows, ac_keys, tot, clear)
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
                         np.zeros((0, 1), np.int32), False)   # not cached: a few chain nodes a token
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
    if search:
        G = unpack_grammar(su, si, sl)
        if phase == 2:
            if clear:
                out[:] = 0
            _second_phase(out, mem, nodes, base, e_off, term, b0, b1, xs, viable, work, L, flags, scr, scratch_off,
                          stride, tot, xflag, A, G, dense)
            nv = 0
        else:
            needed = flags[:N]
            needed_nodes(needed, A.need_b0, A.need_b1, b0, b1, xs, A.cont_xstart, A.cont_nodes, A.node_parent,
                         A.chain)
            nv = _search_fill(out, mem, nodes, base, e_off, term, b0, b1, xs, needed, viable, work, L, flags, scr,
                              scratch_off, stride, keep_off, tot, _trie(A, 1), A, G, dense, ac_rows, ac_keys, clear)
    else:
        fill_cached(out, viable, nv, flags[N:], b0, b1, xs, A, dense, ac_rows, ac_keys, tot, clear)
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
    fill_cached(out, viable, nv, flags[N:], False, False, xs, A, dense, ac_rows, ac_keys, tot, clear)
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
