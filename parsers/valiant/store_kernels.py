"""The jitted bookkeeping of a sequence's chart store (``chart_store.ChartStore``; issue 29): the node table, a
node's chart step on the CPU (:func:`extend`, :func:`extend_edges`), a node's child by a terminal (found, adopted
from a search's kept chart, or stepped: :func:`_child`), a merged boundary (:func:`_merged`), and the lexer over the
store's configurations that commits a token's bytes (:func:`walk_bytes`). A mask over the store is
``store_mask.fill_host``."""
from __future__ import annotations

import numpy as np

from gcdbench.parsers.targets import borrowed

from .device import INFO_OLD, _cpu, _cpu_inline, _ctz, chart_step, chart_step_edges
from .device_search import certify
from .packing import HX_NG, HX_NLEX, unpack_grammar, unpack_tables

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
START = -1         # lexer state of a configuration at a boundary: a grammar terminal must start


# -- the CPU chart step from a node of the store (one thread; the searches run theirs in dfs) ---------------
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
    """``device.chart_step`` on the CPU (one thread) from chart node ``node`` (rows of ``nodes``; ``pathbuf``
    int64 scratch of 2 (n + 2)), then ``device_search.certify`` against that parent chart (last terminal
    ``prev_term``). Returns the INFO word."""
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


# -- a node's child, a merged boundary, the lexer over the configurations -----------------------------------
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
    if t_off >= 0:      # the search from ``node`` computed this chart already (device_search.dfs)
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
