"""The steps of an engine: :func:`step_along`, the one loop that steps a compiled engine along a token sequence (the
worker's timed loop, batch mode's batch steps and every command that drives an engine by hand), and the rows a
worker shares with its parent through memory-mapped files in /dev/shm: :class:`StepLog` (the running sample's
steps, or batch mode's batch steps) and :class:`SlotJournal` (batch mode: each sequence in flight).

Plain memory writes, no message and no wake-up of the parent between two timed masks; both processes map the file
and the parent unlinks it once the child has attached, so whatever the child wrote before a crash or a kill is
still read. The columns are named by a :class:`~gcdbench.experiments.rowlayout.RowLayout` of the result schema.
"""
from __future__ import annotations

import os
import re
import time

import numpy as np

from gcdbench.experiments.jitwatch import WATCH, repair_numba_cache
from gcdbench.experiments.rowlayout import WORKER_BATCH_STEP, WORKER_STEP, RowLayout
from gcdbench.parsers.base import EngineError, Outcome, mask_get


# --------------------------------------------------------------------------------------------------------------
# stepping an engine along a token sequence
# --------------------------------------------------------------------------------------------------------------
def step_verdict(allowed: bool, last: bool, tok: int, step: int) -> tuple[Outcome | None, str]:
    """What one mask says of the sample (single and batch mode alike): at the last step EOS must be allowed
    (``ok``/``no_eos``), before it the oracle token (``rejected``); ``(None, "")``: go on and commit ``tok``."""
    if last:
        return (Outcome.OK, "") if allowed else (Outcome.NO_EOS, "EOS not allowed at the end")
    if not allowed:
        return Outcome.REJECTED, f"oracle token {tok} not in the mask at step {step}"
    return None, ""


def crash_text(err: BaseException) -> str:
    """A crash's message: the exception, or for a damaged numba cache file the repair (the file is removed, and a
    resume runs the sample again: :data:`~gcdbench.experiments.jitwatch.DAMAGED_CACHE`)."""
    return repair_numba_cache(err) or f"{type(err).__name__}: {err}"


def _failure(err: Exception, where: str) -> tuple:
    """The outcome of an engine's exception at ``where``: its own typed error, or a crash with its text."""
    if isinstance(err, EngineError):
        return Outcome.ENGINE_ERROR, f"{where}: {err}"
    return Outcome.CRASH, f"{where}: {crash_text(err)}"


def step_along(engine, steps, mask, on_mask=None, on_commit=None, allows=mask_get,
               raise_errors: bool = False) -> tuple[Outcome, str]:
    """Teacher-force ``engine`` (compiled) along ``steps`` (token ids, the EOS id last) from its empty prefix and
    return ``(outcome, message)``: the one loop that drives an engine, in the worker's timed loop and everywhere
    else.

    ``engine.reset()``, then at each step: ``engine.fill_mask(mask)``, the only call inside the timer
    (``time.perf_counter_ns``; numba's compiler-lock count :data:`~gcdbench.experiments.jitwatch.WATCH` is read just
    outside it: ``jit``, the loads and compiles inside the mask); ``allows(mask, tok)`` checks the step's token;
    ``on_mask(step, mask, allowed, mask_ns, jit)``; the verdict (:func:`step_verdict`: the last step must allow
    EOS, the others their oracle token); then ``engine.commit(tok)``, timed on the same clock, and
    ``on_commit(step, tok, commit_ns)`` (also when the engine refused the token). A callback that returns anything
    but None ends the walk: what it returned, an ``(outcome, message)`` pair, is the result (a time budget, for
    example). The walk ends at the first of: ``on_mask``'s stop, the verdict, a refused commit (``rejected``),
    ``on_commit``'s stop.

    An exception raised by the engine's ``fill_mask`` or ``commit`` is the outcome ``engine_error``
    (:class:`~gcdbench.parsers.base.EngineError`) or ``crash`` (any other; :func:`crash_text`), its message naming
    the step; ``raise_errors=True`` lets it propagate instead. Exceptions of the callbacks always propagate.
    ``allows`` and a ``mask`` of another shape serve an engine-like object over several sequences (batch mode's
    warm-up: every row must allow the token).

    ``steps`` may also be an iterator without a length: a walk with no last step (no EOS verdict), which a
    callback's stop ends. Batch mode's :func:`~gcdbench.experiments.worker_batch.run_batch` walks so, one step per
    batch step, over the live sequences as one engine whose verdicts and commits are each sequence's own (its
    callbacks judge them, ``allows`` passes)."""
    perf = time.perf_counter_ns
    engine.reset()
    last = len(steps) - 1 if hasattr(steps, "__len__") else -1   # -1: an endless walk (batch mode)
    for step, tok in enumerate(steps):
        try:
            j0 = WATCH.locks
            t0 = perf()
            engine.fill_mask(mask)
            t1 = perf()
            jit = WATCH.locks - j0
        except Exception as err:
            if raise_errors:
                raise
            return _failure(err, f"step {step}")
        allowed = allows(mask, tok)
        if on_mask is not None:
            stop = on_mask(step, mask, allowed, t1 - t0, jit)
            if stop is not None:
                return stop
        outcome, message = step_verdict(allowed, step == last, tok, step)
        if outcome is not None:
            return outcome, message
        try:
            t2 = perf()
            ok = engine.commit(tok)
            t3 = perf()
        except Exception as err:
            if raise_errors:
                raise
            return _failure(err, f"commit at step {step}")
        stop = None if on_commit is None else on_commit(step, tok, t3 - t2)
        if not ok:
            return Outcome.REJECTED, f"engine refused to commit token {tok} at step {step}"
        if stop is not None:
            return stop
    raise ValueError("step_along: the steps ended without a verdict (a sequence ends with the EOS id; an endless walk "
                     "ends by a callback's stop)")


def _remove_stale(folder: str, prefix: str) -> None:
    """Remove ``<prefix><pid>-*`` files of processes that no longer exist."""
    import psutil

    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = re.match(re.escape(prefix) + r"(\d+)-", name)
        if m and not psutil.pid_exists(int(m.group(1))):
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass


def _shm_file(prefix: str) -> str:
    """A new empty file in /dev/shm (memory, not disk) named ``<prefix><this pid>-...``; stale ones go first."""
    import tempfile

    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    _remove_stale(shm or tempfile.gettempdir(), prefix)
    fd, path = tempfile.mkstemp(prefix=f"{prefix}{os.getpid()}-", suffix=".f64", dir=shm)
    os.close(fd)
    return path


class _SharedFile:
    """A memory-mapped file shared by the parent and the worker (``path``, ``buf``): unlink and close."""

    path: str
    buf: np.ndarray | None

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def close(self, unlink: bool = False) -> None:
        self.buf = None
        if unlink:
            self.unlink()


class StepLog(_SharedFile):
    """The running sample's rows in a small memory-mapped file shared by the parent and the child.

    The child stores a row and then the row count with plain memory writes: no system call and no wake-up of
    the parent between two timed masks (a pipe message per step did both, and on a 2-core machine the parent's
    wake-ups evict the engine's caches). Both map the file; once the child has attached, the parent unlinks it
    (the mapping lives on, nothing is left in /dev/shm if either dies), so every row written before a timeout, a
    crash or an ``exit`` is still read by the parent. Row 0 holds the count; a sample longer than ``capacity``
    steps is flushed over the channel in batches of ``capacity`` rows.
    """

    PREFIX = "gcdbench-steps-"

    def __init__(self, path: str, capacity: int | None = None, layout: RowLayout = WORKER_STEP):
        self.path = path
        self.layout = layout
        if capacity is not None:   # the parent creates the file
            with open(path, "wb") as fh:
                fh.truncate((capacity + 1) * layout.width * 8)
        self.buf = np.memmap(path, dtype=np.float64, mode="r+").reshape(-1, layout.width)
        self.capacity = self.buf.shape[0] - 1
        self._commit = layout.index.get("commit_us")

    @classmethod
    def create(cls, capacity: int = 1 << 14, layout: RowLayout = WORKER_STEP) -> "StepLog":
        """A new log in /dev/shm (memory, not disk), named after this process; logs left there by runs whose
        process no longer exists (killed before the child attached) are removed first."""
        return cls(_shm_file(cls.PREFIX), capacity, layout)

    @classmethod
    def remove_stale(cls, folder: str) -> None:
        _remove_stale(folder, cls.PREFIX)

    @property
    def count(self) -> int:
        return int(self.buf[0, 0])

    def reset(self) -> None:
        self.buf[0, 0] = 0

    def append(self, row) -> None:
        n = int(self.buf[0, 0])
        self.buf[n + 1] = row
        self.buf[0, 0] = n + 1

    def set_commit_us(self, us: float) -> None:
        self.buf[int(self.buf[0, 0]), self._commit] = us

    def raw_rows(self) -> list[list[float]]:
        """The stored rows as lists of floats in the layout's order (:meth:`RowLayout.columns` types them)."""
        return self.buf[1: self.count + 1].tolist()



class SlotJournal(_SharedFile):
    """Rows of the sequences in flight in batch mode, one region per slot, in a memory-mapped file shared with
    the parent (like :class:`StepLog`: plain memory writes, no wake-up of the parent).

    Slot ``i`` holds a header ``[work index of its sequence (-1: none), row count]`` and up to ``capacity`` rows
    of :data:`~gcdbench.experiments.rowlayout.WORKER_BATCH_STEP`. A sequence's rows go out with its ``seq`` message
    when it ends, and the slot is
    cleared; so after a worker death the parent finds in the journal exactly the sequences that were in flight,
    with every step they finished.
    """

    PREFIX = "gcdbench-journal-"
    LAYOUT = WORKER_BATCH_STEP
    WIDTH = WORKER_BATCH_STEP.width
    _COMMIT = WORKER_BATCH_STEP.index["commit_us"]

    def __init__(self, path: str, slots: int | None = None, capacity: int | None = None):
        self.path = path
        if slots is not None:   # the parent creates the file: a word with the slot count, then the slots
            with open(path, "wb") as fh:
                fh.truncate(8 * (1 + slots * (capacity + 1) * self.WIDTH))
        mm = np.memmap(path, dtype=np.float64, mode="r+")
        if slots is not None:
            mm[0] = slots
        self.slots = int(mm[0])
        self.buf = mm[1:].reshape(self.slots, -1, self.WIDTH)
        self.capacity = self.buf.shape[1] - 1
        if slots is not None:
            self.buf[:, 0, 0] = -1
            self.buf[:, 0, 1] = 0

    @classmethod
    def create(cls, slots: int, capacity: int) -> "SlotJournal":
        return cls(_shm_file(cls.PREFIX), slots, capacity)

    def begin(self, slot: int, work_index: int) -> None:
        self.buf[slot, 0, 1] = 0
        self.buf[slot, 0, 0] = work_index

    def clear(self, slot: int) -> None:
        self.buf[slot, 0, 0] = -1
        self.buf[slot, 0, 1] = 0

    def append(self, slot: int, row) -> None:
        n = int(self.buf[slot, 0, 1])
        if n < self.capacity:   # the parent sizes the journal for the longest sample: never full
            self.buf[slot, n + 1] = row
            self.buf[slot, 0, 1] = n + 1

    def set_commit_us(self, slot: int, us: float) -> None:
        n = int(self.buf[slot, 0, 1])
        if n:
            self.buf[slot, n, self._COMMIT] = us

    def columns(self, slot: int) -> dict[str, list]:
        """The slot's rows as typed columns (``{name: values}``)."""
        n = int(self.buf[slot, 0, 1])
        return self.LAYOUT.columns(self.buf[slot, 1: n + 1].tolist())

    def in_flight(self) -> dict[int, dict[str, list]]:
        """work index -> columns, for every slot holding a sequence."""
        return {int(self.buf[i, 0, 0]): self.columns(i) for i in range(self.slots) if self.buf[i, 0, 0] >= 0}


