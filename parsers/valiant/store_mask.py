"""One thread's whole mask over a chart store in one jitted call (issue 29; what the engine did in Python between
the jitted calls): the mask's bases from the store's lexer configurations (:func:`_plan`), the memo of their
first-phase searches (:func:`_memo_find`, :func:`_memo_add`), and :func:`fill_host`, which runs each base's
first phase (``cpu_mask.mask_virtual`` or ``cpu_mask.mask_base``) and then the second phases."""
from __future__ import annotations

import numpy as np

from gcdbench.parsers.targets import borrowed

from .cpu_mask import _mask_ends, fill_cached, mask_base, mask_virtual, work_words
from .device import _cpu, _cpu_inline
from .packing import HX_CANY, HX_CB0, HX_CB1, HX_D, HX_K, HX_NG, HX_NULLABLE, unpack_grammar, unpack_tables
from .store_kernels import (H_KEPT, H_MEMO, H_MEMO_HITS, H_MEMO_N, H_NCFG, H_NODES, H_USED, NC_DEPTH,
                            NC_KEPT, NC_MEMO, NC_P, NC_TERM, R_DEPTH, R_KEPT, R_MEM, START, _accepts, _child, _kid,
                            _merged, _need, _node_words, _scratch_words)

MEMO_MAX = 64      # viable-node sets kept per store (then all are dropped)

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


@_cpu_inline
def _plan_one(mem, nodes, hdr, kept, scr, c, x, lazy, nullable, ng, A, G):
    """:func:`_plan` of one configuration ``(c, x)`` (most prefixes), without its sorting and grouping: the same
    row, classes and sentence flag."""
    rows = np.empty((1, 6), np.int64)
    xs = np.empty(1, np.int32)
    rows[0, P_NODE], rows[0, P_C], rows[0, P_T], rows[0, P_FLAGS], rows[0, P_X0], rows[0, P_X1] = c, c, -1, 0, 0, 0
    if x == START:
        rows[0, P_FLAGS] = 1
        return rows, xs[:0], nullable, True
    xs[0] = A.x_class[x]
    rows[0, P_X1] = 1
    fin = A.lx_accept[x] != 0
    if fin:
        rows[0, P_FLAGS] = 3
    if A.lx_term[x] >= ng:      # an ignored piece: its boundary is where it began
        return rows, xs, fin and (_accepts(mem, nodes, c, G) or (c == 0 and nullable)), True
    t = np.int64(A.lx_term[x])
    node = _kid(nodes, c, t)
    if node < 0 and not (lazy and not fin):
        node = _child(mem, nodes, hdr, kept, scr, c, t, A.root_child, G)
        if node < 0:
            return rows[:0], xs[:0], False, False
    rows[0, P_NODE], rows[0, P_T] = node, t
    return rows, xs, fin and node >= 0 and _accepts(mem, nodes, node, G), True


@_cpu
def _plan(mem, nodes, hdr, kept, medge, scr, cur, lazy, A, G):
    """A mask's bases from the configurations ``cur`` in one pass: (rows [nb, 6] (:data:`P_NODE` ...), ``xs`` the
    residual classes (``A.x_class``) of each base's lexer states, distinct, ascending, whether the prefix is a
    sentence, ok). The base of a lexer state ``x`` of a grammar terminal ``t`` is the boundary where its piece would
    end: ``c + t`` for its one configuration ``(c, x)``, or the merged boundary of all of them (a child of the
    deepest node of ``cur``). A configuration at a boundary (:data:`START`) or inside an ignored piece has its own
    node as base. With ``lazy``, a base ``c + t`` that is not made yet and that only non-final lexer states need
    stays unmade (row node -1): a mask may not need its chart (``cpu_mask.mask_virtual``). Not ok: out of room."""
    H = A.host
    ng, nullable = H[HX_NG], H[HX_NULLABLE] != 0
    m = cur.shape[0]
    if m == 1:
        return _plan_one(mem, nodes, hdr, kept, scr, cur[0, 0], cur[0, 1], lazy, nullable, ng, A, G)
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
    (:func:`_plan`, lazily), then per base its first phase (``cpu_mask.mask_virtual`` for an unmade ``c + t``, else the
    memoised viable nodes or a search whose root-child charts are kept for the store to adopt, ``cpu_mask.mask_base``),
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
            if scr.size < G.WN + G.WT:     # the certificate's words (a store whose scratch was cut short)
                return _need(hdr, R_DEPTH, nodes[rows[i, P_C], NC_DEPTH] + 1)
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
            fill_cached(out, memo[o + 4 + xa.size:o + 4 + xa.size + nv], nv, fl2[N:], b0, b1, xa, A, dense,
                        ac_rows, ac_keys, tot, i == 0)
            _mask_ends(out, False, e, acc)
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
