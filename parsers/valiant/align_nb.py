"""The tuple precomputation of align.py, compiled with numba (same output up to trie node numbering).

Per token: the boundary walk of the whole token (-> ``bnd``), and all residual classes of lexer states at once
(each from its first state; align.py) read the token byte by byte (only the live ones are kept): where one is
final before the token's end, the rest of the token is walked from a boundary (-> ``cont``); the classes alive at
the end give ``cont_all``. A walk that holds more than ``cap`` states after some byte is done again on a lattice
of boundaries (:func:`_mwalk`, align.py's "merged boundaries"). The trie of terminal sequences is numba typed
containers: ``(parent, terminal) -> node``, a merged node hashed by (parent, sorted edge codes ``row * (T + 1) +
terminal``), and per node its edge range.
"""
from __future__ import annotations

import numpy as np
from numba import types
from numba.typed import Dict, List

from ..targets import callee_jit
from .align import Alignment, class_reps

_jit = callee_jit(cache=True)   # one compile per plain signature, whatever constants a caller passes

#: a walk holding more than this many (trie node, DFA state, flag) triples after some byte is done again as a
#: merged walk (align.py, "merged boundaries"); the engine option ``token_states``
MAX_STATES = 256


@_jit
def _can_follow(tr, node, t, n_term, follow):
    """:meth:`align._Trie.can_follow`."""
    term, m_lo, m_hi, m_code = tr[3], tr[5], tr[6], tr[7]
    if node == 0:
        return True
    last = term[node]
    if last >= 0:
        return follow[last, t]
    for i in range(m_lo[node], m_hi[node]):
        if follow[m_code[i] % (n_term + 1), t]:
            return True
    return False


@_jit
def _new(tr, node, t):
    parent, term, depth, m_lo, m_hi, m_code = tr[2], tr[3], tr[4], tr[5], tr[6], tr[7]
    c = np.int64(len(parent))
    parent.append(node)
    term.append(t)
    depth.append(depth[node] + 1)
    m_lo.append(len(m_code))
    m_hi.append(len(m_code))
    return c


@_jit
def _child(tr, node, t, n_term, follow):
    kids = tr[0]
    key = np.int64(node) * (n_term + 1) + t
    if key in kids:
        return kids[key]
    if not _can_follow(tr, node, t, n_term, follow):
        return -1
    c = _new(tr, node, t)
    kids[key] = c
    return c


@_jit
def _merged(tr, tip, codes, n_term, follow):
    """:meth:`align._Trie.merged` for the sorted, distinct edge codes ``codes``."""
    mkids, parent, m_lo, m_hi, m_code = tr[1], tr[2], tr[5], tr[6], tr[7]
    nc = codes.size
    if nc == 1 and codes[0] <= n_term:          # one piece, begun at ``tip``
        return _child(tr, tip, codes[0], n_term, follow)
    h = np.int64(tip) * np.int64(-7046029254386353131)
    for i in range(nc):
        h = (h ^ codes[i]) * np.int64(1099511628211)
    while h in mkids:                           # open addressing on the hash
        c = mkids[h]
        if parent[c] == tip and m_hi[c] - m_lo[c] == nc:
            same = True
            for i in range(nc):
                if m_code[m_lo[c] + i] != codes[i]:
                    same = False
                    break
            if same:
                return c
        h += 1
    c = _new(tr, tip, -1)
    m_lo[c] = len(m_code)
    for i in range(nc):
        m_code.append(codes[i])
    m_hi[c] = len(m_code)
    mkids[h] = c
    return c


@_jit
def _add(buf, nb, key):
    """Append ``key`` to ``buf[:nb]`` unless present; returns the new count."""
    for j in range(nb):
        if buf[j] == key:
            return nb
    buf[nb] = key
    return nb + 1


@_jit
def _walk(data, lo, hi, trans, accept, st_start, st_u, st_g, ng, n_term, follow, tr, out_node, out_flag, buf_a, buf_b,
          cap):
    """Boundary walk of data[lo:hi]; writes distinct (node, first_ignored) pairs, returns their count, or -1 when
    more than ``cap`` states are alive after some byte (the trie nodes of that byte are made all the same, as
    :meth:`align.Aligner.boundary` does). ``buf_a``, ``buf_b`` hold ``(cap + s) * (1 + s)`` states, ``s`` the most
    terminals a byte starts."""
    # a state is packed as (node << 21) | (g << 1) | flag in int64
    na = 0
    b0 = data[lo]
    for k in range(st_start[b0], st_start[b0 + 1]):
        u = st_u[k]
        g = st_g[k]
        if u >= ng:
            key = (np.int64(0) << 21) | (np.int64(g) << 1) | 1
        else:
            c = _child(tr, 0, u, n_term, follow)
            if c < 0:
                continue
            key = (np.int64(c) << 21) | (np.int64(g) << 1)
        buf_a[na] = key
        na += 1
    if na > cap:
        return -1
    for pos in range(lo + 1, hi):
        b = data[pos]
        nb = 0
        for i in range(na):
            key = buf_a[i]
            node = key >> 21
            g = (key >> 1) & 0xFFFFF
            f = key & 1
            g2 = trans[g, b]
            if g2 >= 0:
                nb = _add(buf_b, nb, (node << 21) | (np.int64(g2) << 1) | f)
            if accept[g]:
                for k in range(st_start[b], st_start[b + 1]):
                    u = st_u[k]
                    if u >= ng:
                        c = node
                    else:
                        c = _child(tr, node, u, n_term, follow)
                        if c < 0:
                            continue
                    nb = _add(buf_b, nb, (np.int64(c) << 21) | (np.int64(st_g[k]) << 1) | f)
        for i in range(nb):
            buf_a[i] = buf_b[i]
        na = nb
        if na == 0:
            break
        if na > cap:
            return -1
    n_out = 0
    for i in range(na):
        node = buf_a[i] >> 21
        f = buf_a[i] & 1
        dup = False
        for j in range(n_out):
            if out_node[j] == node and out_flag[j] == f:
                dup = True
                break
        if not dup:
            out_node[n_out] = node
            out_flag[n_out] = f
            n_out += 1
    return n_out


@_jit
def _may_start(u, ng, et, ne, follow):
    """May terminal ``u`` start at a boundary where the grammar terminals ``et[:ne]`` end?"""
    if u >= ng:
        return True
    for e in range(ne):
        if follow[et[e], u]:
            return True
    return False


@_jit
def _mwalk(data, lo, hi, first_ignored, trans, accept, term_of, st_start, st_u, st_g, ng, n_term, follow, tr,
           out_node, out_flag, n_out, ws, stamp):
    """:meth:`align.Aligner.merged_walk` of data[lo:hi], appending its distinct tuple nodes to ``out_node`` (flag
    ``first_ignored``) after ``n_out``; returns (new count, new stamp). ``ws`` = (seen, chain, pk, pg, qk, qg, ek, et,
    codes): ``seen`` int64 of (length + 1) * states, stamped per byte (``stamp`` only grows), the rest as big."""
    seen, chain, pk, pg, qk, qg, ek, et, codes = ws
    depth = tr[4]
    G = trans.shape[0]
    W = n_term + 1
    nc = 1
    chain[0] = 0
    na = 0
    stamp += 1
    b0 = data[lo]
    for s in range(st_start[b0], st_start[b0 + 1]):
        if (st_u[s] >= ng) != first_ignored:
            continue
        g = st_g[s]
        if seen[g] != stamp:
            seen[g] = stamp
            pk[na] = 0
            pg[na] = g
            na += 1
    for pos in range(lo + 1, hi):
        b = data[pos]
        stamp += 1
        nb = 0
        ne = 0
        for i in range(na):
            k = pk[i]
            g = pg[i]
            g2 = trans[g, b]
            if g2 >= 0 and seen[k * G + g2] != stamp:
                seen[k * G + g2] = stamp
                qk[nb] = k
                qg[nb] = g2
                nb += 1
            if accept[g]:
                u = term_of[g]
                if u < ng:
                    ek[ne] = k
                    et[ne] = u
                    ne += 1
                else:           # an ignored piece ends: pieces start where it began
                    for s in range(st_start[b], st_start[b + 1]):
                        if st_u[s] >= ng or _can_follow(tr, chain[k], st_u[s], n_term, follow):
                            g2 = st_g[s]
                            if seen[k * G + g2] != stamp:
                                seen[k * G + g2] = stamp
                                qk[nb] = k
                                qg[nb] = g2
                                nb += 1
        if ne > 0:
            starts = False
            for s in range(st_start[b], st_start[b + 1]):
                if _may_start(st_u[s], ng, et, ne, follow):
                    starts = True
                    break
            if starts:
                tip = chain[nc - 1]
                for e in range(ne):
                    codes[e] = (depth[tip] - depth[chain[ek[e]]]) * W + et[e]
                cs = np.unique(codes[:ne])
                kn = nc
                chain[kn] = _merged(tr, tip, cs, n_term, follow)
                nc += 1
                for s in range(st_start[b], st_start[b + 1]):
                    if _may_start(st_u[s], ng, et, ne, follow):
                        g2 = st_g[s]
                        if seen[kn * G + g2] != stamp:
                            seen[kn * G + g2] = stamp
                            qk[nb] = kn
                            qg[nb] = g2
                            nb += 1
        pk, qk = qk, pk
        pg, qg = qg, pg
        na = nb
        if na == 0:
            break
    n0 = n_out
    for i in range(na):
        k = pk[i]
        u = term_of[pg[i]]
        v = chain[k] if u >= ng else _child(tr, chain[k], u, n_term, follow)
        if v < 0:
            continue
        dup = False
        for j in range(n0, n_out):
            if out_node[j] == v:
                dup = True
                break
        if not dup:
            out_node[n_out] = v
            out_flag[n_out] = 1 if first_ignored else 0
            n_out += 1
    return n_out, stamp


@_jit
def _any_walk(data, lo, hi, trans, accept, term_of, st_start, st_u, st_g, ng, n_term, follow, tr, out_node, out_flag,
              buf_a, buf_b, cap, ws, stamp):
    """The tuples of the boundary walk of data[lo:hi] (:meth:`align.Aligner.boundary`): the walk of terminal
    sequences, or both merged walks where it passes ``cap``. Returns (count, stamp)."""
    k = _walk(data, lo, hi, trans, accept, st_start, st_u, st_g, ng, n_term, follow, tr, out_node, out_flag, buf_a,
              buf_b, cap)
    if k >= 0:
        return k, stamp
    k, stamp = _mwalk(data, lo, hi, False, trans, accept, term_of, st_start, st_u, st_g, ng, n_term, follow, tr,
                      out_node, out_flag, 0, ws, stamp)
    return _mwalk(data, lo, hi, True, trans, accept, term_of, st_start, st_u, st_g, ng, n_term, follow, tr, out_node,
                  out_flag, k, ws, stamp)


@_jit
def _build(data, offs, ids, trans, accept, term_of, st_start, st_u, st_g, ng, n_term, follow, cap, reps):
    G = trans.shape[0]
    tr = (Dict.empty(key_type=types.int64, value_type=types.int64),
          Dict.empty(key_type=types.int64, value_type=types.int64),
          List.empty_list(types.int64), List.empty_list(types.int64), List.empty_list(types.int64),
          List.empty_list(types.int64), List.empty_list(types.int64), List.empty_list(types.int64))
    parent, term, depth, m_lo, m_hi = tr[2], tr[3], tr[4], tr[5], tr[6]
    parent.append(-1)
    term.append(-1)
    depth.append(0)
    m_lo.append(0)
    m_hi.append(0)
    bnd_f = List.empty_list(types.int64)
    bnd_n = List.empty_list(types.int64)
    bnd_t = List.empty_list(types.int64)
    call_x = List.empty_list(types.int64)
    call_t = List.empty_list(types.int64)
    cont_x = List.empty_list(types.int64)
    cont_n = List.empty_list(types.int64)
    cont_t = List.empty_list(types.int64)
    smax = 0
    for b in range(256):
        smax = max(smax, st_start[b + 1] - st_start[b])
    maxlen = 1
    for ti in range(ids.size):
        maxlen = max(maxlen, offs[ti + 1] - offs[ti])
    states = (maxlen + 1) * max(G, 1)
    room = max((cap + smax) * (1 + smax), 2 * states)
    out_node = np.empty(room, np.int64)
    out_flag = np.empty(room, np.int64)
    buf_a = np.empty(room, np.int64)
    buf_b = np.empty(room, np.int64)
    ws = (np.zeros(states, np.int64), np.empty(maxlen + 1, np.int64), np.empty(states, np.int64),
          np.empty(states, np.int64), np.empty(states, np.int64), np.empty(states, np.int64),
          np.empty(states, np.int64), np.empty(states, np.int64), np.empty(states, np.int64))
    stamp = np.int64(0)
    xs = np.empty(reps.size, np.int64)
    cur = np.empty(reps.size, np.int64)
    for ti in range(ids.size):
        tok = ids[ti]
        lo = offs[ti]
        hi = offs[ti + 1]
        k, stamp = _any_walk(data, lo, hi, trans, accept, term_of, st_start, st_u, st_g, ng, n_term, follow, tr,
                             out_node, out_flag, buf_a, buf_b, cap, ws, stamp)
        for i in range(k):
            bnd_f.append(out_flag[i])
            bnd_n.append(out_node[i])
            bnd_t.append(tok)
        # every residual class at once (from its first state)
        na = 0
        b0 = data[lo]
        for x in range(reps.size):
            g = trans[reps[x], b0]
            if g >= 0:
                xs[na] = x
                cur[na] = g
                na += 1
        pos = lo + 1
        while na > 0 and pos < hi:
            # close after data[lo:pos] for the states that are final here
            any_final = False
            for i in range(na):
                if accept[cur[i]]:
                    any_final = True
                    break
            if any_final:
                k, stamp = _any_walk(data, pos, hi, trans, accept, term_of, st_start, st_u, st_g, ng, n_term, follow,
                                     tr, out_node, out_flag, buf_a, buf_b, cap, ws, stamp)
                for i in range(na):
                    if accept[cur[i]]:
                        for j in range(k):
                            cont_x.append(xs[i])
                            cont_n.append(out_node[j])
                            cont_t.append(tok)
            b = data[pos]
            nn = 0
            for i in range(na):
                g = trans[cur[i], b]
                if g >= 0:
                    xs[nn] = xs[i]
                    cur[nn] = g
                    nn += 1
            na = nn
            pos += 1
        for i in range(na):
            call_x.append(xs[i])
            call_t.append(tok)
    return (_to_arr(parent), _to_arr(term), _to_arr(depth), _to_arr(bnd_f), _to_arr(bnd_n), _to_arr(bnd_t),
            _to_arr(call_x), _to_arr(call_t), _to_arr(cont_x), _to_arr(cont_n), _to_arr(cont_t), _to_arr(m_lo),
            _to_arr(m_hi), _to_arr(tr[7]))


@_jit
def _to_arr(lst):
    out = np.empty(len(lst), np.int64)
    for i in range(len(lst)):
        out[i] = lst[i]
    return out


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """np.unique without its hash path (much slower on millions of int64 here)."""
    a = np.sort(a, kind="stable")
    if a.size:
        a = a[np.concatenate(([True], a[1:] != a[:-1]))]
    return a


def _arr(lst):
    return np.asarray(lst, dtype=np.int64) if len(lst) else np.zeros(0, np.int64)


def build_alignment(lex, follow: np.ndarray, token_bytes: list[bytes], eos_id: int,
                    max_states: int = MAX_STATES) -> Alignment:
    ids = np.array([i for i, b in enumerate(token_bytes) if b and i != eos_id], dtype=np.int64)
    lens = np.array([len(token_bytes[i]) for i in ids], dtype=np.int64)
    offs = np.zeros(ids.size + 1, dtype=np.int64)
    offs[1:] = np.cumsum(lens)
    data = np.frombuffer(b"".join(token_bytes[i] for i in ids), dtype=np.uint8)
    G = lex.n_states
    if G >= (1 << 20):
        raise ValueError("too many lexer states")
    # byte -> (lexer terminal, state after that first byte)
    su, sg, cnt = [], [], np.zeros(257, np.int64)
    for b in range(256):
        for u, s0 in enumerate(lex.start_of.tolist()):
            if s0 >= 0 and lex.trans[s0, b] >= 0:
                su.append(int(lex.term_of[s0]))     # a piece is named by its terminal's class (compiled.terminal_classes)
                sg.append(int(lex.trans[s0, b]))
                cnt[b + 1] += 1
    st_start = np.cumsum(cnt)
    n_term = int(follow.shape[0])
    reps = class_reps(lex.x_class)
    C = reps.size
    res = _build(data, offs, ids, lex.trans.astype(np.int64), lex.accept, lex.term_of.astype(np.int64), st_start,
                 _arr(su), _arr(sg), int(lex.n_grammar), n_term, follow, int(max_states), reps)
    parent, term, depth, bf, bn, bt, cx, ct, kx, kn, kt, m_lo, m_hi, m_code = [np.asarray(r, dtype=np.int64)
                                                                               for r in res]
    n = parent.size
    order = np.lexsort((term[1:], parent[1:])) + 1
    child_start = np.zeros(n + 1, dtype=np.int64)
    np.add.at(child_start, parent[1:] + 1, 1)
    child_start = np.cumsum(child_start).astype(np.int32)
    # bnd: node -> sorted distinct tokens, per flag
    bnd_start = np.zeros((2, n + 1), dtype=np.int64)
    bnd_tok = []
    for f in range(2):
        sel = bf == f
        key = _sorted_unique(bn[sel] * (len(token_bytes) + 1) + bt[sel])
        nodes, toks = key // (len(token_bytes) + 1), key % (len(token_bytes) + 1)
        c = np.bincount(nodes, minlength=n)
        bnd_start[f, 1:] = np.cumsum(c)
        bnd_tok.append(toks.astype(np.int32))
    V = len(token_bytes) + 1
    key = _sorted_unique(cx * V + ct)
    call_start = np.zeros(C + 1, dtype=np.int64)
    call_start[1:] = np.cumsum(np.bincount(key // V, minlength=C))
    call_tok = (key % V).astype(np.int32)
    key = _sorted_unique((kx * n + kn) * V + kt)
    grp, toks = key // V, key % V
    first = np.concatenate(([True], grp[1:] != grp[:-1])) if grp.size else np.zeros(0, bool)
    gstart = np.flatnonzero(first)
    gkeys = grp[gstart]
    cont_nodes = (gkeys % n).astype(np.int32)
    cont_nstart = np.append(gstart, grp.size).astype(np.int64)
    cont_xstart = np.zeros(C + 1, dtype=np.int64)
    cont_xstart[1:] = np.cumsum(np.bincount(gkeys // n, minlength=C))
    lens = m_hi - m_lo
    merge_start = np.zeros(n + 1, dtype=np.int64)
    merge_start[1:] = np.cumsum(lens)
    codes = m_code[np.repeat(m_lo, lens) + np.arange(int(lens.sum())) - np.repeat(merge_start[:-1], lens)]
    return Alignment(
        parent.astype(np.int32), term.astype(np.int32), depth.astype(np.int32), child_start,
        order.astype(np.int32), bnd_start, bnd_tok, call_start, call_tok, cont_xstart, cont_nodes, cont_nstart,
        toks.astype(np.int32), merge_start, (codes // (n_term + 1)).astype(np.int32),
        (codes % (n_term + 1)).astype(np.int32), lex.x_class.astype(np.int32),
    )


@_jit
def _dominated_bnd(par, flag, node, tok, mark0, mark1):
    """keep[i] for tuples (flag, node, tok) sorted by token: see :func:`align.prune_dominated`."""
    m = tok.size
    keep = np.ones(m, np.bool_)
    lo = 0
    while lo < m:
        hi = lo + 1
        while hi < m and tok[hi] == tok[lo]:
            hi += 1
        if hi - lo > 1:
            for i in range(lo, hi):
                if flag[i] == 0:
                    mark0[node[i]] = 1
                else:
                    mark1[node[i]] = 1
            for i in range(lo, hi):
                v = node[i]
                if flag[i] == 1 and mark0[v]:
                    keep[i] = False
                    continue
                u = par[v]
                while u > 0:
                    if mark0[u] or (flag[i] == 1 and mark1[u]):
                        keep[i] = False
                        break
                    u = par[u]
            for i in range(lo, hi):
                mark0[node[i]] = 0
                mark1[node[i]] = 0
        lo = hi
    return keep


@_jit
def _dominated_cont(par, xs, node, tok, call_start, call_tok, mark, tokmark):
    """keep[i] for cont tuples (x, node, tok) sorted by (x, tok): see :func:`align.prune_dominated`."""
    m = tok.size
    keep = np.ones(m, np.bool_)
    cur_x = -1
    lo = 0
    while lo < m:
        x = xs[lo]
        if x != cur_x:
            if cur_x >= 0:
                for j in range(call_start[cur_x], call_start[cur_x + 1]):
                    tokmark[call_tok[j]] = 0
            for j in range(call_start[x], call_start[x + 1]):
                tokmark[call_tok[j]] = 1
            cur_x = x
        hi = lo + 1
        while hi < m and tok[hi] == tok[lo] and xs[hi] == x:
            hi += 1
        if tokmark[tok[lo]]:
            for i in range(lo, hi):
                keep[i] = False
        elif hi - lo > 1:
            for i in range(lo, hi):
                mark[node[i]] = 1
            for i in range(lo, hi):
                u = par[node[i]]
                while u > 0:
                    if mark[u]:
                        keep[i] = False
                        break
                    u = par[u]
            for i in range(lo, hi):
                mark[node[i]] = 0
        lo = hi
    if cur_x >= 0:
        for j in range(call_start[cur_x], call_start[cur_x + 1]):
            tokmark[call_tok[j]] = 0
    return keep


def prune_dominated(al: Alignment) -> Alignment:
    """:func:`align.prune_dominated` with numba (what ``compile`` uses; tested equal to the readable one)."""
    n = al.n_nodes
    par = al.node_parent.astype(np.int64)
    V = int(max([al.bnd_tok[0].max(initial=-1), al.bnd_tok[1].max(initial=-1), al.call_tok.max(initial=-1),
                 al.cont_tok.max(initial=-1)])) + 1
    # boundary lists, both flags at once, ordered by token
    flag = np.concatenate([np.zeros(al.bnd_tok[0].size, np.int64), np.ones(al.bnd_tok[1].size, np.int64)])
    node = np.concatenate([np.repeat(np.arange(n, dtype=np.int64), np.diff(al.bnd_start[f])) for f in range(2)])
    tok = np.concatenate([al.bnd_tok[0], al.bnd_tok[1]]).astype(np.int64)
    order = np.argsort(tok, kind="stable")
    keep = np.empty(tok.size, np.bool_)
    keep[order] = _dominated_bnd(par, flag[order], node[order], tok[order], np.zeros(n, np.uint8), np.zeros(n, np.uint8))
    bnd_start = np.zeros((2, n + 1), dtype=np.int64)
    bnd_tok = []
    for f in range(2):
        sel = keep & (flag == f)       # still ordered by (node, token) within the flag
        bnd_start[f, 1:] = np.cumsum(np.bincount(node[sel], minlength=n))
        bnd_tok.append(tok[sel].astype(np.int32))
    # continuation groups, ordered by (x, token)
    G = al.call_start.size - 1
    gx = np.repeat(np.arange(G, dtype=np.int64), np.diff(al.cont_xstart))
    glen = np.diff(al.cont_nstart)
    xs = np.repeat(gx, glen)
    cnode = np.repeat(al.cont_nodes.astype(np.int64), glen)
    ctok = al.cont_tok.astype(np.int64)
    order = np.lexsort((ctok, xs))
    keep = np.empty(ctok.size, np.bool_)
    keep[order] = _dominated_cont(par, xs[order], cnode[order], ctok[order], al.call_start, al.call_tok,
                                  np.zeros(n, np.uint8), np.zeros(max(V, 1), np.uint8))
    xs, cnode, ctok = xs[keep], cnode[keep], ctok[keep]     # still ordered by (x, node, token)
    grp = xs * n + cnode
    first = np.concatenate(([True], grp[1:] != grp[:-1])) if grp.size else np.zeros(0, bool)
    gstart = np.flatnonzero(first)
    cont_xstart = np.zeros(G + 1, dtype=np.int64)
    cont_xstart[1:] = np.cumsum(np.bincount(xs[gstart], minlength=G))
    return Alignment(
        al.node_parent, al.node_term, al.node_depth, al.child_start, al.child_ids, bnd_start, bnd_tok, al.call_start,
        al.call_tok, cont_xstart, cnode[gstart].astype(np.int32), np.append(gstart, grp.size).astype(np.int64),
        ctok.astype(np.int32), al.merge_start, al.merge_row, al.merge_term, al.x_class)
