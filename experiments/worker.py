"""The child process of a run: compiles one engine once, then teacher-forces samples sent by the parent.

Messages (over a multiprocessing Pipe), parent -> child: ``("sample", sample_id, token_ids, audit_steps)`` or
``("stop",)``; child -> parent: ``("ready", info)``, ``("compile_error", message)``, ``("steps", rows)``
(each finished step, so that a sample cut short by a time limit keeps them) and
``("result", dict)``. Only the fill call is inside the mask timer; the runner, not the engine, checks the
oracle token.
"""
from __future__ import annotations

import os
import resource
import time
import traceback

import numpy as np

from gcdbench.parsers.base import CompileError, EngineError, Outcome, allocate_mask, mask_get

ROW_FIELDS = ("step", "prefix_tokens", "prefix_bytes", "mask_us", "commit_us", "n_allowed", "oracle_allowed")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _popcount(mask: np.ndarray, vocab_size: int) -> int:
    return int(np.unpackbits(mask.view(np.uint8), bitorder="little")[:vocab_size].sum())


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
        if step in audit_steps:
            audited[step] = mask.copy()
        # the row goes out before the commit, so a commit that kills the process still leaves the mask's row
        emit((step, step, nbytes, (t1 - t0) / 1000.0, 0.0, _popcount(mask, vocab_size), allowed))
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


class _Sender:
    """Sends each finished step to the parent at once (outside the timers), so that a sample cut short by
    a time limit, a crash or an exit keeps every step it finished."""

    def __init__(self, conn):
        self.conn = conn

    def __call__(self, row):
        self.conn.send(("steps", [row]))

    def commit_time(self, us: float):
        self.conn.send(("commit_us", us))


def worker_main(conn, engine_name: str, engine_opts: dict, grammar, tokenizer_name: str, warmup: bool = True):
    """Entry point of the child process."""
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
    while True:
        msg = conn.recv()
        if msg[0] == "stop":
            return
        _, sample_id, token_ids, audit_steps = msg
        t0 = time.perf_counter()
        outcome, message, audited = teacher_force(
            engine, token_ids, tokenizer.eos_id, tokenizer.vocab_size, _Sender(conn), audit_steps, tokenizer.token_bytes
        )
        conn.send(("result", {
            "sample_id": sample_id, "outcome": outcome.value, "message": message, "audited": audited,
            "wall_s": time.perf_counter() - t0, "peak_rss_mb": _peak_rss_mb(),
        }))
