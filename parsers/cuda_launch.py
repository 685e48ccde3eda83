"""Host-side launch plumbing shared by the engines' CUDA backends (Valiant, Pre³).

numba types every argument of a kernel call before it launches (``typeof`` on each array, each member of a tuple)
and then marshals it; with a few dozen device arrays that typing is most of the host's cost of a launch, paid on
every step. A :class:`Launcher` specializes each kernel to the types of its first launch
(``Dispatcher.specialize``, public numba-cuda API): later launches skip the typing and only marshal. The callers
keep the types fixed (persistent buffers and views of one layout, scalars as Python ints); a dry launcher records
the arguments instead, and the tests check from those records that two steps pass the same types.

:func:`grown` is the grow-only allocation both backends use for per-step buffers (device or pinned host).
"""
from __future__ import annotations

import numpy as np


class Launcher:
    """``launcher(kernel, grid, block, *args)``: launch ``kernel`` specialized to its first launch's argument
    types; ``dry=True`` touches no device and appends ``(kernel, args)`` to ``launched``."""

    def __init__(self, dry: bool = False):
        self.dry = dry
        self.launched: list[tuple] = []
        self._spec: dict = {}

    def __call__(self, kernel, grid: int, block: int, *args) -> None:
        if self.dry:
            self.launched.append((kernel, args))
            return
        spec = self._spec.get(kernel)
        if spec is None:
            spec = self._spec[kernel] = kernel.specialize(*args)
        spec[grid, block](*args)


def grown(buf, shape: tuple, dtype, alloc, axis: int = 0):
    """``buf`` if it holds at least ``shape`` (same dtype and other dimensions), else a new ``alloc(shape, dtype)``,
    its ``axis`` dimension at least double ``buf``'s when only that one was too small (so a run of growing steps
    reallocates O(log n) times)."""
    shape = tuple(int(x) for x in shape)
    others = shape[:axis] + shape[axis + 1:]
    alike = (buf is not None and buf.dtype == np.dtype(dtype) and buf.ndim == len(shape)
             and buf.shape[:axis] + buf.shape[axis + 1:] == others)
    if alike and buf.shape[axis] >= shape[axis]:
        return buf
    size = max(shape[axis], 2 * buf.shape[axis] if alike else 0)
    return alloc(shape[:axis] + (size,) + shape[axis + 1:], dtype)
