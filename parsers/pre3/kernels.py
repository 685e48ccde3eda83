"""The DPDA run on a stack, written once as plain Python and compiled for the CPU (numba) and for CUDA.

A *job* is a group of tokens that read the same terminal sequence ``w`` from the current lexer state and
leave the same unfinished lexeme (pending terminals ``N``): the tokens are allowed iff ``w`` shifts from the
current stack and then some terminal of ``N`` can be shifted (``N`` empty: anything may follow), or, for the
EOS job, ``w`` shifts and ``$END`` is accepted. Every job runs on its own *overlay* of the committed stack:
the committed stack is read-only (``base[b, :bl]`` for sequence b, ``bl`` shrinks as the run pops below what
it pushed) and the run's own states go to a small private array ``loc[:ll]``. Nothing is shared between
jobs, so the jobs of every sequence of a batch run in parallel (numba ``prange`` on the CPU, one GPU thread
each), and nothing is kept between steps: the sampled token is committed on the host.

The functions below are compiled twice by ``variant`` (``njit`` or ``cuda.jit(device=True)``); the CPU
batch kernel is at the end, the CUDA kernels in ``cuda_kernels.py``.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import prange

from gcdbench.parsers.targets import variant

SHIFT, ACCEPT, TO_R = 0, 1, 2   # edge kinds (dpda.py)
OK, REJECT, ACCEPTED, BROKEN = 0, -1, 1, -2   # results of feed


def peek(base, b, bl, loc, ll, d):
    """The state at depth ``d`` (0 = top) of the overlay stack, -1 below the bottom."""
    if d < ll:
        return loc[ll - 1 - d]
    i = bl - 1 - (d - ll)
    if i < 0:
        return -1
    return base[b, i]


def feed(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr, push_state, kind, arg, shift_to,
         n_sym, guard, base, b, bl, loc, ll, a):
    """Run terminal ``a``: (OK | ACCEPTED | REJECT | BROKEN, bl, ll). One matching edge per DPDA step."""
    st = _peek(base, b, bl, loc, ll, 0)  # noqa: F821  (bound per target by `variant`)
    for _ in range(bl + ll + guard):
        k = st * n_sym + a
        found = -1
        for jj in range(key_ptr[k], key_ptr[k + 1]):
            e = key_edge[jj]
            ok = True
            for c in range(cond_ptr[e], cond_ptr[e + 1]):
                if _peek(base, b, bl, loc, ll, cond_depth[c]) != cond_state[c]:  # noqa: F821
                    ok = False
                    break
            if ok:
                found = e
                break
        if found < 0:
            return -1, bl, ll
        p = pop[found]
        if p <= ll:
            ll -= p
        else:
            bl -= p - ll
            ll = 0
        for x in range(push_ptr[found], push_ptr[found + 1]):
            loc[ll] = push_state[x]
            ll += 1
        kd = kind[found]
        if kd == 0:
            top = _peek(base, b, bl, loc, ll, 0)  # noqa: F821
            loc[ll] = shift_to[top * n_sym + a]
            ll += 1
            return 0, bl, ll
        if kd == 1:
            return 1, bl, ll
        if kd == 2:
            st = arg[found]
        else:
            st = _peek(base, b, bl, loc, ll, 0)  # noqa: F821
    return -2, bl, ll


def run_seq(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr, push_state, kind, arg, shift_to,
            n_sym, guard, seq_ptr, seq_term, base, b, L, sj, loc):
    """Run terminal sequence ``sj`` on stack b's overlay: (OK | REJECT | BROKEN, bl, ll)."""
    bl = L
    ll = 0
    for i in range(seq_ptr[sj], seq_ptr[sj + 1]):
        r, bl, ll = _feed(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr,  # noqa: F821
                          push_state, kind, arg, shift_to, n_sym, guard, base, b, bl, loc, ll, seq_term[i])
        if r != 0:
            return (-2 if r == -2 else -1), bl, ll
    return 0, bl, ll


def tail_ok(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr, push_state, kind, arg, shift_to,
            n_sym, guard, pend_ptr, pend_term, end_sym, base, b, bl, ll, pj, loc, loc2):
    """After the sequence: 1 if pending set ``pj`` (0: anything may follow, -1: EOS, then ``$END`` must be
    accepted) allows the job, else 0; -2 if a run did not terminate. ``loc`` is left as it was."""
    if pj == 0:
        return 1
    if pj < 0:
        for x in range(ll):
            loc2[x] = loc[x]
        r, _bl2, _ll2 = _feed(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr,  # noqa: F821
                              push_state, kind, arg, shift_to, n_sym, guard, base, b, bl, loc2, ll, end_sym)
        if r == -2:
            return -2
        return 1 if r == 1 else 0
    for i in range(pend_ptr[pj], pend_ptr[pj + 1]):
        for x in range(ll):
            loc2[x] = loc[x]
        r, _bl2, _ll2 = _feed(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr,  # noqa: F821
                              push_state, kind, arg, shift_to, n_sym, guard, base, b, bl, loc2, ll, pend_term[i])
        if r == 0:
            return 1
        if r == -2:
            return -2
    return 0


def job_ok(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr, push_state, kind, arg, shift_to,
           n_sym, guard, seq_ptr, seq_term, pend_ptr, pend_term, end_sym, base, b, L, sj, pj, loc, loc2):
    """1 if the job (terminal sequence ``sj``, pending set ``pj``: 0 anything, -1 EOS) is allowed on stack b,
    0 if not, -2 if a run did not terminate (a construction bug, reported by the engine)."""
    r, bl, ll = _run_seq(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr,  # noqa: F821
                         push_state, kind, arg, shift_to, n_sym, guard, seq_ptr, seq_term, base, b, L, sj, loc)
    if r != 0:
        return -2 if r == -2 else 0
    return _tail_ok(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr,  # noqa: F821
                    push_state, kind, arg, shift_to, n_sym, guard, pend_ptr, pend_term, end_sym, base, b, bl, ll,
                    pj, loc, loc2)


def compile_for(target: str) -> tuple:
    """(peek, feed, run_seq, tail_ok, job_ok) compiled for 'cpu' or 'cuda'."""
    pk = variant(peek, target)
    fd = variant(feed, target, _peek=pk)
    rs = variant(run_seq, target, _feed=fd)
    tk = variant(tail_ok, target, _feed=fd)
    jo = variant(job_ok, target, _run_seq=rs, _tail_ok=tk)
    return pk, fd, rs, tk, jo


peek_cpu, feed_cpu, run_seq_cpu, tail_ok_cpu, job_ok_cpu = compile_for("cpu")


@numba.njit(cache=True)
def commit_terms(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr, push_state, kind, arg,
                 shift_to, n_sym, guard, stack, L, terms, loc):
    """Feed ``terms`` to the committed stack ``stack[0, :L]`` in place: (status, new length). status is OK,
    ACCEPTED (only for ``$END``), REJECT or BROKEN. ``stack`` must have room for the growth (the caller
    sizes it)."""
    bl = L
    ll = 0
    r = 0
    for i in range(terms.size):
        r, bl, ll = feed_cpu(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr, push_state, kind,
                             arg, shift_to, n_sym, guard, stack, 0, bl, loc, ll, terms[i])
        if r != 0:
            break
    if r == 0:
        for x in range(ll):
            stack[0, bl + x] = loc[x]
    return r, bl + ll


@numba.njit(parallel=True, cache=True)
def masks_cpu(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr, push_state, kind, arg, shift_to,
              n_sym, guard, seq_ptr, seq_term, pend_ptr, pend_term, end_sym, cls_ptr, job_seq, job_pend, jt_ptr,
              jt_tok, dense_id, dense_mask, n_ch, ch_words, maxloc, n_parts, base, lens, cls, out):
    """Masks of B sequences (stacks ``base[b, :lens[b]]``, lexer classes ``cls[b]``, -1 = finished) into
    ``out[b]`` (uint32 words). Phase 1: every (sequence, job) pair, split over ``n_parts`` parallel parts;
    phase 2: every (sequence, token chunk) sets the bits of its allowed jobs' tokens, or ORs their mask rows
    (dense jobs), over the chunk's words (chunks own disjoint words, so no two threads write one word).
    Returns the number of BROKEN runs (0 when all is well)."""
    B = base.shape[0]
    offs = np.zeros(B + 1, dtype=np.int64)
    for b in range(B):
        c = cls[b]
        offs[b + 1] = offs[b] + (cls_ptr[c + 1] - cls_ptr[c] if c >= 0 else 0)
    total = offs[B]
    flags = np.zeros(total, dtype=np.int8)
    parts = min(n_parts, total)
    for p in prange(parts):
        loc = np.empty(maxloc, dtype=np.int32)
        loc2 = np.empty(maxloc, dtype=np.int32)
        lo = total * p // parts
        hi = total * (p + 1) // parts
        b = 0
        prev_b = -1
        prev_s = -1
        r = 0
        bl = 0
        ll = 0
        for i in range(lo, hi):
            while i >= offs[b + 1]:
                b += 1
            j = cls_ptr[cls[b]] + (i - offs[b])
            sj = job_seq[j]
            if b != prev_b or sj != prev_s:   # jobs of a class are sorted by sequence: run each one once
                r, bl, ll = run_seq_cpu(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr,
                                        push_state, kind, arg, shift_to, n_sym, guard, seq_ptr, seq_term, base, b,
                                        lens[b], sj, loc)
                prev_b = b
                prev_s = sj
            if r != 0:
                flags[i] = -2 if r == -2 else 0
            else:
                flags[i] = tail_ok_cpu(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr,
                                       push_state, kind, arg, shift_to, n_sym, guard, pend_ptr, pend_term, end_sym,
                                       base, b, bl, ll, job_pend[j], loc, loc2)
    W = out.shape[1]
    one = np.uint32(1)
    for t in prange(B * n_ch):
        b = t // n_ch
        k = t - b * n_ch
        w0 = k * ch_words
        w1 = min(w0 + ch_words, W)
        for w in range(w0, w1):
            out[b, w] = 0
        c = cls[b]
        if c < 0:
            continue
        j0 = cls_ptr[c]
        for jj in range(offs[b + 1] - offs[b]):
            if flags[offs[b] + jj] == 1:
                j = j0 + jj
                d = dense_id[j]
                if d >= 0:
                    for w in range(w0, w1):
                        out[b, w] |= dense_mask[d, w]
                    continue
                for x in range(jt_ptr[j * n_ch + k], jt_ptr[j * n_ch + k + 1]):
                    v = jt_tok[x]
                    out[b, v >> 5] |= one << np.uint32(v & 31)
    broken = 0
    for i in range(total):
        if flags[i] == -2:
            broken += 1
    return broken
