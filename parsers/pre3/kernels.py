"""The DPDA run on a stack, written once as plain Python and compiled for the CPU (numba) and for CUDA.

A *job* is a group of tokens that read the same terminal sequence ``w`` from the current lexer state and
leave the same unfinished lexeme (pending terminals ``N``): the tokens are allowed iff ``w`` shifts from the
current stack and then some terminal of ``N`` can be shifted (``N`` empty: anything may follow), or, for the
EOS job, ``w`` shifts and ``$END`` is accepted. Every job runs on its own *overlay* of the committed stack:
the committed stack is read-only (``base[b, :bl]`` for sequence b, ``bl`` shrinks as the run pops below what
it pushed) and the run's own states go to a small private array ``loc[:ll]``. Jobs write nothing another
reads, so the jobs of every sequence of a batch run in parallel (numba ``prange`` parts on the CPU, one GPU
thread each), and nothing is kept between steps: the sampled token is committed on the host. Within one CPU part,
consecutive jobs reuse the overlays of the prefix they share and a memo of runs on the committed stack
(``masks_batch``, ``feed_memo``); the results are those of running each job alone.

The functions below are compiled twice by ``variant`` (``njit`` or ``cuda.jit(device=True)``); ``edge_step`` is
the one DPDA step every run (and the build-time sort of ``context.py``, in ``sort_kernels.py``) is made of. The
CPU batch kernel is at the end, the CUDA kernels in ``cuda_kernels.py``.
"""
from __future__ import annotations

from collections import namedtuple

import numba
import numpy as np
from numba import prange

from gcdbench.parsers.targets import borrowed, keep_alive, rebind, variant

SHIFT, ACCEPT, TO_R = 0, 1, 2   # edge kinds (dpda.py)
#: The DPDA's 11 tables as one record (``dpda.PackedDPDA.arrays()`` in this order): every run below takes it as one
#: argument ``D`` and reads ``D.<table>``. The jitted entry points get the tables packed (:func:`pack_tables`, the
#: fastest dispatch) and view them as the record first thing (:func:`dpda_views`); the CUDA kernels build it from
#: their device pack; the build-time sort of ``context.py`` passes it as it is (a namedtuple of arrays, which
#: numba types, caches and passes to CUDA device functions like a tuple).
DPDA = namedtuple("DPDA", ["key_ptr", "key_edge", "cond_ptr", "cond_depth", "cond_state", "pop", "push_ptr",
                           "push_state", "kind", "arg", "shift_to"])
OK, REJECT, ACCEPTED, BROKEN = 0, -1, 1, -2   # results of feed


def peek(base, b, bl, loc, ll, d):
    """The state at depth ``d`` (0 = top) of the overlay stack, -1 below the bottom."""
    if d < ll:
        return loc[ll - 1 - d]
    i = bl - 1 - (d - ll)
    if i < 0:
        return -1
    return base[b, i]


def edge_step(D, n_sym, base, b, bl, loc, ll, a, st):
    """One DPDA step of terminal ``a`` read in state ``st``: (code, st, bl, ll). code 0: ``a`` was shifted (its run
    is over), 1: accepted (``$END``), -1: no edge matches, 2: not over yet (``st`` is the state to read next),
    3: the step needs a state the stack does not know (``_peek`` gave UNKNOWN_STATE, a pop went below the
    stack or the pushes would pass the end of ``loc``): never on a real stack, which has its bottom state and a
    ``loc`` sized for every run; the build-time sort of ``context.py`` runs on a partly known stack."""
    key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr, push_state, kind, arg, shift_to = D
    k = st * n_sym + a
    found = -1
    for jj in range(key_ptr[k], key_ptr[k + 1]):
        e = key_edge[jj]
        ok = True
        for c in range(cond_ptr[e], cond_ptr[e + 1]):
            v = _peek(base, b, bl, loc, ll, cond_depth[c])  # noqa: F821  (bound by `variant`)
            if v == -2:
                return 3, st, bl, ll
            if v != cond_state[c]:
                ok = False
                break
        if ok:
            found = e
            break
    if found < 0:
        return -1, st, bl, ll
    p = pop[found]
    if p <= ll:
        ll -= p
    else:
        bl -= p - ll
        ll = 0
        if bl < 0:
            return 3, st, bl, ll
    if ll + push_ptr[found + 1] - push_ptr[found] + 1 > loc.size:
        return 3, st, bl, ll
    for x in range(push_ptr[found], push_ptr[found + 1]):
        loc[ll] = push_state[x]
        ll += 1
    kd = kind[found]
    if kd == 1:
        return 1, st, bl, ll
    if kd == 2:
        return 2, arg[found], bl, ll
    top = _peek(base, b, bl, loc, ll, 0)  # noqa: F821
    if top < 0:
        return 3, st, bl, ll
    if kd == 0:
        loc[ll] = shift_to[top * n_sym + a]
        ll += 1
        return 0, st, bl, ll
    return 2, top, bl, ll


def feed(D, n_sym, guard, base, b, bl, loc, ll, a):
    """Run terminal ``a``: (OK | ACCEPTED | REJECT | BROKEN, bl, ll). One matching edge per DPDA step."""
    st = _peek(base, b, bl, loc, ll, 0)  # noqa: F821
    for _ in range(bl + ll + guard):
        r, st, bl, ll = _edge_step(D, n_sym, base, b, bl, loc, ll, a, st)  # noqa: F821
        if r != 2:
            return (-2 if r == 3 else r), bl, ll
    return -2, bl, ll


def run_seq(D, n_sym, guard, seq_ptr, seq_term, base, b, L, sj, loc):
    """Run terminal sequence ``sj`` on stack b's overlay: (OK | REJECT | BROKEN, bl, ll)."""
    bl = L
    ll = 0
    for i in range(seq_ptr[sj], seq_ptr[sj + 1]):
        r, bl, ll = _feed(D, n_sym, guard, base, b, bl, loc, ll, seq_term[i])  # noqa: F821
        if r != 0:
            return (-2 if r == -2 else -1), bl, ll
    return 0, bl, ll


def tail_ok(D, n_sym, guard, pend_ptr, pend_term, end_sym, base, b, bl, ll, pj, loc, loc2):
    """After the sequence: 1 if pending set ``pj`` (0: anything may follow, -1: EOS, then ``$END`` must be
    accepted) allows the job, else 0; -2 if a run did not terminate. ``loc`` is left as it was."""
    if pj == 0:
        return 1
    if pj < 0:
        for x in range(ll):
            loc2[x] = loc[x]
        r, _bl2, _ll2 = _feed(D, n_sym, guard, base, b, bl, loc2, ll, end_sym)  # noqa: F821
        if r == -2:
            return -2
        return 1 if r == 1 else 0
    for i in range(pend_ptr[pj], pend_ptr[pj + 1]):
        for x in range(ll):
            loc2[x] = loc[x]
        r, _bl2, _ll2 = _feed(D, n_sym, guard, base, b, bl, loc2, ll, pend_term[i])  # noqa: F821
        if r == 0:
            return 1
        if r == -2:
            return -2
    return 0


def job_ok(D, n_sym, guard, seq_ptr, seq_term, pend_ptr, pend_term, end_sym, base, b, L, sj, pj, loc, loc2):
    """1 if the job (terminal sequence ``sj``, pending set ``pj``: 0 anything, -1 EOS) is allowed on stack b,
    0 if not, -2 if a run did not terminate (a construction bug, reported by the engine)."""
    r, bl, ll = _run_seq(D, n_sym, guard, seq_ptr, seq_term, base, b, L, sj, loc)  # noqa: F821
    if r != 0:
        return -2 if r == -2 else 0
    return _tail_ok(D, n_sym, guard, pend_ptr, pend_term, end_sym, base, b, bl, ll, pj, loc, loc2)  # noqa: F821


def feed_memo(D, n_sym, guard, base, b, bl, loc, ll, a, mkey, mval, mloc):
    """``feed`` with a memo of runs on the committed stack (CPU). Once a run has popped every state of its own
    overlay (``ll == 0``), the rest of it depends only on (committed height ``bl``, state, ``a``): closing a JSON
    string pops the committed string state by state, and every token that closes it makes that same run. The memo
    (direct-mapped, ``mkey.size`` a power of two, -1 = empty; the caller empties it when the committed stack
    changes) keeps the result of such a run: code, ``bl``, ``ll`` and the states pushed after that point."""
    st = _peek(base, b, bl, loc, ll, 0)  # noqa: F821
    key = np.int64(-1)
    slot = 0
    cap = mkey.size
    for _ in range(bl + ll + guard):
        if ll == 0 and key < 0 and cap > 0:
            key = (np.int64(bl) << 32) | (np.int64(st) << 12) | np.int64(a)
            slot = ((key * np.int64(0x9E3779B1)) >> 7) & (cap - 1)
            if mkey[slot] == key:
                ll = mval[slot, 2]
                for x in range(ll):
                    loc[x] = mloc[slot, x]
                return mval[slot, 0], mval[slot, 1], ll
        r, st, bl, ll = _edge_step(D, n_sym, base, b, bl, loc, ll, a, st)  # noqa: F821
        if r != 2:
            if r == 3:
                return -2, bl, ll
            if key >= 0 and ll <= mloc.shape[1]:
                mkey[slot] = key
                mval[slot, 0] = r
                mval[slot, 1] = bl
                mval[slot, 2] = ll
                for x in range(ll):
                    mloc[slot, x] = loc[x]
            return r, bl, ll
    return -2, bl, ll


def compile_for(target: str) -> tuple:
    """(peek, edge_step, feed, run_seq, tail_ok, job_ok) compiled for 'cpu' or 'cuda'."""
    pk = variant(peek, target)
    es = variant(edge_step, target, _peek=pk)
    fd = variant(feed, target, _peek=pk, _edge_step=es)
    rs = variant(run_seq, target, _feed=fd)
    tk = variant(tail_ok, target, _feed=fd)
    jo = variant(job_ok, target, _run_seq=rs, _tail_ok=tk)
    return pk, es, fd, rs, tk, jo


peek_cpu, edge_step_cpu, feed_cpu, run_seq_cpu, tail_ok_cpu, job_ok_cpu = compile_for("cpu")
feed_memo_cpu = variant(feed_memo, "cpu", _peek=peek_cpu, _edge_step=edge_step_cpu)


#: the static 1-D tables of the kernels, packed end to end by :func:`pack_tables` in this order: the DPDA's
#: (``PackedDPDA.arrays``), then the jobs' (the CUDA kernels read the first 21; ``job_lcp`` is the CPU's alone)
TABLES = DPDA._fields + ("seq_ptr", "seq_term", "pend_ptr", "pend_term", "cls_ptr", "job_seq", "job_pend",
                         "jt_ptr", "jt_tok", "dense_id", "job_lcp")


def pack_tables(arrays) -> tuple[np.ndarray, np.ndarray]:
    """``(tabs, hdr)``: the 1-D integer ``arrays`` end to end, and the offsets (``tabs[hdr[k]:hdr[k + 1]]`` is
    table k). The pack is int32 unless a value lies outside it, then int64 (the CPU kernels take either; the CUDA
    backend refuses int64: 64-bit values would double the registers a thread holds them in)."""
    arrays = [np.asarray(a).ravel() for a in arrays]
    hdr = np.zeros(len(arrays) + 1, dtype=np.int64)
    hdr[1:] = np.cumsum([a.size for a in arrays])
    wide = any(a.size and (a.min() < -2**31 or a.max() >= 2**31) for a in arrays)
    dtype = np.int64 if wide else np.int32
    tabs = np.concatenate([a.astype(dtype, copy=False) for a in arrays]) if arrays else np.zeros(0, dtype)
    return tabs, hdr


@numba.njit(inline="always")
def _tab(tabs, hdr, k):
    return tabs[hdr[k]:hdr[k + 1]]


@numba.njit(inline="always")
def dpda_views(tabs, hdr):
    """The DPDA's tables (the first 11 of :data:`TABLES`) viewed from a pack, as the record :data:`DPDA`."""
    return DPDA(_tab(tabs, hdr, 0), _tab(tabs, hdr, 1), _tab(tabs, hdr, 2), _tab(tabs, hdr, 3), _tab(tabs, hdr, 4),
            _tab(tabs, hdr, 5), _tab(tabs, hdr, 6), _tab(tabs, hdr, 7), _tab(tabs, hdr, 8), _tab(tabs, hdr, 9),
            _tab(tabs, hdr, 10))


@numba.njit(cache=True)
def commit_terms(tabs, hdr, n_sym, guard, stack, L, terms, loc):
    """Feed ``terms`` to the committed stack ``stack[0, :L]`` in place: (status, new length). status is OK,
    ACCEPTED (only for ``$END``), REJECT or BROKEN. ``stack`` must have room for the growth (the caller
    sizes it). The DPDA's tables come packed (:func:`pack_tables`)."""
    D = dpda_views(tabs, hdr)
    bl = L
    ll = 0
    r = 0
    for i in range(terms.size):
        r, bl, ll = feed_cpu(D, n_sym, guard, stack, 0, bl, loc, ll, terms[i])
        if r != 0:
            break
    if r == 0:
        for x in range(ll):
            stack[0, bl + x] = loc[x]
    return r, bl + ll


def masks_batch(tabs, hdr, dense_mask, n_sym, guard, end_sym, n_ch, ch_words, max_len, memo_cap, maxloc, threads,
                mkeys, mrows, base, lens, cls, out):
    """Masks of B sequences (stacks ``base[b, :lens[b]]``, lexer classes ``cls[b]``, -1 = finished) into
    ``out[b]`` (uint32 words), ``threads`` being the thread count the caller set (``numba.set_num_threads``;
    called here, it would make the function uncachable: numba reads it through a ctypes pointer). Phase 1: every
    (sequence, job) pair, split over ``8 * threads`` parallel parts (one for one thread);
    phase 2: every (sequence, token chunk) sets the bits of its allowed jobs' tokens, or ORs their mask rows
    (dense jobs), over the chunk's words (chunks own disjoint words, so no two threads write one word).
    Returns the number of BROKEN runs (0 when all is well).

    A class's jobs come in lexicographic order of their terminal sequences, ``job_lcp[j]`` terminals shared with
    job j - 1 (at most ``max_len`` terminals a sequence). A part keeps the overlay after each terminal of the
    sequence it ran last: a job resumes from the deepest one it shares, and a job that shares the terminal
    where that run failed fails the same way without running (after a finished JSON value, every token that
    starts with a space runs the space's reductions once, not once per token). Runs on the committed stack are
    memoised per sequence (``feed_memo``, ``memo_cap`` entries, 0 = none).

    A mask is a function of its allowed jobs alone (phase 2 reads nothing else), so whole masks are memoised across
    calls by that list (``mkeys[e]``: the count, then the job ids, -1 = empty; ``mrows[e]`` the mask; entries
    direct-mapped by a hash of the list, a power of two of them, none = off; a list longer than ``mkeys.shape[1] -
    1`` is not kept): a sequence whose list equals its entry's copies the row instead of phase 2.

    The static tables come packed (:func:`pack_tables`: ``tabs``, ``hdr``, in :data:`TABLES` order) and are
    viewed where they are read: each array argument costs its unboxing on every call from Python (36 arguments
    before). The work of a part and of a chunk are written once (:func:`run_part`, :func:`scatter_chunk`, inlined):
    :data:`masks_cpu` runs both phases in parallel regions, :data:`masks_cpu_one` (one thread) runs plain loops
    (a region costs its launch on every call). Every array is used through a view without reference counting
    (``targets.borrowed``): the atomic counts on the tables' views cost half a serial mask."""
    tabs, hdr, dense_mask, base, lens, cls, out = borrowed(tabs), borrowed(hdr), borrowed(dense_mask), \
        borrowed(base), borrowed(lens), borrowed(cls), borrowed(out)   # the caller's: no counting (targets.borrowed)
    cls_ptr = _tab(tabs, hdr, 15)
    B = base.shape[0]
    offs_o = np.zeros(B + 1, dtype=np.int64)
    offs = borrowed(offs_o)
    for b in range(B):
        c = cls[b]
        offs[b + 1] = offs[b] + (cls_ptr[c + 1] - cls_ptr[c] if c >= 0 else 0)
    total = offs[B]
    flags_o = np.zeros(total, dtype=np.int8)
    flags = borrowed(flags_o)
    parts = min(8 * threads if threads > 1 else 1, total)
    for p in prange(parts):
        run_part(tabs, hdr, n_sym, guard, end_sym, max_len, memo_cap, maxloc, base, lens, cls, offs, flags, p, parts)
    # the allowed (sequence, job) pairs, grouped by sequence, so phase 2 passes over them only
    acnt_o = np.zeros(B + 1, dtype=np.int64)
    acnt = borrowed(acnt_o)
    for b in range(B):
        k = 0
        for i in range(offs[b], offs[b + 1]):
            if flags[i] == 1:
                k += 1
        acnt[b + 1] = acnt[b] + k
    allowed_o = np.empty(acnt[B], dtype=np.int64)
    allowed = borrowed(allowed_o)
    for b in range(B):
        k = acnt[b]
        j0 = cls_ptr[cls[b]] - offs[b] if cls[b] >= 0 else 0
        for i in range(offs[b], offs[b + 1]):
            if flags[i] == 1:
                allowed[k] = j0 + i
                k += 1
    mkeys, mrows = borrowed(mkeys), borrowed(mrows)
    slot_o = np.full(B, -1, dtype=np.int64)   # a sequence's memo entry: >= 0 to fill after phase 2, -2 a hit
    slot = borrowed(slot_o)
    C = mkeys.shape[0] if mrows.shape[1] == out.shape[1] else 0
    for b in range(B):
        n = acnt[b + 1] - acnt[b]
        if C == 0 or n >= mkeys.shape[1]:
            continue
        h = n
        for a in range(acnt[b], acnt[b + 1]):
            h = h * 1000003 + allowed[a]   # wraps (int64): only a slot
        e = h & (C - 1)
        same = mkeys[e, 0] == n
        for x in range(n):
            if same and mkeys[e, 1 + x] != allowed[acnt[b] + x]:
                same = False
        if same:
            row, src = out[b], mrows[e]
            for w in range(row.shape[0]):
                row[w] = src[w]
            slot[b] = -2
        else:
            slot[b] = e
    for t in chunk_range(B * n_ch):
        if slot[t // n_ch] != -2:
            scatter_chunk(tabs, hdr, dense_mask, n_ch, ch_words, acnt, allowed, out, t)
    for b in range(B):
        e = slot[b]
        if e >= 0:
            mkeys[e, 0] = acnt[b + 1] - acnt[b]
            for x in range(acnt[b + 1] - acnt[b]):
                mkeys[e, 1 + x] = allowed[acnt[b] + x]
            row, dst = out[b], mrows[e]
            for w in range(row.shape[0]):
                dst[w] = row[w]
    broken = 0
    for i in range(total):
        if flags[i] == -2:
            broken += 1
    keep_alive((offs_o, acnt_o, allowed_o, flags_o, slot_o))
    return broken


@numba.njit(inline="always")
def run_part(tabs, hdr, n_sym, guard, end_sym, max_len, memo_cap, maxloc, base, lens, cls, offs, flags, p, parts):
    """Phase 1 of :func:`masks_batch`, part ``p`` of ``parts``: the flags of its share of the (sequence, job)
    pairs (``flags[i]``: 1 allowed, 0 not, -2 a run did not terminate)."""
    D = dpda_views(tabs, hdr)
    seq_ptr, seq_term, pend_ptr, pend_term = _tab(tabs, hdr, 11), _tab(tabs, hdr, 12), _tab(tabs, hdr, 13), \
        _tab(tabs, hdr, 14)
    cls_ptr, job_seq, job_pend, job_lcp = _tab(tabs, hdr, 15), _tab(tabs, hdr, 16), _tab(tabs, hdr, 17), \
        _tab(tabs, hdr, 21)
    total = offs[offs.size - 1]
    # scratch, used through views that are not reference counted (targets.borrowed; the owners live to the end)
    locs_o = np.empty((max_len + 1, maxloc), dtype=np.int32)   # the overlay after d terminals: locs[d, :lls[d]]
    bls_o = np.zeros(max_len + 1, dtype=np.int64)
    lls_o = np.zeros(max_len + 1, dtype=np.int64)
    loc2_o = np.empty(maxloc, dtype=np.int32)
    mkey_o = np.full(memo_cap, -1, dtype=np.int64)
    mval_o = np.empty((memo_cap, 3), dtype=np.int64)
    mloc_o = np.empty((memo_cap, 8), dtype=np.int32)
    locs, bls, lls, loc2 = borrowed(locs_o), borrowed(bls_o), borrowed(lls_o), borrowed(loc2_o)
    mkey, mval, mloc = borrowed(mkey_o), borrowed(mval_o), borrowed(mloc_o)
    lo = total * p // parts
    hi = total * (p + 1) // parts
    b = 0
    prev_b = -1
    good = 0      # overlays 0..good are those of the last sequence run
    fail = -1     # that run failed on its terminal `fail` (-1: it did not fail), with result `fail_r`
    fail_r = 0
    for i in range(lo, hi):
        while i >= offs[b + 1]:
            b += 1
        j = cls_ptr[cls[b]] + (i - offs[b])
        if b != prev_b:
            bls[0] = lens[b]
            lls[0] = 0
            prev_b = b
            good = 0
            fail = -1
            mkey[:] = -1
        shared = job_lcp[j] if i > lo and i > offs[b] else 0
        if fail >= 0 and shared > fail:   # shares the terminal its predecessor failed on
            flags[i] = fail_r
            continue
        d = min(shared, good)
        n = seq_ptr[job_seq[j] + 1] - seq_ptr[job_seq[j]]
        fail = -1
        s0 = seq_ptr[job_seq[j]]
        while d < n:
            ll = lls[d]
            for x in range(ll):
                locs[d + 1, x] = locs[d, x]
            r, bl2, ll2 = feed_memo_cpu(D, n_sym, guard, base, b, bls[d], locs[d + 1], ll, seq_term[s0 + d], mkey,
                                        mval, mloc)
            if r != 0:
                fail = d
                fail_r = -2 if r == -2 else 0
                break
            bls[d + 1] = bl2
            lls[d + 1] = ll2
            d += 1
        good = d
        if fail >= 0:
            flags[i] = fail_r
        else:
            flags[i] = tail_ok_cpu(D, n_sym, guard, pend_ptr, pend_term, end_sym, base, b, bls[n], lls[n],
                                   job_pend[j], locs[n], loc2)
    keep_alive((locs_o, loc2_o, mloc_o, bls_o, lls_o, mkey_o, mval_o))


@numba.njit(inline="always")
def scatter_chunk(tabs, hdr, dense_mask, n_ch, ch_words, acnt, allowed, out, t):
    """Phase 2 of :func:`masks_batch`, item ``t`` = (sequence, vocabulary chunk): zero the chunk's words of the
    sequence's mask, then OR in the rows of its allowed dense jobs and set the bits of the other allowed jobs'
    tokens in the chunk."""
    jt_ptr, jt_tok, dense_id = _tab(tabs, hdr, 18), _tab(tabs, hdr, 19), _tab(tabs, hdr, 20)
    W = out.shape[1]
    one = np.uint32(1)
    b = t // n_ch
    k = t - b * n_ch
    w0 = k * ch_words
    w1 = min(w0 + ch_words, W)
    row = out[b]
    row[w0:w1] = 0   # a slice store: the indexed loop over out[b, w] was not vectorised (2 µs, not 0.2, per mask)
    for a in range(acnt[b], acnt[b + 1]):
        j = allowed[a]
        d = dense_id[j]
        if d >= 0:
            part, src = row[w0:w1], dense_mask[d, w0:w1]
            for w in range(w1 - w0):
                part[w] |= src[w]
            continue
        for x in range(jt_ptr[j * n_ch + k], jt_ptr[j * n_ch + k + 1]):
            v = jt_tok[x]
            row[v >> 5] |= one << np.uint32(v & 31)


chunk_range = prange
#: the batch kernel on numba's thread pool (``threads`` > 1), and for one thread the same source compiled without
#: parallel regions (a region's launch cost ~3 µs a call). The serial build was 2.4x slower in the job loop until
#: its arrays went through ``targets.borrowed``: half its time was reference counting, which a region's body
#: does not do (perf, this 2-core VM)
masks_cpu = numba.njit(parallel=True, cache=True)(masks_batch)
masks_cpu_one = numba.njit(cache=True)(rebind(masks_batch, {"chunk_range": range, "prange": range}, suffix="_one"))
