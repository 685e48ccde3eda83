"""CUDA backend (numba.cuda): the masks of a whole batch in one set of launches.

* ``flags_kernel``: one thread per (sequence, job) pair of the batch (grid-stride), each running the job's
  terminals on its own overlay of its sequence's stack (``kernels.job_ok``, the same Python code as the
  CPU's, compiled as a device function); the overlay lives in a per-thread row of a global scratch array.
* ``scatter_kernel``: one thread per (pair, vocabulary chunk): the tokens of an allowed job set their bits,
  or its precomputed row (dense jobs) is OR-ed in, with ``atomic.or_`` (jobs of one sequence share words).

Transfers and launches, per step: the static tables (DPDA and jobs) are on the device from compile, packed into
one int32 array ``tabs`` with an offset table ``hdr`` (the CPU backend's own pack, ``kernels.pack_tables``; each
kernel views them again first thing), so a launch passes 10-13 arguments (28 before). The step's inputs (stacks,
lengths, lexer classes, job offsets) go up as one pinned int32 buffer (:func:`step_layout`), the masks and the
count of broken runs (one extra row of the output) come back as one copy; every per-step buffer is grow-only,
and each kernel is launched specialized to its first launch's types (``parsers.cuda_launch``). Results are bit
for bit those of the CPU backend (the same jobs decide the same tokens). With ``NUMBA_ENABLE_CUDASIM=1`` the
kernels run in numba's simulator (tests keep vocabularies tiny).
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from gcdbench.parsers.base import EngineError
from gcdbench.parsers.cuda_launch import Launcher, grown
from gcdbench.parsers.pre3.kernels import DPDA, compile_for

_peek, _edge_step, _feed, _run_seq, _tail_ok, _job_ok = compile_for("cuda")

def step_layout(B: int, L: int) -> tuple[int, int, int, int]:
    """Offsets of a step's int32 input buffer: stacks ``[0, B*L)`` (B rows of L), lengths, lexer classes, job
    offsets (B+1); returns (lens, cls, offs, end)."""
    o_lens = B * L
    return o_lens, o_lens + B, o_lens + 2 * B, o_lens + 3 * B + 1


@cuda.jit(device=True, inline=True)
def _tab(tabs, hdr, k):
    return tabs[hdr[k]:hdr[k + 1]]


@cuda.jit(device=True, inline=True)
def _step_views(step, B, L):
    """(lengths, lexer classes, job offsets) viewed from the step buffer (:func:`step_layout`; the stacks, its
    first ``B * L`` words, come as their own [B, L] view made on the host: a reshape inside a kernel calls a
    helper function and costs registers)."""
    o_lens = B * L
    return step[o_lens:o_lens + B], step[o_lens + B:o_lens + 2 * B], step[o_lens + 2 * B:o_lens + 3 * B + 1]


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
def flags_kernel(tabs, hdr, n_sym, guard, end_sym, base, step, B, L, flags, out, scratch, maxloc):
    """flags[i] of job pair i (1 allowed, 0 not, -2 a run did not terminate: counted in ``out[B, 0]``)."""
    tid = cuda.grid(1)
    if tid >= scratch.shape[0]:
        return
    lens, cls, offs = _step_views(step, B, L)
    D = DPDA(_tab(tabs, hdr, 0), _tab(tabs, hdr, 1), _tab(tabs, hdr, 2), _tab(tabs, hdr, 3), _tab(tabs, hdr, 4),
             _tab(tabs, hdr, 5), _tab(tabs, hdr, 6), _tab(tabs, hdr, 7), _tab(tabs, hdr, 8), _tab(tabs, hdr, 9),
             _tab(tabs, hdr, 10))   # the DPDA's record (kernels.DPDA), viewed from the pack
    seq_ptr, seq_term, pend_ptr, pend_term = _tab(tabs, hdr, 11), _tab(tabs, hdr, 12), _tab(tabs, hdr, 13), \
        _tab(tabs, hdr, 14)
    cls_ptr, job_seq, job_pend = _tab(tabs, hdr, 15), _tab(tabs, hdr, 16), _tab(tabs, hdr, 17)
    stride = scratch.shape[0]
    total = offs[B]
    loc = scratch[tid, :maxloc]
    loc2 = scratch[tid, maxloc:]
    i = tid
    while i < total:
        b = _seq_of(offs, B, i)
        j = cls_ptr[cls[b]] + (i - offs[b])
        f = _job_ok(D, n_sym, guard, seq_ptr, seq_term, pend_ptr, pend_term, end_sym, base, b, lens[b], job_seq[j],
                    job_pend[j], loc, loc2)
        flags[i] = f
        if f == -2:
            cuda.atomic.add(out, (B, 0), np.uint32(1))
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
def scatter_kernel(tabs, hdr, dense_mask, n_ch, ch_words, step, B, L, flags, out):
    """The tokens of the allowed job pairs into rows 0..B-1 of ``out``."""
    t = cuda.grid(1)
    stride = cuda.gridsize(1)
    lens, cls, offs = _step_views(step, B, L)
    cls_ptr, jt_ptr, jt_tok, dense_id = _tab(tabs, hdr, 15), _tab(tabs, hdr, 18), _tab(tabs, hdr, 19), \
        _tab(tabs, hdr, 20)
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
    of running (the PTX report reads the argument types of real launches from it). ``stats`` counts launches,
    copies and per-step allocations."""

    def __init__(self, shared, *, threads: int, block: int, dry: bool = False):
        if block <= 0 or threads <= 0:
            raise ValueError("pre3: cuda_threads and cuda_block must be positive")
        self.dry = dry
        self.launch = Launcher(dry)
        self.launched = self.launch.launched
        self.block = int(block)
        self.threads = max(self.block, (int(threads) + self.block - 1) // self.block * self.block)
        self.maxloc = shared.maxloc
        self.n_sym, self.guard, self.end_sym = shared.n_sym, shared.guard, shared.end_sym
        self.cls_ptr_host = np.asarray(shared.jobs["cls_ptr"], dtype=np.int64)
        self.n_ch, self.ch_words = shared.n_ch, shared.ch_words
        if shared.tabs.dtype != np.int32:   # the CPU's pack went to int64: a table holds a value outside int32
            raise ValueError("pre3: a table has values outside int32, which the CUDA kernels do not take; "
                             "use backend=cpu for this grammar")
        self.d_tabs, self.d_hdr = self._up(shared.tabs), self._up(shared.hdr)
        self.d_dense = self._up(np.asarray(shared.dense_mask, dtype=np.uint32))
        self.scratch = self._device((self.threads, 2 * self.maxloc), np.int32)
        self.stats = {"steps": 0, "h2d": 0, "d2h": 0, "allocs": 0}
        self._h_step = self._d_step = self._d_flags = self._h_out = self._d_out = None

    def _up(self, a):
        a = np.ascontiguousarray(a)
        return a if self.dry else cuda.to_device(a)

    def _device(self, shape, dtype):
        return np.zeros(shape, dtype=dtype) if self.dry else cuda.device_array(shape, dtype=dtype)

    def _pinned(self, shape, dtype):
        return np.zeros(shape, dtype=dtype) if self.dry else cuda.pinned_array(shape, dtype=dtype)

    def _grow(self, name: str, shape: tuple, dtype, alloc) -> None:
        old = getattr(self, name)
        new = grown(old, shape, dtype, alloc)
        if new is not old:
            self.stats["allocs"] += 1
            setattr(self, name, new)

    def masks(self, base: np.ndarray, lens: np.ndarray, cls: np.ndarray, out: np.ndarray) -> int:
        B, L = base.shape
        cp = self.cls_ptr_host
        counts = np.where(cls >= 0, cp[np.maximum(cls, 0) + 1] - cp[np.maximum(cls, 0)], 0)
        o_lens, o_cls, o_offs, end = step_layout(B, L)
        W = out.shape[1]
        self._grow("_h_step", (end,), np.int32, self._pinned)
        self._grow("_d_step", (end,), np.int32, self._device)
        self._grow("_h_out", (B + 1, W), np.uint32, self._pinned)
        self._grow("_d_out", (B + 1, W), np.uint32, self._device)
        h = self._h_step
        h[:o_lens].reshape(B, L)[...] = base
        h[o_lens:o_cls] = lens
        h[o_cls:o_offs] = cls
        h[o_offs] = 0
        offs = np.cumsum(counts)
        total = int(offs[-1]) if B else 0
        if total >= 2**31:
            raise EngineError(f"pre3 cuda: {total} (sequence, job) pairs in one step exceed int32")
        h[o_offs + 1:end] = offs
        self._grow("_d_flags", (max(total, 1),), np.int8, self._device)
        self.stats["steps"] += 1
        self.stats["h2d"] += 1
        if self.dry:
            self._d_step[:end] = h[:end]
        else:
            self._d_step[:end].copy_to_device(h[:end])
        d_out = self._d_out[:B + 1]
        bl = self.block
        self.launch(zero_kernel, max(1, min(1024, ((B + 1) * W + bl - 1) // bl)), bl, d_out)
        if total:
            n = min(self.threads, (total + bl - 1) // bl * bl)
            d_base = self._d_step[:o_lens].reshape(B, L)
            self.launch(flags_kernel, n // bl, bl, self.d_tabs, self.d_hdr, self.n_sym, self.guard, self.end_sym,
                        d_base, self._d_step, B, L, self._d_flags, d_out, self.scratch[:n], self.maxloc)
            m = min(self.threads, (total * self.n_ch + bl - 1) // bl * bl)
            self.launch(scatter_kernel, m // bl, bl, self.d_tabs, self.d_hdr, self.d_dense, self.n_ch, self.ch_words,
                        self._d_step, B, L, self._d_flags, d_out)
        if self.dry:
            return 0
        self.stats["d2h"] += 1
        got = self._h_out[:B + 1]
        d_out.copy_to_host(got)
        out[...] = got[:B]
        return int(got[B, 0])

    def close(self) -> None:
        self.scratch = self._h_step = self._d_step = self._d_flags = self._h_out = self._d_out = None
        self.d_tabs = self.d_hdr = self.d_dense = None
