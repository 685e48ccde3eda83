"""Device logic written once, the search half: the idem certificate of a chart (:func:`certify`), the viability of
a merged boundary and of a node's leaf children without its chart, and the depth-first walk of the terminal trie
(:func:`dfs`) that calls the chart step of ``device.py``. :func:`for_cuda` compiles every shared function of both
modules (:data:`SHARED`) as CUDA device functions with the target primitives rebound (``device.py`` explains the
primitives and the step)."""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from gcdbench.parsers.targets import rebind

from .device import (IDEM_SHIFT, INFO_OLD, MAX_IDEM_PAIRS, ST_ALIASED, ST_CERTIFIED, ST_CHECKED, ST_STEPS, ST_VIABLE,
                     _close_row, _count_full, _cpu, _ctz, _emit, _next_turn, _nth, _or_track, _step_core, _sync, _tid,
                     chart_step, chart_step_edges, step_epilogue)


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
    ``a`` closes on its own, ``first_term(X)`` for ``Z`` in ANC, ``Z -> A X``, ``A -> a`` (row 0 of the tier C + a
    would compute; the full step adds only more). Then the step for ``v`` decides nothing. ``cur`` (WT words) is
    scratch (``seeds`` is not used); the threads share the words and end past a ``_sync`` with the same answer."""
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
def _some_expected(mem, p_offs, m, lo, hi, rows, terms, WN):
    """Is some piece ``i`` in ``lo:hi`` expected where it begins: ``terms[i]`` in EXPECT of the position ``rows[i]``
    before ``m`` (ANC offsets ``p_offs``)?"""
    one = np.uint64(1)
    for i in range(lo, hi):
        a = np.int64(terms[i])
        if (mem[p_offs[m - rows[i]] + WN + (a >> 6)] >> np.uint64(a & 63)) & one:
            return True
    return False


@_cpu
def edges_viable(mem, p_offs, m, v, T, WN):
    """Is merged boundary ``v`` viable, its parent's chart ending at position ``m`` (ANC offsets ``p_offs``): is some
    edge's terminal in EXPECT of the position the edge starts at (``row`` positions before ``m``)?"""
    return _some_expected(mem, p_offs, m, T.merge_start[v], T.merge_start[v + 1], T.merge_row, T.merge_term, WN)


@_cpu
def spans_viable(mem, p_offs, m, v, T, WN):
    """May node ``v`` (its parent's chart ending at position ``m``), not viable itself, have a viable node below:
    is some piece of a merged boundary below that spans it (``align.span_edges``) expected where it begins?"""
    return _some_expected(mem, p_offs, m, T.span_start[v], T.span_start[v + 1], T.span_row, T.span_term, WN)


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
        kids = T.child_start[v + 1] > T.child_start[v]
        if a >= 0:
            ok = ((mem[ex + (a >> 6)] >> np.uint64(a & 63)) & one) != 0
        else:
            ok = edges_viable(mem, p_offs, m, v, T, WN)
        # a node that is not viable whose subtree holds a merged boundary with a piece spanning it (bit 2 of
        # no_alias: align.alias_blocked) gets its chart (no cell of its own) and its subtree walked, unemitted,
        # when such a piece is expected where it begins (above v)
        walk = ok or (kids and (T.no_alias[v] & 2) != 0 and spans_viable(mem, p_offs, m, v, T, WN))
        if walk:
            if ok:
                _emit(viable, cnt, v)
                cnt += 1
                if tid == 0:
                    stats[ST_VIABLE] += 1
            if kids:
                x_info = np.int64(mem[ex + WT])
                if ok and a >= 0 and T.no_alias[v] == 0 and (x_info >> IDEM_SHIFT) == a + 1:
                    # C_x + a is equivalent to C_x: v's subtree is searched from x's chart
                    if tid == 0:
                        stats[ST_ALIASED] += 1
                    d += 1
                    stack_node[d] = v
                    stack_ci[d] = T.child_start[v]
                    e_offs[d] = ex
                    lv_n[d] = m
                    continue
                if ok and a >= 0 and _row0_certifies(mem, ex - WN, a, v, needed, cur, seeds, T, G):
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


# Shared functions of device.py and this module in dependency order: what for_cuda compiles, each seeing the CUDA
# versions of the others.
SHARED = (_next_turn, _or_track, _close_row, _count_full, step_epilogue, _step_core, chart_step, chart_step_edges,
          _has_self_item, _in_first_of_rights, certify, _row0_certifies, _some_expected, edges_viable, spans_viable,
          dfs)


def for_cuda(primitives: dict) -> dict:
    """CUDA device-function versions of the shared functions (name -> device function), compiled from the
    same Python code with the target primitives rebound to ``primitives`` (``_or_word``, ``_or_old``,
    ``_sync``, ``_ctz``, ``_emit``, ``_tid``, ``_nth``: CUDA device functions). Each function's globals are those
    of its own module (device.py or this one) with every primitive and every shared function compiled so far
    rebound; a shared function that would still call a CPU-compiled function is refused."""
    import dis

    from numba import cuda
    from numba.core.registry import CPUDispatcher

    ns = dict(primitives)
    for disp in SHARED:
        fn = disp.py_func
        cpu = sorted({ins.argval for ins in dis.get_instructions(fn) if ins.opname == "LOAD_GLOBAL"
                      and ins.argval not in ns and isinstance(fn.__globals__.get(ins.argval), CPUDispatcher)})
        if cpu:
            raise TypeError(f"for_cuda: {fn.__name__} calls {', '.join(cpu)}, compiled for the CPU only: list it in "
                            f"SHARED before {fn.__name__}, or pass its CUDA version in primitives")
        ns[fn.__name__] = cuda.jit(device=True)(rebind(fn, ns, "_cuda"))
    return ns
