"""One plain-Python function compiled for either numba target, with some of its global names rebound.

Device logic is written once as plain Python that calls a few target primitives by global name (a word OR, a
thread index, a barrier...); :func:`variant` compiles it for the CPU (``numba.njit``) or as a CUDA device function,
with those names bound to the target's versions. Used by Pre³'s DPDA kernels; Valiant's ``for_cuda`` does the same.
"""
from __future__ import annotations

import types

import numba


def rebind(fn, bind: dict, suffix: str = ""):
    """A copy of the Python function ``fn`` whose global names in ``bind`` resolve to the given objects."""
    g = dict(fn.__globals__)
    g.update(bind)
    f = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    if suffix:
        f.__qualname__ = fn.__qualname__ + suffix
    return f


def variant(fn, target: str, **bind):
    """``fn`` compiled for ``target`` ('cpu' or 'cuda') with the global names in ``bind`` rebound."""
    f = rebind(fn, bind)
    if target == "cpu":
        return numba.njit(inline="always")(f)
    from numba import cuda

    return cuda.jit(device=True)(f)
