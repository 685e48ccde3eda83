"""Terminal tree search (paper 6.1) and mask assembly, CPU (numba): one jitted call per base chart.

From a base chart (the committed tiers of one branch) the trie of terminal sequences is searched
depth-first: a child node is viable iff its terminal is in EXPECT of its parent's chart; a viable node with
children gets its own chart (one more tier, written to a per-depth slot of a stack of tiers, zero copy:
the tiers below are shared through ``tier_offs``). The search itself is ``device_search.dfs``, one source
for both backends; the CUDA kernels (BFS to ``bfs_depth``, then one DFS per worker block; cuda_kernels.py)
call it too.

A mask needs, per base chart, three things: the trie nodes the search needs (``needed_nodes``), the
search, and the OR of the token lists of the viable nodes (``fill_tokens``). ``mask_base`` does all three in one
call (``mask_base_par`` splits the search over threads), with every static table packed into three flat arrays
(:func:`pack_statics`): numba's dispatch costs about 1,000 instructions per array argument, which for a cheap
mask was more than the search. Those jitted functions are in ``cpu_mask.py`` (the packed layout in
``packing.py``); this module builds the Python-side tables they read.
"""
from __future__ import annotations

import numba
import numpy as np

from .packing import _I_FIELDS, _L_FIELDS, GM_LEN, HOST_FIELDS, Tables


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


def chain_tables(al) -> dict:
    """The tables of a mask's second phase (``cpu_mask.mask_base``). A *chain node* is a merged boundary or a
    node below one; its tuples are searched only for the tokens that the first phase, over every other node, did
    not allow: a token is allowed iff some tuple of it is viable, and on grammars with merged walks most tokens are
    allowed by a tuple outside the chains (one piece for a whole word), whose search costs a few chart steps where
    the chains cost hundreds. Returns ``chain`` (uint8 per node), ``need_b0`` / ``need_b1`` (the first phase's
    boundary-list nodes, closed upward), the chain tuples grouped by the root child above their node (CSR
    ``ct_gstart`` over the root's children, in child order) and in a group by token (``ct_tok`` ascending, CSR
    ``ct_start`` into ``ct_node`` / ``ct_kind``: 0 ``bnd[0]``, 1 ``bnd[1]``, ``2 + x`` a continuation of lexer state
    ``x``), and ``x_chain`` (int32 per lexer state: it has chain continuations). A group whose root child is not
    viable from a base is skipped whole."""
    N = al.n_nodes
    merged = np.diff(al.merge_start) > 0
    chain = np.zeros(N, dtype=np.uint8)
    par = al.node_parent
    for v in range(1, N):          # a parent's id is smaller than its child's
        chain[v] = merged[v] or chain[par[v]]
    out = {"chain": chain}
    nodes, kinds, toks = [], [], []
    for f in range(2):
        lens = np.diff(al.bnd_start[f])
        flags = ((lens > 0) & (chain == 0)).astype(np.uint8)
        close_upward(flags, par)
        out[f"need_b{f}"] = flags
        node = np.repeat(np.arange(N, dtype=np.int64), lens)
        sel = chain[node] == 1
        nodes.append(node[sel])
        toks.append(al.bnd_tok[f][sel].astype(np.int64))
        kinds.append(np.full(int(sel.sum()), f, dtype=np.int64))
    G = al.call_start.size - 1
    glen = np.diff(al.cont_nstart)
    gx = np.repeat(np.arange(G, dtype=np.int64), np.diff(al.cont_xstart))
    node = np.repeat(al.cont_nodes.astype(np.int64), glen)
    sel = chain[node] == 1
    nodes.append(node[sel])
    toks.append(al.cont_tok[sel].astype(np.int64))
    xk = np.repeat(gx, glen)[sel]
    kinds.append(2 + xk)
    x_chain = np.zeros(G, dtype=np.int32)
    x_chain[np.unique(xk)] = 1
    node, kind, tok = (np.concatenate(a) for a in (nodes, kinds, toks))
    # group the tuples by the root child above their node (its position among the root's children)
    K = int(al.child_start[1] - al.child_start[0])
    top = np.arange(N, dtype=np.int64)
    depth = al.node_depth.astype(np.int64)
    for _ in range(int(depth.max()) if N > 1 else 0):
        up = depth[top] > 1
        if not up.any():
            break
        top[up] = par[top[up]]
    pos = np.full(N, -1, dtype=np.int64)
    pos[al.child_ids[al.child_start[0]:al.child_start[1]]] = np.arange(K)
    grp = pos[top[node]]
    order = np.lexsort((node, kind, tok, grp))
    grp, tok = grp[order], tok[order]
    new_pair = np.ones(tok.size, dtype=bool)
    new_pair[1:] = (grp[1:] != grp[:-1]) | (tok[1:] != tok[:-1])
    starts = np.flatnonzero(new_pair)
    out.update(ct_tok=tok[starts].astype(np.int32), ct_start=np.append(starts, tok.size).astype(np.int64),
               ct_gstart=np.searchsorted(grp[starts], np.arange(K + 1)).astype(np.int64),
               ct_node=node[order].astype(np.int32), ct_kind=kind[order].astype(np.int32), x_chain=x_chain)
    return out


@numba.njit(cache=True, nogil=True)
def close_upward(flags, node_parent):
    """Flag every ancestor of a flagged node (a parent's id is smaller than its child's)."""
    for v in range(flags.size - 1, 0, -1):
        if flags[v]:
            flags[node_parent[v]] = 1
    flags[0] = 1


def pack_statics(gpack, al, dense_idx, chain: dict, no_alias, spans: tuple, host: dict | None = None) -> tuple:
    """``(su, si, sl)``: everything static a search, a mask and a commit read, in three flat arrays: ``su`` the
    grammar's uint64 tables, ``si`` its int32 tables then the trie's, the token lists', the lexer's and the host
    scalars (``Tables`` int32 fields), ``sl`` the grammar header (``packing.pack_grammar``), then (offset,
    length) of each ``Tables`` field, then the int64 fields. ``packing.unpack_tables`` views them as :data:`Tables`,
    ``unpack_grammar(su, si, sl)`` as the grammar record. ``host``: the lexer tables (``trans``, ``accept``,
    ``term_of``, ``start_of``: ``compiled.Compiled``), ``root_child`` and the scalars of ``HOST_FIELDS``.
    ``no_alias``, ``spans``: ``align.alias_blocked`` and ``align.span_edges`` of ``al``."""
    d_b0, d_b1, d_call, d_cont = dense_idx
    src = {"child_start": al.child_start, "child_ids": al.child_ids, "node_term": al.node_term,
           "node_parent": al.node_parent, "bnd_tok0": al.bnd_tok[0], "bnd_tok1": al.bnd_tok[1],
           "call_tok": al.call_tok, "cont_nodes": al.cont_nodes, "cont_tok": al.cont_tok, "d_b0": d_b0, "d_b1": d_b1,
           "d_call": d_call, "d_cont": d_cont, "need_b0": chain["need_b0"], "need_b1": chain["need_b1"],
           "merge_row": al.merge_row, "merge_term": al.merge_term, "no_alias": no_alias,
           "no_alias0": np.zeros(al.n_nodes, np.int32), "chain": chain["chain"], "ct_tok": chain["ct_tok"],
           "ct_node": chain["ct_node"], "ct_kind": chain["ct_kind"], "x_chain": chain["x_chain"],
           "x_class": al.x_class, "node_depth": al.node_depth,
           "bnd_start": al.bnd_start.ravel(), "call_start": al.call_start, "cont_xstart": al.cont_xstart,
           "cont_nstart": al.cont_nstart, "merge_start": al.merge_start, "ct_start": chain["ct_start"],
           "ct_gstart": chain["ct_gstart"]}
    src["span_start"], src["span_row"], src["span_term"] = spans
    host = host or {}
    if "trans" in host:
        src.update(lx_trans=np.asarray(host["trans"]).ravel(), lx_accept=host["accept"], lx_term=host["term_of"],
                   lx_start=host["start_of"], root_child=host["root_child"])
    src["host"] = np.array([int(host.get(f, 0)) for f in HOST_FIELDS], dtype=np.int32)
    return _pack(gpack, src)


def pack_statics_grammar(g) -> tuple:
    """:func:`pack_statics` of a chart store alone (``ChartStore(g)``: tests, the CUDA step's checks): the grammar,
    every other table empty."""
    return _pack(g.packed, {"host": np.zeros(len(HOST_FIELDS), np.int32)})


def _pack(gpack, src: dict) -> tuple:
    """The three arrays of :func:`pack_statics` from the tables by ``Tables`` field (a missing one is empty)."""
    gu, gi, gm = gpack
    assert gm.size == GM_LEN
    head, parts_i, parts_l = [], [gi], []
    oi = gi.size
    ol = GM_LEN + 2 * len(Tables._fields)
    for f in _I_FIELDS:
        a = np.ascontiguousarray(src.get(f, ()), dtype=np.int32)
        head += [oi, a.size]
        parts_i.append(a)
        oi += a.size
    for f in _L_FIELDS:
        a = np.ascontiguousarray(src.get(f, ()), dtype=np.int64)
        head += [ol, a.size]
        parts_l.append(a)
        ol += a.size
    sl = np.concatenate([gm, np.array(head, dtype=np.int64)] + parts_l)
    return gu, np.concatenate(parts_i), sl
