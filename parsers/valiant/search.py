"""Terminal tree search (paper 6.1) and mask assembly, CPU (numba): one jitted call per base chart.

From a base chart (the committed tiers of one branch) the trie of terminal sequences is searched
depth-first: a child node is viable iff its terminal is in EXPECT of its parent's chart; a viable node with
children gets its own chart (one more tier, written to a per-depth slot of a stack of tiers, zero copy:
the tiers below are shared through ``tier_offs``). The search itself is ``kernels_common.dfs``, one source
for both backends; the CUDA kernels (BFS to ``bfs_depth``, then one DFS per worker block; cuda_kernels.py)
call it too.

A mask needs, per base chart, three things: the trie nodes the search needs (:func:`needed_nodes`), the
search, and the OR of the token lists of the viable nodes (``fill_tokens``). ``mask_base`` does all three in one
call (``mask_base_par`` splits the search over threads), with every static table packed into three flat arrays
(:func:`pack_statics`): numba's dispatch costs about 1,000 instructions per array argument, which for a cheap
mask was more than the search. Those jitted functions live in ``kernels_common.py`` beside the device logic they
call (numba's on-disk cache is per source file: a caller in another file would keep a changed callee's old
machine code); this module holds the Python-side tables and re-exports them.
"""
from __future__ import annotations

import numba
import numpy as np

from .kernels_common import (  # noqa: F401  (the jitted mask entry points live beside the device logic they call)
    _GM_LEN, _I_FIELDS, _L_FIELDS, Tables, fill_tokens, mask_base, mask_base_par, mask_virtual, needed_nodes,
    search_nodes, unpack_tables, work_words)


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
