"""CUDA backend (numba.cuda): the masks of a whole batch in one set of launches.

* ``flags_kernel``: one thread per (sequence, job) pair of the batch (grid-stride), each running the job's
  terminals on its own overlay of its sequence's stack (``kernels.job_ok``, the same Python code as the
  CPU's, compiled as a device function); the overlay lives in a per-thread row of a global scratch array.
* ``scatter_kernel``: one thread per (pair, vocabulary chunk): the tokens of an allowed job set their bits,
  or its precomputed row (dense jobs) is OR-ed in, with ``atomic.or_`` (jobs of one sequence share words).

The DPDA and job arrays are copied to the device once (at compile); per step only the stacks go up and the
masks come back. Results are bit for bit those of the CPU backend (the same jobs decide the same tokens).
With ``NUMBA_ENABLE_CUDASIM=1`` the kernels run in numba's simulator (tests keep vocabularies tiny).
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from gcdbench.parsers.pre3.kernels import compile_for

_peek, _edge_step, _feed, _run_seq, _tail_ok, _job_ok = compile_for("cuda")


@cuda.jit(device=True)
def _seq_of(offs, B, i):
    """The sequence b with offs[b] <= i < offs[b+1] (sequences with no job are never returned)."""
    lo = 0
    hi = B
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if offs[mid] <= i:
            lo = mid
        else:
            hi = mid
    return lo


@cuda.jit
def flags_kernel(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr, push_state, kind, arg, shift_to,
                 n_sym, guard, seq_ptr, seq_term, pend_ptr, pend_term, end_sym, cls_ptr, job_seq, job_pend,
                 base, lens, cls, offs, flags, scratch, maxloc):
    tid = cuda.grid(1)
    if tid >= scratch.shape[0]:
        return
    stride = scratch.shape[0]
    B = lens.size
    total = offs[B]
    loc = scratch[tid, :maxloc]
    loc2 = scratch[tid, maxloc:]
    i = tid
    while i < total:
        b = _seq_of(offs, B, i)
        j = cls_ptr[cls[b]] + (i - offs[b])
        flags[i] = _job_ok(key_ptr, key_edge, cond_ptr, cond_depth, cond_state, pop, push_ptr, push_state, kind, arg,
                           shift_to, n_sym, guard, seq_ptr, seq_term, pend_ptr, pend_term, end_sym, base, b, lens[b],
                           job_seq[j], job_pend[j], loc, loc2)
        i += stride


@cuda.jit
def zero_kernel(out):
    t = cuda.grid(1)
    stride = cuda.gridsize(1)
    n = out.shape[0] * out.shape[1]
    W = out.shape[1]
    while t < n:
        out[t // W, t % W] = 0
        t += stride


@cuda.jit
def scatter_kernel(cls_ptr, jt_ptr, jt_tok, dense_id, dense_mask, n_ch, ch_words, cls, offs, flags, out):
    t = cuda.grid(1)
    stride = cuda.gridsize(1)
    B = cls.size
    n = offs[B] * n_ch
    one = np.uint32(1)
    while t < n:
        i = t // n_ch
        k = t - i * n_ch
        if flags[i] == 1:
            b = _seq_of(offs, B, i)
            j = cls_ptr[cls[b]] + (i - offs[b])
            d = dense_id[j]
            if d >= 0:
                w1 = min(k * ch_words + ch_words, out.shape[1])
                for w in range(k * ch_words, w1):
                    val = dense_mask[d, w]
                    if val != 0:
                        cuda.atomic.or_(out, (b, w), val)
            for x in range(jt_ptr[j * n_ch + k], jt_ptr[j * n_ch + k + 1]):
                v = jt_tok[x]
                cuda.atomic.or_(out, (b, v >> 5), one << np.uint32(v & 31))
        t += stride


KERNELS = {"flags_kernel": flags_kernel, "zero_kernel": zero_kernel, "scatter_kernel": scatter_kernel}


class CudaMasks:
    """Device copies of a compiled grammar and the launches of one batch step. ``dry=True`` touches no device:
    "device" arrays are numpy arrays and each launch is recorded in ``launched`` as (kernel, arguments) instead
    of running (the PTX report reads the argument types of real launches from it)."""

    def __init__(self, shared, threads: int = 16384, block: int = 128, dry: bool = False):
        if block <= 0 or threads <= 0:
            raise ValueError("pre3: cuda_threads and cuda_block must be positive")
        self.dry = dry
        self.launched: list[tuple] = []
        self.block = int(block)
        self.threads = max(self.block, (int(threads) + self.block - 1) // self.block * self.block)
        self.maxloc = shared.maxloc
        self.n_sym, self.guard, self.end_sym = shared.n_sym, shared.guard, shared.end_sym
        (seq_ptr, seq_term, pend_ptr, pend_term, _end, cls_ptr, job_seq, job_pend, jt_ptr, jt_tok, dense_id,
         dense_mask, n_ch, ch_words) = shared.job_arrays
        self.cls_ptr_host = np.asarray(cls_ptr, dtype=np.int64)
        self.n_ch, self.ch_words = int(n_ch), int(ch_words)
        up = self._up
        self.d_dpda = tuple(up(a) for a in shared.dpda_arrays)
        self.d_seq = tuple(up(a) for a in (seq_ptr, seq_term, pend_ptr, pend_term))
        self.d_jobs = tuple(up(a) for a in (cls_ptr, job_seq, job_pend))
        self.d_tok = tuple(up(a) for a in (jt_ptr, jt_tok, dense_id, dense_mask))
        self.scratch = self._empty((self.threads, 2 * self.maxloc), np.int32)

    def _up(self, a):
        a = np.ascontiguousarray(a)
        return a if self.dry else cuda.to_device(a)

    def _empty(self, shape, dtype):
        return np.zeros(shape, dtype=dtype) if self.dry else cuda.device_array(shape, dtype=dtype)

    def _launch(self, kernel, grid: int, block: int, *args) -> None:
        if self.dry:
            self.launched.append((kernel, args))
        else:
            kernel[grid, block](*args)

    def masks(self, base: np.ndarray, lens: np.ndarray, cls: np.ndarray, out: np.ndarray) -> int:
        B = base.shape[0]
        cp = self.cls_ptr_host
        counts = np.where(cls >= 0, cp[np.maximum(cls, 0) + 1] - cp[np.maximum(cls, 0)], 0)
        offs = np.zeros(B + 1, dtype=np.int64)
        offs[1:] = np.cumsum(counts)
        total = int(offs[-1])
        d_base, d_lens = self._up(base), self._up(np.asarray(lens, np.int64))
        d_cls, d_offs = self._up(np.asarray(cls, np.int32)), self._up(offs)
        d_flags = self._empty(max(total, 1), np.int8)
        d_out = self._empty(out.shape, np.uint32)
        bl = self.block
        self._launch(zero_kernel, max(1, min(1024, (out.size + bl - 1) // bl)), bl, d_out)
        if total:
            n = min(self.threads, (total + bl - 1) // bl * bl)
            self._launch(flags_kernel, n // bl, bl, *self.d_dpda, self.n_sym, self.guard, *self.d_seq, self.end_sym,
                         *self.d_jobs, d_base, d_lens, d_cls, d_offs, d_flags, self.scratch[:n], self.maxloc)
            m = min(self.threads, (total * self.n_ch + bl - 1) // bl * bl)
            self._launch(scatter_kernel, m // bl, bl, self.d_jobs[0], *self.d_tok, self.n_ch, self.ch_words, d_cls,
                         d_offs, d_flags, d_out)
        if self.dry:
            return 0
        d_out.copy_to_host(out)
        if not total:
            return 0
        return int((d_flags.copy_to_host()[:total] == -2).sum())

    def close(self) -> None:
        self.scratch = None
        self.d_dpda = self.d_seq = self.d_jobs = self.d_tok = ()
