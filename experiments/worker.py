"""The child process of a run: compiles one engine once, then teacher-forces samples sent by the parent.

Messages (over a multiprocessing Pipe), parent -> child: ``("sample", sample_id, token_ids, audit_steps)`` or
``("stop",)``; child -> parent: ``("ready", info)``, ``("compile_error", message)``, ``("steps", rows)``
(only when a sample outgrows the StepLog) and ``("result", dict)``. Each finished step goes to the shared
StepLog at once, so that a sample cut short by a time limit keeps it. Only the fill call is inside the mask timer; the runner, not the engine, checks the
oracle token.
"""
from __future__ import annotations

import os
import resource
import time
import traceback

import numpy as np

from gcdbench.parsers.base import CompileError, EngineError, Outcome, allocate_mask, mask_count, mask_get

ROW_FIELDS = ("step", "prefix_tokens", "prefix_bytes", "mask_us", "commit_us", "n_allowed", "oracle_allowed")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


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


class StepLog:
    """The running sample's rows in a small memory-mapped file shared by the parent and the child.

    The child stores a row and then the row count with plain memory writes: no system call and no wake-up of
    the parent between two timed masks (a pipe message per step did both, and on a 2-core machine the parent's
    wake-ups evict the engine's caches). The file outlives the child, so every row written before a timeout,
    a crash or an ``exit`` is still read by the parent. Row 0 holds the count; a sample longer than
    ``capacity`` steps is flushed over the pipe in batches of ``capacity`` rows.
    """

    def __init__(self, path: str, capacity: int | None = None):
        self.path = path
        if capacity is not None:   # the parent creates the file
            with open(path, "wb") as fh:
                fh.truncate((capacity + 1) * len(ROW_FIELDS) * 8)
        self.buf = np.memmap(path, dtype=np.float64, mode="r+").reshape(-1, len(ROW_FIELDS))
        self.capacity = self.buf.shape[0] - 1

    @classmethod
    def create(cls, capacity: int = 1 << 14) -> "StepLog":
        import tempfile

        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        fd, path = tempfile.mkstemp(prefix="gcdbench-steps-", suffix=".f64", dir=shm)
        os.close(fd)
        return cls(path, capacity)

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

    def close(self, unlink: bool = False) -> None:
        self.buf = None
        if unlink:
            try:
                os.unlink(self.path)
            except OSError:
                pass


class _Sender:
    """Stores each finished step in the shared StepLog (outside the timers), so that a sample cut short by
    a time limit, a crash or an exit keeps every step it finished."""

    def __init__(self, conn, log: StepLog):
        self.conn, self.log = conn, log

    def __call__(self, row):
        if self.log.count == self.log.capacity:
            self.conn.send(("steps", self.log.rows()))
            self.log.reset()
        self.log.append(row)

    def commit_time(self, us: float):
        self.log.set_commit_us(us)


def worker_main(conn, log_path: str, engine_name: str, engine_opts: dict, grammar, tokenizer_name: str,
                warmup: bool = True):
    """Entry point of the child process; ``log_path`` is the parent's StepLog file."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from gcdbench.parsers.registry import create_engine
    from gcdbench.parsers.tokenizers import load_tokenizer

    try:
        tokenizer = load_tokenizer(tokenizer_name)
        engine = create_engine(engine_name, **engine_opts)
        t0 = time.perf_counter()
        engine.compile(grammar, tokenizer)
        init_s = time.perf_counter() - t0
        warm = None
        if warmup:  # one untimed mask at the empty prefix: JIT and lazy tables are not charged to step 0
            t1 = time.perf_counter()
            engine.reset()
            try:
                engine.fill_mask(allocate_mask(tokenizer.vocab_size))
            except EngineError:
                pass
            warm = time.perf_counter() - t1
        conn.send(("ready", {
            "init_s": init_s, "warmup_s": warm, "version": engine.version(), "engine_info": engine.info(),
            "peak_rss_compile_mb": _peak_rss_mb(),
        }))
    except CompileError as err:
        conn.send(("compile_error", str(err)))
        return
    except Exception:
        conn.send(("compile_error", "engine crashed while compiling:\n" + traceback.format_exc(limit=8)))
        return
    sender = _Sender(conn, StepLog(log_path))
    while True:
        msg = conn.recv()
        if msg[0] == "stop":
            return
        _, sample_id, token_ids, audit_steps = msg
        t0 = time.perf_counter()
        outcome, message, audited = teacher_force(
            engine, token_ids, tokenizer.eos_id, tokenizer.vocab_size, sender, audit_steps, tokenizer.token_bytes
        )
        conn.send(("result", {
            "sample_id": sample_id, "outcome": outcome.value, "message": message, "audited": audited,
            "wall_s": time.perf_counter() - t0, "peak_rss_mb": _peak_rss_mb(),
        }))
