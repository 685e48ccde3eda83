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


# -- numba's on-disk cache, keyed by every source a kernel is built from ---------------------------------------------
#: folder -> the extra files (outside it) whose text keys the cache of every cached function defined in the folder
_STAMPED: dict[str, tuple[str, ...]] = {}


def _digest(paths: tuple[str, ...]) -> str:
    import hashlib
    import os

    h = hashlib.sha256()
    for path in paths:
        st = os.stat(path)
        h.update(path.encode() + b"\0" + _file_hash(path, st.st_mtime_ns, st.st_size))
    return h.hexdigest()


def _file_hash(path: str, mtime_ns: int, size: int, _memo: dict = {}) -> bytes:   # noqa: B006 - the memo
    """The file's sha256, computed again when its mtime or size changes (as numba's own stamp does)."""
    import hashlib

    key = (path, mtime_ns, size)
    if key not in _memo:
        with open(path, "rb") as f:
            _memo[key] = hashlib.sha256(f.read()).digest()
    return _memo[key]


def _imports_here(path: str, mtime_ns: int, size: int, _memo: dict = {}) -> frozenset:   # noqa: B006 - the memo
    """The files of ``path``'s own folder that its module imports, anywhere in it (function bodies too):
    ``from .x import ...``, ``from . import x``, and absolute imports through the folder's package name
    (``gcdbench.parsers.valiant.x``); read again when its mtime or size changes."""
    import ast
    import os

    key = (path, mtime_ns, size)
    if key not in _memo:
        folder = os.path.dirname(path)
        pkg = os.path.basename(folder)
        names = set()
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                parts = (node.module or "").split(".") if node.module else []
                if node.level == 1:
                    names.update(parts[:1] or [a.name for a in node.names])
                elif node.level == 0 and pkg in parts:
                    after = parts[len(parts) - parts[::-1].index(pkg):]
                    names.update(after[:1] or [a.name for a in node.names])
            elif isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    if pkg in parts[:-1]:
                        names.add(parts[len(parts) - parts[::-1].index(pkg)])
        files = (os.path.join(folder, n + ".py") for n in names)
        _memo[key] = frozenset(p for p in files if os.path.isfile(p))
    return _memo[key]


def cache_sources(py_file: str) -> tuple[str, ...]:
    """The sources whose text keys numba's cache of the functions defined in ``py_file`` (a file of a folder
    registered with :func:`stamp_cache_with`): the file, every file of its folder that it imports, directly or
    through another (the only modules its jitted code can reach by global name: callees, records, constants), and
    the folder's extra files. A file of the folder that none of them imports (the engine, say) keys nothing
    (subpackages are not followed: the registered folders have none)."""
    import os

    py_file = os.path.abspath(py_file)
    seen, todo = {py_file}, [py_file]
    while todo:
        path = todo.pop()
        st = os.stat(path)
        for dep in _imports_here(path, st.st_mtime_ns, st.st_size):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return tuple(sorted(seen)) + _STAMPED[os.path.dirname(py_file)]


def _stamped_locator(base):
    """``base`` (one of numba's cache locators), used only for functions defined in a folder registered with
    :func:`stamp_cache_with`, whose source stamp also carries the digest of the function's sources
    (:func:`cache_sources`)."""
    import os

    class Stamped(base):
        @classmethod
        def from_function(cls, py_func, py_file):
            if os.path.dirname(os.path.abspath(py_file)) not in _STAMPED:
                return None
            return super().from_function(py_func, py_file)

        def get_source_stamp(self):
            return (super().get_source_stamp(), _digest(cache_sources(self._py_file)))

    Stamped.__name__ = Stamped.__qualname__ = "Stamped" + base.__name__
    return Stamped


def stamp_cache_with(folder: str, *extra: str) -> None:
    """Key numba's on-disk cache of every ``cache=True`` function defined in ``folder`` by the text of the sources
    it can be built from (:func:`cache_sources`: its file, the files of ``folder`` that file imports, directly or
    not, and the ``extra`` files), not by its own file alone. numba checks only the file a function is defined in,
    so a caller in one file keeps the machine code it inlined from a callee in another file after the callee
    changes (stale code, even a crash on a changed record). Call it in the package's ``__init__``, before any of
    its kernels is defined. A change to one of a function's sources recompiles it, once; a change to a file its
    file does not import (the engine) recompiles nothing."""
    import os

    from numba.core import caching

    folder = os.path.abspath(folder)
    _STAMPED[folder] = tuple(sorted(os.path.abspath(e) for e in extra))
    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl   # numba >= 0.61 names it without "_"
    classes = impl._locator_classes
    if any(getattr(c, "_gcdbench_stamped", False) for c in classes):
        return
    bases = [getattr(caching, n, None) or getattr(caching, "_" + n)
             for n in ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator")]
    stamped = [_stamped_locator(b) for b in bases]
    for c in stamped:
        c._gcdbench_stamped = True
    classes[:0] = stamped


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
