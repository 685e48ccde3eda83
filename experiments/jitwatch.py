"""Which just-in-time compiles happen, and when: a listener on numba's event API (``numba.core.event``).

numba takes its global compiler lock (event ``numba:compiler_lock``) every time a dispatcher meets a signature it
has no machine code for in memory: it then either loads the code from its on-disk cache or compiles it (event
``numba:compile``, with the dispatcher). Code already loaded is called without the lock. So the number of lock
acquisitions between two clock readings says whether anything was loaded or compiled in between, at the cost of
reading one integer; the compile events say which functions were compiled, and for how long.

The worker reads :attr:`JitWatch.locks` around every timed mask (a step that took the lock is marked in the rows,
counted in the cell's line and left out of the per-mask statistics) and reports the compile seconds and the
functions compiled in each phase (compile, warm-up, samples). numba.cuda's dispatchers take the same lock.
"""
from __future__ import annotations

import time


class JitWatch:
    """Counts numba's compiler-lock acquisitions and compiles from :meth:`install` on (process-wide)."""

    def __init__(self):
        self.locks = 0          # compiler-lock acquisitions: a cache load or a compile (nested ones count too)
        self.compiles = 0       # outermost compiles (a compile's callees are compiled inside it)
        self.compile_s = 0.0    # seconds inside outermost compiles
        self.compiled: dict[str, int] = {}   # function -> compiles (outermost and nested)
        self._depth = 0
        self._t0 = 0.0
        self.installed = False

    def install(self) -> "JitWatch":
        """Start listening; False ``installed`` where numba is missing (nothing of ours is jitted then)."""
        try:
            from numba.core import event
        except ImportError:
            return self
        watch = self

        class _Lock(event.Listener):
            def on_start(self, ev):
                watch.locks += 1

            def on_end(self, ev):
                pass

        class _Compile(event.Listener):
            def on_start(self, ev):
                if watch._depth == 0:
                    watch._t0 = time.perf_counter()
                watch._depth += 1
                disp = (ev.data or {}).get("dispatcher")
                fn = getattr(disp, "py_func", None)
                name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}" if fn else "?"
                watch.compiled[name] = watch.compiled.get(name, 0) + 1

            def on_end(self, ev):
                watch._depth -= 1
                if watch._depth == 0:
                    watch.compiles += 1
                    watch.compile_s += time.perf_counter() - watch._t0

        event.register("numba:compiler_lock", _Lock())
        event.register("numba:compile", _Compile())
        self.installed = True
        return self

    def snapshot(self) -> dict:
        """Totals so far (a phase's figures are the difference of two snapshots: :func:`since`)."""
        return {"locks": self.locks, "compiles": self.compiles, "compile_s": self.compile_s,
                "compiled": dict(self.compiled)}

    def since(self, snap: dict) -> dict:
        """What happened after ``snap``: lock acquisitions, compiles, compile seconds and the functions compiled."""
        names = {k: v - snap["compiled"].get(k, 0) for k, v in self.compiled.items()}
        return {"jit_locks": self.locks - snap["locks"], "jit_compiles": self.compiles - snap["compiles"],
                "jit_s": round(self.compile_s - snap["compile_s"], 6),
                "jit_functions": sorted(k for k, v in names.items() if v > 0)}


#: the process's watch (the worker installs it once, before anything is imported or compiled)
WATCH = JitWatch()


# --------------------------------------------------------------------------------------------------------------
# a damaged numba cache
# --------------------------------------------------------------------------------------------------------------
#: in the message of a sample that crashed on a damaged numba cache file (repaired then): a resume runs it again
DAMAGED_CACHE = "numba cache file damaged"


def repair_numba_cache(err: BaseException) -> str | None:
    """If ``err`` was raised while numba read one of its on-disk cache files (a file cut short by a full disk or a
    killed write, or overwritten: numba then fails on every load and never writes the file again), remove that
    function's index and data files, so that the next compile rebuilds them, and return one line naming them and
    the error; None for any other error."""
    import glob
    import os

    found = None
    tb = err.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_filename.replace("\\", "/").endswith("numba/core/caching.py"):
            obj = frame.f_locals.get("self")
            obj = getattr(obj, "_cache_file", obj)
            if hasattr(obj, "_index_path"):
                found = obj
        tb = tb.tb_next
    if found is None:
        return None
    index = found._index_path
    removed = []
    for path in [index, *sorted(glob.glob(glob.escape(index[: -len(".nbi")]) + ".*.nbc"))]:
        try:
            os.unlink(path)
            removed.append(os.path.basename(path))
        except FileNotFoundError:
            pass
        except OSError as why:   # a read-only cache: the caller's error stands, with the fix
            return (f"{DAMAGED_CACHE}: {index} ({type(err).__name__}: {str(err)[:120]}); it could not be removed "
                    f"({why.strerror}): delete it, or point NUMBA_CACHE_DIR at a writable empty folder")
    return (f"{DAMAGED_CACHE}: {os.path.dirname(index)}/{', '.join(removed) or os.path.basename(index)} "
            f"({type(err).__name__}: {str(err)[:120]}); removed, numba compiles it anew")
