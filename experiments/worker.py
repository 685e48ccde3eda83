"""The child process of a run: compiles one engine once, then teacher-forces samples sent by the parent.

Messages (over a multiprocessing Pipe), parent -> child: ``("sample", sample_id, token_ids, audit_steps)`` or
``("stop",)``; child -> parent: ``("ready", info)``, ``("compile_error", message)``, ``("result", dict)``.
Only the fill call is inside the mask timer; the runner, not the engine, checks the oracle token.
"""
from __future__ import annotations

import os
import resource
import time
import traceback

import numpy as np

from gcdbench.parsers.base import CompileError, Outcome, allocate_mask, mask_get


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _popcount(mask: np.ndarray, vocab_size: int) -> int:
    return int(np.unpackbits(mask.view(np.uint8), bitorder="little")[:vocab_size].sum())


def teacher_force(engine, token_ids: list[int], eos_id: int, vocab_size: int, audit_steps=(), token_bytes=None):
    """Run one sample; returns (outcome, message, rows, audited masks). One row per mask computed."""
    mask = allocate_mask(vocab_size)
    perf = time.perf_counter_ns
    rows = {k: [] for k in ("step", "prefix_tokens", "prefix_bytes", "mask_us", "commit_us", "n_allowed", "oracle_allowed")}
    audited = {}
    audit_steps = set(audit_steps)
    engine.reset()
    nbytes = 0
    steps = list(token_ids) + [eos_id]
    for step, tok in enumerate(steps):
        t0 = perf()
        engine.fill_mask(mask)
        t1 = perf()
        allowed = mask_get(mask, tok)
        rows["step"].append(step)
        rows["prefix_tokens"].append(step)
        rows["prefix_bytes"].append(nbytes)
        rows["mask_us"].append((t1 - t0) / 1000.0)
        rows["n_allowed"].append(_popcount(mask, vocab_size))
        rows["oracle_allowed"].append(allowed)
        if step in audit_steps:
            audited[step] = mask.copy()
        if tok == eos_id and step == len(steps) - 1:
            rows["commit_us"].append(0.0)
            return (Outcome.OK if allowed else Outcome.NO_EOS), "" if allowed else "EOS not allowed at the end", rows, audited
        if not allowed:
            rows["commit_us"].append(0.0)
            return Outcome.REJECTED, f"oracle token {tok} not in the mask at step {step}", rows, audited
        t2 = perf()
        ok = engine.commit(tok)
        rows["commit_us"].append((perf() - t2) / 1000.0)
        if not ok:
            return Outcome.REJECTED, f"engine refused to commit token {tok} at step {step}", rows, audited
        if token_bytes is not None:
            nbytes += len(token_bytes[tok])
    raise AssertionError("unreachable")


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
            engine.fill_mask(allocate_mask(tokenizer.vocab_size))
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
        try:
            outcome, message, rows, audited = teacher_force(
                engine, token_ids, tokenizer.eos_id, tokenizer.vocab_size, audit_steps, tokenizer.token_bytes
            )
        except Exception as err:
            outcome, message, rows, audited = Outcome.CRASH, f"{type(err).__name__}: {err}", None, {}
        conn.send(("result", {
            "sample_id": sample_id, "outcome": outcome.value, "message": message, "rows": rows,
            "audited": audited, "wall_s": time.perf_counter() - t0, "peak_rss_mb": _peak_rss_mb(),
        }))
