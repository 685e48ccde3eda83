"""Terminal tree search (paper 6.1) and mask assembly, CPU (numba).

From a base chart (the committed tiers of one branch) the trie of terminal sequences is searched
depth-first: a child node is viable iff its terminal is in EXPECT of its parent's chart; a viable node with
children gets its own chart (one more tier, written to a per-depth slot of a stack of tiers, zero copy:
the tiers below are shared through ``tier_offs``). The search itself is ``kernels_common.dfs``, one source
for both backends: ``tree_search`` (one CPU thread), ``tree_search_par`` (``threads`` CPU threads) and the
CUDA kernels (BFS to ``bfs_depth``, then one DFS per worker block; cuda_kernels.py) all call it.
This module holds the rest: which trie nodes a search needs, and the mask assembly from viable nodes.
"""
from __future__ import annotations

import numba
import numpy as np

from .kernels_common import tree_search, tree_search_par  # noqa: F401  (re-exported)


@numba.njit(cache=True, nogil=True, inline="always")
def _set_list(out, toks, lo, hi, dense_id, dense):
    """OR tokens toks[lo:hi] into ``out``; long lists have a packed copy (``dense_id >= 0``) OR-ed word-wise."""
    if dense_id >= 0:
        for w in range(out.size):
            out[w] |= dense[dense_id, w]
        return
    one = np.uint32(1)
    for j in range(lo, hi):
        tok = toks[j]
        out[tok >> 5] |= one << np.uint32(tok & 31)


@numba.njit(cache=True, nogil=True)
def fill_tokens(out, viable, cnt, flags, use_b0, use_b1, xs, bnd_start, bnd_tok0, bnd_tok1, call_start, call_tok,
                cont_xstart, cont_nodes, cont_nstart, cont_tok, dense, d_b0, d_b1, d_call, d_cont):
    """OR into the packed mask ``out`` (uint32) the tokens of the viable nodes for one base chart.
    ``flags`` is a zeroed uint8 [n_nodes] scratch, left zeroed. ``d_*`` give each list's row in
    ``dense`` (packed masks of the long lists) or -1."""
    for k in range(cnt):
        flags[viable[k]] = 1
    for k in range(cnt):
        v = viable[k]
        if use_b0:
            _set_list(out, bnd_tok0, bnd_start[0, v], bnd_start[0, v + 1], d_b0[v], dense)
        if use_b1:
            _set_list(out, bnd_tok1, bnd_start[1, v], bnd_start[1, v + 1], d_b1[v], dense)
    for i in range(xs.size):
        x = xs[i]
        _set_list(out, call_tok, call_start[x], call_start[x + 1], d_call[x], dense)
        for gi in range(cont_xstart[x], cont_xstart[x + 1]):
            if flags[cont_nodes[gi]]:
                _set_list(out, cont_tok, cont_nstart[gi], cont_nstart[gi + 1], d_cont[gi], dense)
    for k in range(cnt):
        flags[viable[k]] = 0


def dense_lists(al, vocab_size: int, min_len: int = 2048):
    """Packed masks for the token lists of at least ``min_len`` tokens, and each list's row (or -1)."""
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
