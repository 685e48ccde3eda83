"""One plain-Python function compiled for either numba target, with some of its global names rebound.

Device logic is written once as plain Python that calls a few target primitives by global name (a word OR, a
thread index, a barrier...); :func:`variant` compiles it for the CPU (``numba.njit``) or as a CUDA device function,
with those names bound to the target's versions. Used by Pre³'s DPDA kernels; Valiant's ``for_cuda`` does the same.
"""
from __future__ import annotations

import types

import numba
from numba.core import cgutils
from numba.core import types as nbtypes
from numba.core.extending import intrinsic
from numba.core.registry import CPUDispatcher


def rebind(fn, bind: dict, suffix: str = ""):
    """A copy of the Python function ``fn`` whose global names in ``bind`` resolve to the given objects."""
    g = dict(fn.__globals__)
    g.update(bind)
    f = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    if suffix:
        f.__qualname__ = fn.__qualname__ + suffix
    return f


class _Unliteral(CPUDispatcher):
    """A CPU dispatcher whose callers in jitted code pass plain types: numba types a constant argument as a literal
    (``Literal[int](0)``, ``Literal[bool](False)``) and compiles the callee anew for every constant a call site
    passes, and again down the callee's own calls. Valiant's kernels paid a third of their cold compile for such
    copies (mask_base three times, fill_tokens four); here a call with a constant uses the plain signature."""

    def get_call_template(self, args, kws):
        return super().get_call_template(tuple(map(nbtypes.unliteral, args)),
                                         {k: nbtypes.unliteral(v) for k, v in kws.items()})


def callee_jit(**options):
    """``numba.njit(**options)`` for a function called from jitted code: one compile per signature of plain
    types, whatever constants its callers pass (:class:`_Unliteral`)."""
    def wrap(fn):
        disp = numba.njit(**options)(fn)
        disp.__class__ = _Unliteral
        return disp
    return wrap


def compile_for(dispatcher, *args):
    """Load (from numba's on-disk cache) or compile ``dispatcher`` now for the argument types a call with ``args``
    would have, without calling it: an engine pays its compiles in init, not in its first mask."""
    return dispatcher.compile(tuple(numba.typeof(a) for a in args))


def variant(fn, target: str, **bind):
    """``fn`` compiled for ``target`` ('cpu' or 'cuda') with the global names in ``bind`` rebound."""
    f = rebind(fn, bind)
    if target == "cpu":
        return numba.njit(inline="always")(f)
    from numba import cuda

    return cuda.jit(device=True)(f)


# -- arrays without reference counting, for hot CPU loops ------------------------------------------------------
# numba counts references to every array it copies or passes, with an atomic add on the array's memory record
# (NRT_incref/NRT_decref); inside a job loop that inlines a DPDA step over 11 table views that cost half of a
# serially compiled Pre³ mask (perf: 52% in those two functions). A parallel region's body does not pay it, as its
# arrays come in without a record. ``borrowed`` gives the same: a view without a record, whose owner must outlive
# it (an argument of the caller, or an array passed to ``keep_alive`` after the last use of the view).
@intrinsic
def borrowed(typingctx, arr):
    """The array ``arr`` without its memory record: copies and passes cost no atomic operations."""
    if not isinstance(arr, nbtypes.Array):
        return None

    def codegen(context, builder, sig, args):
        src = context.make_array(sig.args[0])(context, builder, value=args[0])
        out = context.make_array(sig.return_type)(context, builder)
        context.populate_array(out, data=src.data, shape=src.shape, strides=src.strides, itemsize=src.itemsize,
                               meminfo=None)
        return out._getvalue()

    return arr(arr), codegen


@intrinsic
def keep_alive(typingctx, arrs):
    """A use of the arrays ``arrs`` (a tuple) that does nothing: numba frees an array after its last use, so the
    owners of ``borrowed`` views are passed here after the views' last use."""
    def codegen(context, builder, sig, args):
        return context.get_dummy_value()

    return nbtypes.none(arrs), codegen


@intrinsic
def fetch_add(typingctx, arr, idx):
    """``arr[idx] += 1`` as one atomic operation (CPU, int64 ``arr``), returning the value before: threads that
    claim work items from one counter each get a different item."""
    if not (isinstance(arr, nbtypes.Array) and arr.dtype == nbtypes.int64 and isinstance(idx, nbtypes.Integer)):
        return None

    def codegen(context, builder, sig, args):
        a = context.make_array(sig.args[0])(context, builder, value=args[0])
        ptr = cgutils.get_item_pointer(context, builder, sig.args[0], a, [args[1]])
        return builder.atomic_rmw("add", ptr, context.get_constant(nbtypes.int64, 1), "monotonic")

    return nbtypes.int64(arr, idx), codegen
