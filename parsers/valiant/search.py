"""Terminal tree search (paper 6.1) and mask assembly, CPU (numba): one jitted call per base chart.

From a base chart (the committed tiers of one branch) the trie of terminal sequences is searched
depth-first: a child node is viable iff its terminal is in EXPECT of its parent's chart; a viable node with
children gets its own chart (one more tier, written to a per-depth slot of a stack of tiers, zero copy:
the tiers below are shared through ``tier_offs``). The search itself is ``kernels_common.dfs``, one source
for both backends; the CUDA kernels (BFS to ``bfs_depth``, then one DFS per worker block; cuda_kernels.py)
call it too.

A mask needs, per base chart, three things: the trie nodes the search needs (:func:`needed_nodes`), the
search, and the OR of the token lists of the viable nodes (:func:`fill_tokens`). :func:`mask_base` does all
three in one call (``mask_base_par`` splits the search over threads), with every static table packed into
three flat arrays (:func:`pack_statics`): numba's dispatch costs about 1,000 instructions per array argument,
which for a cheap mask was more than the search.
"""
from __future__ import annotations

from collections import namedtuple

import numba
import numpy as np

from .kernels_common import N_STATS, Trie, dfs, unpack_grammar

Tables = namedtuple("Tables", [
    "child_start", "child_ids", "node_term", "node_parent",      # the trie (int32)
    "bnd_tok0", "bnd_tok1", "call_tok", "cont_nodes", "cont_tok",  # token lists (int32)
    "d_b0", "d_b1", "d_call", "d_cont",                           # row of each list in ``dense``, or -1 (int32)
    "need_b0", "need_b1",                                         # nodes some boundary list needs (int32 0/1)
    "bnd_start", "call_start", "cont_xstart", "cont_nstart",      # CSR starts (int64; bnd_start is [2, N+1])
])
_I_FIELDS = Tables._fields[:15]
_L_FIELDS = Tables._fields[15:]


@numba.njit(cache=True, nogil=True, inline="always")
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


@numba.njit(cache=True, nogil=True)
def fill_tokens(out, viable, cnt, flags, use_b0, use_b1, xs, A, dense):
    """OR into the packed mask ``out`` (uint32) the tokens of the viable nodes for one base chart.
    ``flags`` is a zeroed uint8 [n_nodes] scratch, left zeroed. ``A`` is the :data:`Tables` record."""
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


def dense_lists(al, vocab_size: int, min_len: int = 512):
    """Packed masks for the token lists of at least ``min_len`` tokens, and each list's row (or -1). An OR of
    a packed mask costs about as much as ~150 single tokens."""
    from gcdbench.parsers.base import ids_to_mask

    rows = []

    def index(starts, toks):
        lens = np.diff(starts)
        ids = np.full(lens.size, -1, dtype=np.int32)
        for i in np.flatnonzero(lens >= min_len).tolist():
            ids[i] = len(rows)
            rows.append(ids_to_mask(toks[starts[i]:starts[i + 1]], vocab_size).view(np.uint32))
        return ids

    d_b0 = index(al.bnd_start[0], al.bnd_tok[0])
    d_b1 = index(al.bnd_start[1], al.bnd_tok[1])
    d_call = index(al.call_start, al.call_tok)
    d_cont = index(al.cont_nstart, al.cont_tok)
    words = (vocab_size + 31) // 32
    dense = np.stack(rows) if rows else np.zeros((0, words), dtype=np.uint32)
    return dense, d_b0, d_b1, d_call, d_cont


@numba.njit(cache=True, nogil=True)
def close_upward(flags, node_parent):
    """Flag every ancestor of a flagged node (a parent's id is smaller than its child's)."""
    for v in range(flags.size - 1, 0, -1):
        if flags[v]:
            flags[node_parent[v]] = 1
    flags[0] = 1


@numba.njit(cache=True, nogil=True)
def needed_nodes(out, need_b0, need_b1, use_b0, use_b1, xs, cont_xstart, cont_nodes, node_parent):
    """Nodes a search from one base has to visit: those of the boundary lists in use, those of the
    continuation groups of its lexer states ``xs``, and all their ancestors."""
    for v in range(out.size):
        out[v] = (use_b0 and need_b0[v]) or (use_b1 and need_b1[v])
    out[0] = 1
    for i in range(xs.size):
        x = xs[i]
        for gi in range(cont_xstart[x], cont_xstart[x + 1]):
            v = cont_nodes[gi]
            while not out[v]:
                out[v] = 1
                v = node_parent[v]


_GM_LEN = 5 + 3 * 11     # pack_grammar's header: 5 scalars, (offset, rows, columns) of 11 tables


def pack_statics(gpack, al, dense_idx, need_b0, need_b1) -> tuple:
    """``(su, si, sl)``: everything static a search and a mask read, in three flat arrays: ``su`` the grammar's
    uint64 tables, ``si`` its int32 tables then the trie's and the token lists' (``Tables`` fields 0-14), ``sl``
    the grammar header (``kernels_common.pack_grammar``), then (offset, length) of each ``Tables`` field, then
    the int64 fields. :func:`unpack_tables` views them as :data:`Tables`, ``unpack_grammar(su, si, sl)`` as the
    grammar record."""
    gu, gi, gm = gpack
    assert gm.size == _GM_LEN
    d_b0, d_b1, d_call, d_cont = dense_idx
    src = {"child_start": al.child_start, "child_ids": al.child_ids, "node_term": al.node_term,
           "node_parent": al.node_parent, "bnd_tok0": al.bnd_tok[0], "bnd_tok1": al.bnd_tok[1],
           "call_tok": al.call_tok, "cont_nodes": al.cont_nodes, "cont_tok": al.cont_tok, "d_b0": d_b0, "d_b1": d_b1,
           "d_call": d_call, "d_cont": d_cont, "need_b0": need_b0, "need_b1": need_b1,
           "bnd_start": al.bnd_start.ravel(), "call_start": al.call_start, "cont_xstart": al.cont_xstart,
           "cont_nstart": al.cont_nstart}
    head, parts_i, parts_l = [], [gi], []
    oi = gi.size
    ol = _GM_LEN + 2 * len(Tables._fields)
    for f in _I_FIELDS:
        a = np.ascontiguousarray(src[f], dtype=np.int32)
        head += [oi, a.size]
        parts_i.append(a)
        oi += a.size
    for f in _L_FIELDS:
        a = np.ascontiguousarray(src[f], dtype=np.int64)
        head += [ol, a.size]
        parts_l.append(a)
        ol += a.size
    sl = np.concatenate([gm, np.array(head, dtype=np.int64)] + parts_l)
    return gu, np.concatenate(parts_i), sl


@numba.njit(cache=True, nogil=True, inline="always")
def _v(flat, sl, k):
    o = sl[_GM_LEN + 2 * k]
    return flat[o:o + sl[_GM_LEN + 2 * k + 1]]


@numba.njit(cache=True, nogil=True, inline="always")
def unpack_tables(si, sl):
    """The :data:`Tables` record viewed from :func:`pack_statics`'s arrays (no copy)."""
    bs = _v(sl, sl, 15)
    return Tables(_v(si, sl, 0), _v(si, sl, 1), _v(si, sl, 2), _v(si, sl, 3), _v(si, sl, 4), _v(si, sl, 5),
                  _v(si, sl, 6), _v(si, sl, 7), _v(si, sl, 8), _v(si, sl, 9), _v(si, sl, 10), _v(si, sl, 11),
                  _v(si, sl, 12), _v(si, sl, 13), _v(si, sl, 14), bs.reshape((2, bs.size // 2)), _v(sl, sl, 16),
                  _v(sl, sl, 17), _v(sl, sl, 18))


def work_words(depth: int, n_max: int) -> int:
    """int64 workspace of one search from a base of at most ``n_max`` tiers: four stacks of ``depth + 2``
    levels, the work counters, the tier and ANC offsets of the path (``n_max + depth + 2`` and one more)."""
    return 4 * (depth + 2) + N_STATS + 2 * (n_max + depth + 2) + 1


@numba.njit(cache=True, nogil=True, inline="always")
def _search_one(mem, pt, pp, n, e_off, term, first, step, needed, viable, cnt, work, L, scr, scratch_off, stride, WN,
                T, G):
    """One DFS from a base (path ``pt``/``pp``) with the stacks, counters and path tables carved out of
    ``work`` and the step scratch out of ``scr`` (seeds first)."""
    st = 4 * L
    tiers = work[st + N_STATS:]
    ps = tiers[L + n:]
    tiers[:n] = pt
    ps[:n + 1] = pp
    return dfs(mem, tiers, ps, n, 0, e_off, term, first, step, scratch_off, stride, T, needed, viable, cnt, work[:L],
               work[L:2 * L], work[2 * L:3 * L], work[3 * L:4 * L], scr[WN:], scr[:WN], work[st:st + N_STATS], G)


@numba.njit(cache=True, nogil=True)
def mask_base(out, mem, pt, pp, n, e_off, term, b0, b1, xs, search, viable, nv, work, L, flags, scr, scratch_off,
              stride, su, si, sl, dense):
    """One base chart's part of a mask: if ``search``, the needed nodes and the tree search (viable nodes into
    ``viable``, root first; else ``viable[:nv]`` holds a memoised result), then their tokens OR-ed into ``out``.
    ``pt``/``pp`` are the base's tier and ANC offsets, ``L`` the levels of a DFS stack (trie depth + 2),
    ``flags`` uint8 scratch of 2 x nodes (the second half zeroed), ``work`` int64 of :func:`work_words`, ``scr``
    uint64 of ``WN + scratch_words(n + depth)``. Returns the number of viable nodes."""
    A = unpack_tables(si, sl)
    N = A.node_parent.size
    if search:
        G = unpack_grammar(su, si, sl)
        needed = flags[:N]
        needed_nodes(needed, A.need_b0, A.need_b1, b0, b1, xs, A.cont_xstart, A.cont_nodes, A.node_parent)
        work[4 * L:4 * L + N_STATS] = 0
        viable[0] = 0
        nv = _search_one(mem, pt, pp, n, e_off, term, A.child_start[0], 1, needed, viable, 1, work, L, scr,
                         scratch_off, stride, G.WN, Trie(A.child_start, A.child_ids, A.node_term), G)
    fill_tokens(out, viable, nv, flags[N:], b0, b1, xs, A, dense)
    return nv


@numba.njit(cache=True, nogil=True)
def search_nodes(mem, pt, pp, n, e_off, term, needed, viable, work, L, scr, scratch_off, stride, su, si, sl):
    """The viable trie nodes of a search from a base among ``needed`` (into ``viable``, root first); returns how
    many. For tests and the CUDA comparison (masks use :func:`mask_base`)."""
    A = unpack_tables(si, sl)
    G = unpack_grammar(su, si, sl)
    work[4 * L:4 * L + N_STATS] = 0
    viable[0] = 0
    return _search_one(mem, pt, pp, n, e_off, term, A.child_start[0], 1, needed, viable, 1, work, L, scr, scratch_off,
                       stride, G.WN, Trie(A.child_start, A.child_ids, A.node_term), G)


@numba.njit(cache=True, nogil=True, parallel=True)
def mask_base_par(out, mem, pt, pp, n, e_off, term, b0, b1, xs, search, viable, nv, work, L, flags, scr, scratch_off,
                  stride, vbuf, counts, su, si, sl, dense):
    """:func:`mask_base` with the search split over ``W = vbuf.shape[0]`` threads (numba ``prange``): worker w
    searches the root's children w, w + W, ... with its own row of ``work``, ``scr`` and ``vbuf`` and its own
    scratch region ``scratch_off + w * stride * L``. Chart tiers below the base are shared and only read."""
    A = unpack_tables(si, sl)
    N = A.node_parent.size
    if search:
        G = unpack_grammar(su, si, sl)
        needed = flags[:N]
        needed_nodes(needed, A.need_b0, A.need_b1, b0, b1, xs, A.cont_xstart, A.cont_nodes, A.node_parent)
        T = Trie(A.child_start, A.child_ids, A.node_term)
        W = vbuf.shape[0]
        for w in numba.prange(W):
            work[w, 4 * L:4 * L + N_STATS] = 0
            counts[w] = _search_one(mem, pt, pp, n, e_off, term, A.child_start[0] + w, W, needed, vbuf[w], 0, work[w],
                                    L, scr[w], scratch_off + w * stride * L, stride, G.WN, T, G)
        viable[0] = 0
        nv = 1
        for w in range(W):
            for i in range(counts[w]):
                viable[nv] = vbuf[w, i]
                nv += 1
    fill_tokens(out, viable, nv, flags[N:], b0, b1, xs, A, dense)
    return nv
