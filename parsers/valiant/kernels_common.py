"""Small device-logic helpers written once, compiled for both targets.

They are plain Python; :func:`variant` compiles one for the CPU (``numba.njit``) or as a CUDA device
function, with the only target-specific piece, the word OR, bound per target: plain ``|=`` on the CPU
(one thread owns the step) and ``cuda.atomic.or_`` on the GPU (threads of a block share the working tier).
"""
from __future__ import annotations

import types

import numba
import numpy as np


def bit(mem, off, i):
    """Bit ``i`` of the bitset starting at ``mem[off]``."""
    return (mem[off + (i >> 6)] >> np.uint64(i & 63)) & np.uint64(1)


def any_word(mem, off, nw):
    for w in range(nw):
        if mem[off + w] != 0:
            return True
    return False


def shift_or_rows(dst, doff, W, src, soff, We, shift):
    """Row bits: ``dst[doff : doff+W] |= src[soff : soff+We] << shift`` (all rows of a cell at once)."""
    sw = shift >> 6
    sb = shift & 63
    for w in range(We):
        val = src[soff + w]
        if val == 0:
            continue
        d = w + sw
        if d < W:
            _or_word(dst, doff + d, val << np.uint64(sb))  # noqa: F821  (bound per target by `variant`)
        if sb != 0 and d + 1 < W:
            _or_word(dst, doff + d + 1, val >> np.uint64(64 - sb))  # noqa: F821


def or_word_plain(arr, i, val):
    arr[i] |= val


def variant(fn, target: str, **bind):
    """``fn`` compiled for ``target`` ('cpu' or 'cuda') with the global names in ``bind`` rebound."""
    g = dict(fn.__globals__)
    g.update(bind)
    f = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    if target == "cpu":
        return numba.njit(inline="always")(f)
    from numba import cuda

    return cuda.jit(device=True)(f)


bit_cpu = variant(bit, "cpu")
any_word_cpu = variant(any_word, "cpu")
or_word_cpu = variant(or_word_plain, "cpu")
shift_or_rows_cpu = variant(shift_or_rows, "cpu", _or_word=or_word_cpu)
