"""The build-time sort of ``context.py`` (jitted, CPU): every job of an LR state sorted as REJECTED, ACCEPTED or
CONTEXT (decided only by the stack below the state) by runs of the DPDA step ``kernels.edge_step`` on a stack of
which only the top part is known, walking the trie of the jobs' class sequences depth first (:func:`sort_jobs`),
with subtrees shared between states (:func:`sort_jobs_shared`). The package's ``__init__`` keys numba's cache of
these by their sources, ``kernels.py`` included (``targets.stamp_cache_with``): a change to ``edge_step`` recompiles
them."""
from __future__ import annotations

import numba
import numpy as np

from gcdbench.parsers.pre3.kernels import edge_step
from gcdbench.parsers.targets import variant

REJECTED, ACCEPTED, CONTEXT = 0, 1, 2
_OK, _REJECT, _UNKNOWN = 0, -1, 3   # results of _feed_known


def _peek_known(base, b, bl, loc, ll, d):
    """``kernels.peek`` on a stack of which only ``loc[:ll]`` is known: -2 (unknown) below it."""
    if d < ll:
        return loc[ll - 1 - d]
    return -2


_edge_step_known = variant(edge_step, "cpu", _peek=variant(_peek_known, "cpu"))
_NO_BASE = np.zeros((1, 1), dtype=np.int32)   # the committed stack _peek_known never reads


@numba.njit(cache=True)
def _feed_known(D, n_sym, guard, stk, sl, a):
    """``kernels.feed`` on a stack of which only ``stk[:sl]`` is known (the same ``edge_step``, with nothing
    below the known part): (OK | REJECT | UNKNOWN, new length). UNKNOWN: the run read or popped below the known
    part, passed the end of ``stk``, reached ``$END``'s accept, or hit the guard."""
    if sl == 0:
        return _UNKNOWN, sl
    st = stk[sl - 1]
    bl = 0
    ll = sl
    for _ in range(sl + guard):
        r, st, bl, ll = _edge_step_known(D, n_sym, _NO_BASE, 0, bl, stk, ll, a, st)
        if r == 2:
            continue
        if r == 0:
            return _OK, ll
        if r == -1:
            return _REJECT, sl
        return _UNKNOWN, sl
    return _UNKNOWN, sl


def walk_scratch(max_depth: int, max_stack: int) -> tuple:
    """The arrays ``_walk`` keeps its depth-first path in (stacks, their lengths, nodes, next children), made once
    for all the states a sort visits: ``_walk`` writes every entry before it reads it."""
    return (np.empty((max_depth + 2, max_stack), dtype=np.int32), np.zeros(max_depth + 2, dtype=np.int64),
            np.zeros(max_depth + 2, dtype=np.int64), np.zeros(max_depth + 2, dtype=np.int64))


@numba.njit(cache=True)
def sort_jobs(D, n_sym, guard, s, child_ptr, child_node, child_term, rank_of_node, sub_lo, sub_hi, job_by_pre, out,
              outp, stks, lens, node, cur):
    """Sort every job for LR state ``s`` into ``out`` (REJECTED, ACCEPTED, CONTEXT), walking the trie of class
    sequences depth first from its root (node 0) on the stack ``[s]`` (``_walk``; ``rank_of_node[n]``: the
    preorder rank of the job whose sequence ends at node n, -1: none; ``job_by_pre[rank]``: that job).
    ``outp``: scratch of n_jobs entries; ``stks, lens, node, cur``: the walk's (``walk_scratch``). Returns the
    number of trie nodes visited."""
    init = np.full(1, s, dtype=np.int32)
    no_filt = np.zeros(1, dtype=np.int64)
    for x in range(outp.size):
        outp[x] = REJECTED
    visited = _walk(D, n_sym, guard, 0, init, 1, child_ptr, child_node, child_term, rank_of_node, sub_lo,
                    sub_hi, outp, no_filt, False, stks, lens, node, cur)
    for x in range(outp.size):
        out[job_by_pre[x]] = outp[x]
    return visited


# -- the same sort with shared subtrees (issue 29: Pre3's build time) ----------------------------------------
# Character-level LR states inside a string (thousands where an object's open keys are a regex of the listed
# keys' complement) walk the same ~100k trie nodes each: after the first byte they all stand on the same state.
# A subtree's sort on a stack known only as [t] is kept per (t, root child); a state whose first byte is a plain
# shift to t copies it, then walks again, on its fuller stack [s, t], only the subtrees holding CONTEXT jobs
# (more known stack decides more; a run that never read below t ends alike on both stacks).
@numba.njit(cache=True)
def _walk(D, n_sym, guard, start, init, init_len, child_ptr, child_node, child_term, rank_of_node, sub_lo, sub_hi,
          outp, filt, use_filt, stks, lens, node, cur):
    """Sort the jobs strictly below trie node ``start`` on a stack of which ``init[:init_len]`` is known, into
    ``outp`` by preorder rank (``sub_lo[n]:sub_hi[n]`` are the ranks below node n, n included). With
    ``use_filt``, a child whose ranks hold no CONTEXT (``filt``: prefix counts of CONTEXT over ranks) is left
    as it is. Returns the number of trie nodes visited."""
    for x in range(init_len):
        stks[0, x] = init[x]
    lens[0] = init_len
    node[0] = start
    cur[0] = child_ptr[start]
    depth = 0
    visited = 0
    max_depth = stks.shape[0] - 2
    while depth >= 0:
        nd = node[depth]
        c = cur[depth]
        if c >= child_ptr[nd + 1]:
            depth -= 1
            continue
        cur[depth] = c + 1
        ch = child_node[c]
        if use_filt and filt[sub_hi[ch]] == filt[sub_lo[ch]]:
            continue
        visited += 1
        sl = lens[depth]
        if depth + 1 > max_depth:
            r = _UNKNOWN
        else:
            for x in range(sl):
                stks[depth + 1, x] = stks[depth, x]
            r, sl = _feed_known(D, n_sym, guard, stks[depth + 1], sl, child_term[c])
        if r == _OK:
            k = rank_of_node[ch]
            if k >= 0:
                outp[k] = ACCEPTED
            lens[depth + 1] = sl
            node[depth + 1] = ch
            cur[depth + 1] = child_ptr[ch]
            depth += 1
        else:
            v = CONTEXT if r == _UNKNOWN else REJECTED
            for x in range(sub_lo[ch], sub_hi[ch]):
                outp[x] = v
    return visited


@numba.njit(cache=True)
def sort_jobs_shared(D, n_sym, guard, s, child_ptr, child_node, child_term, rank_of_node, sub_lo, sub_hi,
                     job_by_pre, out, memo_off, buf, used, outp, filt, stks, lens, node, cur):
    """``sort_jobs`` for state ``s`` with the subtrees of the root's children shared through ``memo_off[t, i]``
    (offset in ``buf`` of child i's ranks sorted on ``[t]``, -1: not yet) while ``buf`` has room; ``used[0]``:
    its filled part. ``outp``, ``filt``: scratch of n_jobs and n_jobs + 1 entries; ``stks, lens, node, cur``: the
    walk's (``walk_scratch``). Returns nodes visited."""
    max_stack = stks.shape[1]
    first = np.empty(max_stack, dtype=np.int32)
    init = np.empty(2, dtype=np.int32)
    for x in range(outp.size):
        outp[x] = REJECTED
    visited = 0
    c0 = child_ptr[0]
    for c in range(c0, child_ptr[1]):
        ch = child_node[c]
        lo = sub_lo[ch]
        hi = sub_hi[ch]
        visited += 1
        first[0] = s
        r, sl = _feed_known(D, n_sym, guard, first, 1, child_term[c])
        if r == _REJECT:
            continue
        if r != _OK:
            for x in range(lo, hi):
                outp[x] = CONTEXT
            continue
        k = rank_of_node[ch]
        if k >= 0:
            outp[k] = ACCEPTED
        if not (sl == 2 and first[0] == s):      # not a plain shift: walk on the known stack
            visited += _walk(D, n_sym, guard, ch, first, sl, child_ptr, child_node, child_term,
                             rank_of_node, sub_lo, sub_hi, outp, filt, False, stks, lens, node, cur)
            continue
        t = first[1]
        i = c - c0
        off = memo_off[t, i]
        if off < 0:
            init[0] = t
            visited += _walk(D, n_sym, guard, ch, init, 1, child_ptr, child_node, child_term,
                             rank_of_node, sub_lo, sub_hi, outp, filt, False, stks, lens, node, cur)
            if used[0] + hi - lo <= buf.size:
                memo_off[t, i] = used[0]
                for x in range(lo, hi):
                    buf[used[0] + x - lo] = outp[x]
                used[0] += hi - lo
        else:
            for x in range(lo, hi):
                outp[x] = buf[off + x - lo]
        n_ctx = 0
        filt[lo] = 0
        for x in range(lo, hi):
            if outp[x] == CONTEXT:
                n_ctx += 1
            filt[x + 1] = n_ctx
        if n_ctx:
            init[0] = s
            init[1] = t
            visited += _walk(D, n_sym, guard, ch, init, 2, child_ptr, child_node, child_term,
                             rank_of_node, sub_lo, sub_hi, outp, filt, True, stks, lens, node, cur)
    for x in range(outp.size):
        out[job_by_pre[x]] = outp[x]
    return visited
