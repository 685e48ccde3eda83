"""A faster scheduler for numba's CUDA simulator (tests only; same semantics, different thread handling).

The stock simulator (``NUMBA_ENABLE_CUDASIM=1``) starts one Python thread per CUDA thread and has the launching
thread poll them in a busy loop to release each ``syncthreads``; under the GIL that poll loop takes most of the
time (a Qwen3-size Valiant mask: about a minute). :func:`install` replaces the block runner:

* a block of one thread runs in the launching thread (``threadIdx`` 0, ``syncthreads`` has nothing to wait for);
* a larger block runs its threads with a ``threading.Barrier`` for ``syncthreads`` (the launching thread only
  joins them); an exception in one thread breaks the barrier, so the others stop, and it is re-raised.

Blocks still run one after another, as in the stock simulator, and everything else (the fake ``cuda`` module,
atomics, arrays) is numba's. The kernel tests run both schedulers: the stock one on small inputs, this one
on Qwen3-size inputs.
"""
from __future__ import annotations

import threading


def install() -> None:
    from numba.cuda.simulator import kernel as K
    from numba.cuda.simulator.kernelapi import Dim3

    if getattr(K.BlockManager, "_gcdbench_fast", False):
        return

    def sync_barrier(self):
        self._manager._barrier.wait()

    def run(self, grid_point, *args):
        dims = list(__import__("numpy").ndindex(*self._block_dim))
        if len(dims) == 1:
            t = threading.current_thread()
            saved = {k: getattr(t, k, None) for k in ("blockIdx", "threadIdx", "syncthreads", "thread_id", "abort")}
            t.blockIdx, t.threadIdx, t.thread_id, t.abort = Dim3(*grid_point), Dim3(0, 0, 0), 0, False
            t.syncthreads = lambda: None
            try:
                self._f(*args)
            finally:
                for k, v in saved.items():
                    setattr(t, k, v)
            return
        self._barrier = threading.Barrier(len(dims))
        threads = []
        for block_point in dims:
            t = K.BlockThread(lambda: self._f(*args), self, grid_point, block_point, self._debug)
            t.syncthreads = sync_barrier.__get__(t)
            threads.append(t)

        for t in threads:
            t.start()
        first_error = None
        pending = list(threads)
        while pending:
            for t in pending:
                t.join(0.05)
                if t.exception and first_error is None:
                    first_error = t.exception
                    self._barrier.abort()     # the others stop at their next syncthreads
            pending = [t for t in pending if t.is_alive()]
        for t in threads:
            if t.exception and first_error is None:
                first_error = t.exception
        if first_error is not None:
            raise first_error[0].with_traceback(first_error[1])

    K.BlockManager.run = run
    K.BlockManager._gcdbench_fast = True
