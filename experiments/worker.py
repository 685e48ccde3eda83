"""The child process of a run (``python -m gcdbench.experiments.worker``): compiles one engine once, runs one
untimed warm-up sample, then teacher-forces the samples the parent sends.

Messages (framed pickles over :class:`gcdbench.parsers.limited.Channel`), parent -> child:
``("init", engine, options, grammar, tokenizer, warmup_ids, steplog_path)``, then ``("sample", sample_id, token_ids,
audit_steps)`` or ``("stop",)``. Child -> parent: ``("attached",)`` once the StepLog is mapped (the parent then
unlinks its file), ``("progress", text)`` while compiling (the engine's log records), ``("compiled", info)`` or
``("compile_error", {"message", "kind"})``, ``("ready", warmup)``, then per sample ``("steps", rows)`` (only when a
sample outgrows the StepLog) and ``("result", dict)``.

Batch mode (:func:`run_batch`; the init message then carries an 8th element, ``{"size": B, "journal": path,
"warmup_budget_s": s}``): after ``("ready", warmup)`` the parent sends ``("batch", work, sample_timeout_s,
run_left_s)`` with the whole queue; the child answers ``("seq", dict)`` as each sequence ends (its rows with it),
``("bsteps", rows)`` when the batch-step log is full, and ``("batch_done", dict)`` at the end. Per-sequence rows
go to a :class:`SlotJournal` (one region per slot, shared with the parent like the StepLog), so that a worker
that dies or is killed leaves the rows of every sequence in flight.

Each finished step goes to the shared StepLog at once, so that a sample cut short by a limit or a crash keeps it.
Only the fill call is inside the mask timer; the runner, not the engine, checks the oracle token.
"""
from __future__ import annotations

import logging
import os
import re
import resource
import time
import traceback

import numpy as np

from gcdbench.parsers.base import CompileError, EngineError, Outcome, allocate_mask, mask_count, mask_get

ROW_FIELDS = ("step", "prefix_tokens", "prefix_bytes", "mask_us", "commit_us", "n_allowed", "oracle_allowed")
#: a sequence's row in batch mode: ROW_FIELDS (``mask_us`` = the step's time / live sequences, the sequence's share)
#: plus the batch step it belongs to
BATCH_ROW_FIELDS = ROW_FIELDS + ("batch_step",)
#: one row per batch step: the ``fill_masks`` call over the ``live`` sequences (of ``size`` slots), timed as one;
#: ``commit_us`` = the commits of that step together; ``fallback``: 0, or, when the batch call raised and each
#: sequence's own ``fill_mask`` was called to find which sequence failed (the step's time is then that loop's),
#: 1 if one did, 2 if none did (the batch path failed where the single path did not)
BATCH_STEP_FIELDS = ("batch_step", "size", "live", "step_us", "commit_us", "fallback")
#: ``kind`` of a compile failure whose cause is the grammar itself (the same inputs give the same refusal): a
#: ``CompileError`` the engine raised. Time-outs (the runner's limit or the engine's own time budget, raised as
#: ``CompileTimeout``), running out of memory, a dead worker and any other exception are not.
DETERMINISTIC_COMPILE_FAILURES = ("refused",)


# --------------------------------------------------------------------------------------------------------------
# peak memory per phase
# --------------------------------------------------------------------------------------------------------------
def _vm_hwm_mb() -> float | None:
    """This process's resident high-water mark (``VmHWM`` of /proc/self/status), MB."""
    try:
        with open("/proc/self/status") as fh:
            m = re.search(r"VmHWM:\s+(\d+)\s+kB", fh.read())
        return int(m.group(1)) / 1024.0 if m else None
    except OSError:
        return None


def reset_peak_rss() -> bool:
    """Start a new phase: reset the resident high-water mark (Linux ``clear_refs`` 5). False where unsupported,
    and then the peak read afterwards is the process's lifetime peak."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """Resident high-water mark since the last :func:`reset_peak_rss` (or since start), MB."""
    hwm = _vm_hwm_mb()
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --------------------------------------------------------------------------------------------------------------
# one sample
# --------------------------------------------------------------------------------------------------------------
def teacher_force(engine, token_ids, eos_id, vocab_size, emit, audit_steps=(), token_bytes=None):
    """Run one sample, calling ``emit(row)`` after each mask (a tuple in ROW_FIELDS order, commit_us 0) and
    ``emit.commit_time(us)`` after each commit.

    Returns (outcome, message, audited masks). Engine exceptions become typed outcomes here.
    """
    mask = allocate_mask(vocab_size)
    perf = time.perf_counter_ns
    audited = {}
    audit_steps = set(audit_steps)
    engine.reset()
    nbytes = 0
    steps = list(token_ids) + [eos_id]
    last = len(steps) - 1
    for step, tok in enumerate(steps):
        try:
            t0 = perf()
            engine.fill_mask(mask)
            t1 = perf()
        except EngineError as err:
            return Outcome.ENGINE_ERROR, f"step {step}: {err}", audited
        except Exception as err:
            return Outcome.CRASH, f"step {step}: {type(err).__name__}: {err}", audited
        allowed = mask_get(mask, tok)
        if step in audit_steps or not allowed:   # a refused step is always audited (is the refusal documented?)
            audited[step] = mask.copy()
        # the row goes out before the commit, so a commit that kills the process still leaves the mask's row
        emit((step, step, nbytes, (t1 - t0) / 1000.0, 0.0, mask_count(mask, vocab_size), allowed))
        outcome, message = None, ""
        if step == last:
            outcome = Outcome.OK if allowed else Outcome.NO_EOS
            message = "" if allowed else "EOS not allowed at the end"
        elif not allowed:
            outcome, message = Outcome.REJECTED, f"oracle token {tok} not in the mask at step {step}"
        else:
            try:
                t2 = perf()
                ok = engine.commit(tok)
                emit.commit_time((perf() - t2) / 1000.0)
            except EngineError as err:
                ok, outcome, message = False, Outcome.ENGINE_ERROR, f"commit at step {step}: {err}"
            except Exception as err:
                ok, outcome, message = False, Outcome.CRASH, f"commit at step {step}: {type(err).__name__}: {err}"
            if not ok and outcome is None:
                outcome, message = Outcome.REJECTED, f"engine refused to commit token {tok} at step {step}"
        if outcome is not None:
            return outcome, message, audited
        if token_bytes is not None:
            nbytes += len(token_bytes[tok])
    raise AssertionError("unreachable")


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


class StepLog:
    """The running sample's rows in a small memory-mapped file shared by the parent and the child.

    The child stores a row and then the row count with plain memory writes: no system call and no wake-up of
    the parent between two timed masks (a pipe message per step did both, and on a 2-core machine the parent's
    wake-ups evict the engine's caches). Both map the file; once the child has attached, the parent unlinks it
    (the mapping lives on, nothing is left in /dev/shm if either dies), so every row written before a timeout, a
    crash or an ``exit`` is still read by the parent. Row 0 holds the count; a sample longer than ``capacity``
    steps is flushed over the channel in batches of ``capacity`` rows.
    """

    PREFIX = "gcdbench-steps-"

    def __init__(self, path: str, capacity: int | None = None, width: int = len(ROW_FIELDS)):
        self.path = path
        if capacity is not None:   # the parent creates the file
            with open(path, "wb") as fh:
                fh.truncate((capacity + 1) * width * 8)
        self.buf = np.memmap(path, dtype=np.float64, mode="r+").reshape(-1, width)
        self.capacity = self.buf.shape[0] - 1

    @classmethod
    def create(cls, capacity: int = 1 << 14, width: int = len(ROW_FIELDS)) -> "StepLog":
        """A new log in /dev/shm (memory, not disk), named after this process; logs left there by runs whose
        process no longer exists (killed before the child attached) are removed first."""
        return cls(_shm_file(cls.PREFIX), capacity, width)

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
        self.buf[int(self.buf[0, 0]), 4] = us

    def rows(self) -> list[tuple]:
        """The stored rows as typed tuples in ROW_FIELDS order."""
        return [(int(r[0]), int(r[1]), int(r[2]), float(r[3]), float(r[4]), int(r[5]), bool(r[6]))
                for r in self.buf[1: self.count + 1].tolist()]

    def raw_rows(self) -> list[list[float]]:
        """The stored rows as lists of floats (logs of another width than ROW_FIELDS)."""
        return self.buf[1: self.count + 1].tolist()

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def close(self, unlink: bool = False) -> None:
        self.buf = None
        if unlink:
            self.unlink()


class SlotJournal:
    """Rows of the sequences in flight in batch mode, one region per slot, in a memory-mapped file shared with
    the parent (like :class:`StepLog`: plain memory writes, no wake-up of the parent).

    Slot ``i`` holds a header ``[work index of its sequence (-1: none), row count]`` and up to ``capacity`` rows
    in BATCH_ROW_FIELDS order. A sequence's rows go out with its ``seq`` message when it ends, and the slot is
    cleared; so after a worker death the parent finds in the journal exactly the sequences that were in flight,
    with every step they finished.
    """

    PREFIX = "gcdbench-journal-"
    WIDTH = len(BATCH_ROW_FIELDS)

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
            self.buf[slot, n, 4] = us

    def rows(self, slot: int) -> list[tuple]:
        """The slot's rows as typed tuples in BATCH_ROW_FIELDS order."""
        n = int(self.buf[slot, 0, 1])
        return [(int(r[0]), int(r[1]), int(r[2]), float(r[3]), float(r[4]), int(r[5]), bool(r[6]), int(r[7]))
                for r in self.buf[slot, 1: n + 1].tolist()]

    def in_flight(self) -> dict[int, list[tuple]]:
        """work index -> rows, for every slot holding a sequence."""
        return {int(self.buf[i, 0, 0]): self.rows(i) for i in range(self.slots) if self.buf[i, 0, 0] >= 0}

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def close(self, unlink: bool = False) -> None:
        self.buf = None
        if unlink:
            self.unlink()


class _Sender:
    """Stores each finished step in the shared StepLog (outside the timers), so that a sample cut short by
    a time limit, a crash or an exit keeps every step it finished."""

    def __init__(self, chan, log: StepLog):
        self.chan, self.log = chan, log

    def __call__(self, row):
        if self.log.count == self.log.capacity:
            self.chan.send(("steps", self.log.rows()))
            self.log.reset()
        self.log.append(row)

    def commit_time(self, us: float):
        self.log.set_commit_us(us)


class _Sink:
    """Keeps the warm-up sample's mask times (never stored as rows)."""

    def __init__(self):
        self.mask_us: list[float] = []

    def __call__(self, row):
        self.mask_us.append(row[3])

    def commit_time(self, us: float):
        pass


class _Progress(logging.Handler):
    """Forwards the engine's log records (``gcdbench.*`` loggers, INFO and up) to the parent while it compiles."""

    def __init__(self, chan):
        super().__init__(logging.INFO)
        self.chan = chan

    def emit(self, record):
        try:
            self.chan.send(("progress", record.getMessage()))
        except Exception:   # noqa: BLE001 - progress is best effort
            pass


def _compile(chan, engine_name, engine_opts, grammar, tokenizer_name, prepare=None):
    """(engine, tokenizer) after sending ("compiled", info), or None after sending ("compile_error", ...).
    ``prepare(engine, tokenizer) -> dict`` (batch mode: the sequences) runs after the timed compile, before
    ``compiled``; what it returns joins the info, and an exception in it is a compile failure of kind ``crash``."""
    from gcdbench.parsers.base import CompileTimeout
    from gcdbench.parsers.registry import create_engine
    from gcdbench.parsers.tokenizers import load_tokenizer

    log = logging.getLogger("gcdbench")
    handler = _Progress(chan)
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        tokenizer = load_tokenizer(tokenizer_name)
        engine = create_engine(engine_name, **engine_opts)
        t0 = time.perf_counter()
        engine.compile(grammar, tokenizer)
        init_s = time.perf_counter() - t0
    except CompileTimeout as err:
        chan.send(("compile_error", {"message": str(err), "kind": "engine_timeout"}))
        return None
    except CompileError as err:
        chan.send(("compile_error", {"message": str(err), "kind": "refused"}))
        return None
    except Exception:   # noqa: BLE001 - any other failure is the engine's crash, reported with its traceback
        chan.send(("compile_error", {"message": "engine crashed while compiling:\n" + traceback.format_exc(limit=8),
                                     "kind": "crash"}))
        return None
    finally:
        log.removeHandler(handler)
    extra = {}
    if prepare is not None:
        try:
            extra = prepare(engine, tokenizer)
        except Exception:   # noqa: BLE001 - e.g. an engine's fork() that raises: the batch cannot run
            chan.send(("compile_error", {"message": "the engine compiled, but making the batch's sequences failed:\n"
                                         + traceback.format_exc(limit=8), "kind": "crash"}))
            return None
    chan.send(("compiled", {"init_s": init_s, "version": engine.version(), "engine_info": engine.info(),
                            "peak_rss_compile_mb": peak_rss_mb(), **extra}))
    return engine, tokenizer


def _warm_up(engine, tokenizer, ids) -> dict:
    """One untimed pass over a whole sample (masks and commits), so that JIT compilation, lazily built tables
    and first-touch page faults on every path a sample takes are not charged to the timed samples. Its first
    mask (cold, at the empty prefix) gives the time to first mask."""
    reset = reset_peak_rss()
    sink = _Sink()
    t0 = time.perf_counter()
    outcome, message, _ = teacher_force(engine, ids, tokenizer.eos_id, tokenizer.vocab_size, sink, (),
                                        tokenizer.token_bytes)
    return {"warmup_s": time.perf_counter() - t0, "first_mask_us": sink.mask_us[0] if sink.mask_us else None,
            "warmup_masks": len(sink.mask_us), "warmup_max_mask_us": max(sink.mask_us, default=None),
            "warmup_outcome": outcome.value, "warmup_message": message,
            "peak_rss_warmup_mb": peak_rss_mb(), "peak_rss_method": "vmhwm_reset" if reset else "lifetime"}


# --------------------------------------------------------------------------------------------------------------
# batch mode
# --------------------------------------------------------------------------------------------------------------
def make_sequences(engine, size: int, copy) -> tuple[list, str]:
    """``size`` sequences over one compiled grammar: ``engine`` and its forks. An engine without ``fork()`` gets
    separately compiled copies (``copy()``), so that every engine runs in batch mode; returns (sequences, how)."""
    seqs = [engine]
    how = "fork"
    for _ in range(size - 1):
        try:
            seqs.append(engine.fork())
        except NotImplementedError:
            how = "compiled copies (the engine has no fork())"
            seqs.append(copy())
    return seqs, how


def _batch_warm_up(engine, seqs, tokenizer, ids, budget_s: float) -> dict:
    """The batch-mode warm-up: every sequence teacher-forces the warm-up sample in lock-step through
    ``fill_masks`` (so that the batch path, every fork and the batch's buffers are warmed up, not only the single
    path), untimed. It starts with one sequence's mask at the empty prefix (the first mask, for TTFM), and takes
    a batch step only while that step, estimated from the last one (first: B times the first mask), still fits
    in ``budget_s``: an engine whose batch step takes longer is not kept waiting (``warmup_truncated_at_step``)."""
    reset = reset_peak_rss()
    B = len(seqs)
    out = np.zeros((B, (tokenizer.vocab_size + 31) // 32), dtype=np.int32)
    for q in seqs:
        q.reset()
    steps = list(ids) + [tokenizer.eos_id]
    perf = time.perf_counter_ns
    t_start = time.perf_counter()
    times: list[float] = []
    first = None
    outcome, message, truncated = Outcome.OK, "", None
    for step, tok in enumerate(steps):
        try:
            if first is None:
                t0 = perf()
                engine.fill_masks(seqs[:1], out[:1])
                first = (perf() - t0) / 1000.0
            estimate_s = (times[-1] if times else first * B) / 1e6
            if time.perf_counter() - t_start + estimate_s > budget_s:
                truncated = step
                break
            t0 = perf()
            engine.fill_masks(seqs, out)
            times.append((perf() - t0) / 1000.0)
        except EngineError as err:
            outcome, message = Outcome.ENGINE_ERROR, f"step {step}: {err}"
            break
        except Exception as err:   # noqa: BLE001 - recorded; the timed run attributes failures per sequence
            outcome, message = Outcome.CRASH, f"step {step}: {type(err).__name__}: {err}"
            break
        if not all(mask_get(out[i], tok) for i in range(B)):
            outcome = Outcome.NO_EOS if step == len(steps) - 1 else Outcome.REJECTED
            message = f"oracle token {tok} not in every row at step {step}"
            break
        if step == len(steps) - 1:
            break
        try:
            ok = all(q.commit(tok) for q in seqs)
        except Exception as err:   # noqa: BLE001
            outcome, message = Outcome.CRASH, f"commit at step {step}: {type(err).__name__}: {err}"
            break
        if not ok:
            outcome, message = Outcome.REJECTED, f"a sequence refused token {tok} at step {step}"
            break
    for q in seqs:
        q.reset()
    return {"warmup_s": time.perf_counter() - t_start, "first_mask_us": first,
            "warmup_masks": len(times) * B + (first is not None), "warmup_steps": len(times),
            "warmup_max_mask_us": max(times, default=None), "warmup_outcome": outcome.value,
            "warmup_message": message, "warmup_truncated_at_step": truncated,
            "peak_rss_warmup_mb": peak_rss_mb(), "peak_rss_method": "vmhwm_reset" if reset else "lifetime"}


class _Seq:
    """A sequence in flight: its sample, position and audit."""

    __slots__ = ("k", "sample_id", "steps", "audit", "pos", "nbytes", "t0", "audited", "single")

    def __init__(self, k, sample_id, ids, audit, eos):
        self.k, self.sample_id = k, sample_id
        self.steps = list(ids) + [eos]
        self.audit = set(audit)
        self.pos = self.nbytes = 0
        self.t0 = time.perf_counter()
        self.audited: dict = {}
        self.single: dict = {}


def run_batch(engine, seqs, tokenizer, work, sample_timeout_s: float, run_left_s: float, log: StepLog,
              journal: SlotJournal, chan) -> dict:
    """Teacher-force ``work`` (``[(sample_id, token_ids, audit_steps)]``) over the slots ``seqs`` in lock-step.

    One batch step = one ``fill_masks`` call over the live sequences (rows ``0..live-1`` of the mask buffer),
    timed as one; then each live sequence's oracle token is checked in its row and committed (each commit timed).
    A sequence that ends (any outcome) is reported at once (``("seq", ...)``) and its slot takes the next sample
    of ``work`` before the next step (continuous batching). Outcomes are those of single mode, per sequence:

    * the batch call raised: each live sequence's own ``fill_mask`` is called to find which one failed; that one
      ends ``engine_error``/``crash``, the others go on with the masks of that loop (the step is marked
      ``fallback``);
    * a sequence whose time in the batch passes ``sample_timeout_s`` ends ``timeout`` at the next step boundary;
    * once ``run_left_s`` has passed, every sequence in flight ends ``timeout`` and no sample is started.

    At audited steps the row is kept for the reference audit, and the sequence's own ``fill_mask`` is compared
    with it (untimed, after the timed call): batch and single path must give the same mask."""
    perf = time.perf_counter_ns
    B = len(seqs)
    vocab, eos, token_bytes = tokenizer.vocab_size, tokenizer.eos_id, tokenizer.token_bytes
    out = np.zeros((B, (vocab + 31) // 32), dtype=np.int32)
    scratch = allocate_mask(vocab)
    slots: list[_Seq | None] = [None] * B
    deadline = time.perf_counter() + run_left_s
    nxt = 0
    reset = reset_peak_rss()
    batch_step = 0
    fallbacks, first_error = 0, None

    def finish(i: int, outcome: Outcome, message: str) -> None:
        q = slots[i]
        chan.send(("seq", {
            "k": q.k, "sample_id": q.sample_id, "outcome": outcome.value, "message": message,
            "audited": q.audited, "single_check": q.single, "wall_s": time.perf_counter() - q.t0,
            "rows": journal.rows(i), "peak_rss_mb": peak_rss_mb(),
            "peak_rss_method": "vmhwm_reset" if reset else "lifetime"}))
        journal.clear(i)
        slots[i] = None

    def refill() -> None:
        nonlocal nxt
        for i in range(B):
            while slots[i] is None and nxt < len(work) and time.perf_counter() < deadline:
                sid, ids, audit = work[nxt]
                journal.begin(i, nxt)
                slots[i] = _Seq(nxt, sid, ids, audit, eos)
                nxt += 1
                try:
                    seqs[i].reset()
                except Exception as err:   # noqa: BLE001 - that sequence's crash; the slot takes the next sample
                    finish(i, Outcome.CRASH, f"reset: {type(err).__name__}: {err}")

    refill()
    while True:
        live = [i for i in range(B) if slots[i] is not None]
        if not live:
            break
        L = len(live)
        rows = out[:L]
        failed: dict[int, tuple[Outcome, str]] = {}
        fallback = 0
        try:
            t0 = perf()
            engine.fill_masks([seqs[i] for i in live], rows)
            t1 = perf()
        except Exception as err:   # noqa: BLE001 - which sequence failed: each one's own fill_mask says
            fallback = 1
            fallbacks += 1
            first_error = first_error or f"batch step {batch_step}: {type(err).__name__}: {err}"[:2000]
            t0 = perf()
            for j, i in enumerate(live):
                try:
                    seqs[i].fill_mask(rows[j])
                except EngineError as err:
                    failed[i] = (Outcome.ENGINE_ERROR, f"step {slots[i].pos}: {err}")
                except Exception as err:   # noqa: BLE001
                    failed[i] = (Outcome.CRASH, f"step {slots[i].pos}: {type(err).__name__}: {err}")
            t1 = perf()
            fallback = 1 if failed else 2
        step_us = (t1 - t0) / 1000.0
        share = step_us / L
        commits = 0.0
        for j, i in enumerate(live):
            q = slots[i]
            if i in failed:
                finish(i, *failed[i])
                continue
            mask = rows[j]
            step, tok = q.pos, q.steps[q.pos]
            allowed = mask_get(mask, tok)
            if step in q.audit:
                q.audited[step] = mask.copy()
                try:
                    seqs[i].fill_mask(scratch)
                    q.single[step] = bool(np.array_equal(scratch, mask))
                except Exception:   # noqa: BLE001 - the single path failing where the batch path did not
                    q.single[step] = False
            journal.append(i, (step, step, q.nbytes, share, 0.0, mask_count(mask, vocab), allowed, batch_step))
            outcome, message = None, ""
            if step == len(q.steps) - 1:
                outcome = Outcome.OK if allowed else Outcome.NO_EOS
                message = "" if allowed else "EOS not allowed at the end"
            elif not allowed:
                outcome, message = Outcome.REJECTED, f"oracle token {tok} not in the mask at step {step}"
            else:
                try:
                    t2 = perf()
                    ok = seqs[i].commit(tok)
                    us = (perf() - t2) / 1000.0
                    journal.set_commit_us(i, us)
                    commits += us
                except EngineError as err:
                    ok, outcome, message = False, Outcome.ENGINE_ERROR, f"commit at step {step}: {err}"
                except Exception as err:   # noqa: BLE001
                    ok, outcome = False, Outcome.CRASH
                    message = f"commit at step {step}: {type(err).__name__}: {err}"
                if not ok and outcome is None:
                    outcome, message = Outcome.REJECTED, f"engine refused to commit token {tok} at step {step}"
            if outcome is not None:
                finish(i, outcome, message)
                continue
            q.pos += 1
            q.nbytes += len(token_bytes[tok])
        if log.count == log.capacity:
            chan.send(("bsteps", log.raw_rows()))
            log.reset()
        log.append((batch_step, B, L, step_us, commits, fallback))
        batch_step += 1
        now = time.perf_counter()
        for i in range(B):
            q = slots[i]
            if q is None:
                continue
            if now > deadline:
                finish(i, Outcome.TIMEOUT, f"run time limit reached at step {q.pos} with the sequence in flight "
                                           "(limits.run_timeout_s)")
            elif now - q.t0 > sample_timeout_s:
                finish(i, Outcome.TIMEOUT, f"no result within {sample_timeout_s:g} s (limits.sample_timeout_s; "
                                           f"batch mode: the sequence's time in the batch), at step {q.pos}")
        refill()
    return {"started": nxt, "batch_steps": batch_step, "fallback_steps": fallbacks, "first_batch_error": first_error}


def main() -> None:
    """Entry point of the child process."""
    import signal

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from gcdbench.parsers.limited import Channel, die_with_parent

    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle (it kills this process)
    chan = Channel.from_env()
    try:
        _serve(chan)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        os._exit(0)   # the parent is gone or stopped listening: nothing to report to


def _serve(chan) -> None:
    msg = chan.recv()
    _, engine_name, engine_opts, grammar, tokenizer_name, warmup_ids, log_path = msg[:7]
    batch = msg[7] if len(msg) > 7 else None
    if batch:
        return _serve_batch(chan, engine_name, engine_opts, grammar, tokenizer_name, warmup_ids, log_path, batch)
    log = StepLog(log_path)
    chan.send(("attached",))
    got = _compile(chan, engine_name, engine_opts, grammar, tokenizer_name)
    if got is None:
        return
    engine, tokenizer = got
    warm = _warm_up(engine, tokenizer, warmup_ids) if warmup_ids is not None else {}
    chan.send(("ready", warm))
    sender = _Sender(chan, log)
    while True:
        msg = chan.recv()
        if msg[0] == "stop":
            return
        _, sample_id, token_ids, audit_steps = msg
        reset = reset_peak_rss()
        t0 = time.perf_counter()
        outcome, message, audited = teacher_force(
            engine, token_ids, tokenizer.eos_id, tokenizer.vocab_size, sender, audit_steps, tokenizer.token_bytes
        )
        chan.send(("result", {
            "sample_id": sample_id, "outcome": outcome.value, "message": message, "audited": audited,
            "wall_s": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb(),
            "peak_rss_method": "vmhwm_reset" if reset else "lifetime",
        }))


def _serve_batch(chan, engine_name, engine_opts, grammar, tokenizer_name, warmup_ids, log_path, batch) -> None:
    """Batch mode: compile, make the sequences, warm up (batch path), then run the queues the parent sends."""
    from gcdbench.parsers.registry import create_engine

    log = StepLog(log_path, width=len(BATCH_STEP_FIELDS))
    journal = SlotJournal(batch["journal"])
    chan.send(("attached",))
    seqs: list = []

    def prepare(engine, tokenizer) -> dict:
        def copy():
            e = create_engine(engine_name, **engine_opts)
            e.compile(grammar, tokenizer)
            return e

        t0 = time.perf_counter()
        made, how = make_sequences(engine, int(batch["size"]), copy)
        seqs.extend(made)
        return {"batch_size": len(made), "sequences": how, "sequences_s": time.perf_counter() - t0}

    got = _compile(chan, engine_name, engine_opts, grammar, tokenizer_name, prepare)
    if got is None:
        return
    engine, tokenizer = got
    warm = _batch_warm_up(engine, seqs, tokenizer, warmup_ids, float(batch["warmup_budget_s"])) \
        if warmup_ids is not None else {}
    chan.send(("ready", warm))
    while True:
        msg = chan.recv()
        if msg[0] == "stop":
            return
        _, work, sample_timeout_s, run_left_s = msg
        res = run_batch(engine, seqs, tokenizer, work, float(sample_timeout_s), float(run_left_s), log, journal, chan)
        chan.send(("batch_done", res))


if __name__ == "__main__":
    main()
