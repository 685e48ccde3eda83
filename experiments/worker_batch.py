"""Batch mode in the worker (``python -m gcdbench.experiments.worker_batch``): B sequences over one compiled
grammar, teacher-forced in lock-step, one ``fill_masks`` call per step (continuous batching).

The init message carries an 8th element, ``{"size": B, "journal": path, "warmup_budget_s": s}``; after
``("ready", warmup)`` the parent sends ``("batch", work, sample_timeout_s, run_left_s)`` with the whole queue; the
child answers ``("seq", dict)`` as each sequence ends (its rows as columns with it), ``("bsteps", rows)`` when the
batch-step log is full, and ``("batch_done", dict)`` at the end. Per-sequence rows go to a
:class:`~gcdbench.experiments.steplog.SlotJournal`, so that a worker that dies or is killed leaves the rows of
every sequence in flight; each batch step's summary row (:data:`~gcdbench.experiments.rowlayout.WORKER_BATCH_SUMMARY`)
goes to the StepLog.
"""
from __future__ import annotations

import time

import numpy as np

from gcdbench.experiments.jitwatch import WATCH
from gcdbench.experiments.rowlayout import WORKER_BATCH_STEP, WORKER_BATCH_SUMMARY
from gcdbench.experiments.steplog import SlotJournal, StepLog, step_along, step_verdict
from gcdbench.experiments.worker import compile_engine, main, peak_rss_mb, reset_peak_rss
from gcdbench.parsers.base import EngineError, Outcome, allocate_mask, mask_count, mask_get


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


class _LockStep:
    """The sequences of a batch as one engine for :func:`~gcdbench.experiments.steplog.step_along`: each mask is
    one ``fill_masks`` call over them all (a row each of the mask buffer), each token is committed to every one."""

    def __init__(self, engine, seqs):
        self.engine, self.seqs = engine, seqs

    def reset(self) -> None:
        for q in self.seqs:
            q.reset()

    def fill_mask(self, rows) -> None:
        self.engine.fill_masks(self.seqs, rows)

    def commit(self, tok: int) -> bool:
        return all(q.commit(tok) for q in self.seqs)

    @staticmethod
    def allows(rows, tok: int) -> bool:
        return all(mask_get(row, tok) for row in rows)


def _batch_warm_up(engine, seqs, tokenizer, ids, budget_s: float) -> dict:
    """The batch-mode warm-up: every sequence teacher-forces the warm-up sample in lock-step through
    ``fill_masks`` (so that the batch path, every fork and the batch's buffers are warmed up, not only the single
    path), untimed. It starts with one sequence's mask at the empty prefix (the first mask, for TTFM), and takes
    a batch step only while that step, estimated from the last one (first: B times the first mask), still fits
    in ``budget_s``: an engine whose batch step takes longer is not kept waiting (``warmup_truncated_at_step``)."""
    reset = reset_peak_rss()
    B = len(seqs)
    out = np.zeros((B, (tokenizer.vocab_size + 31) // 32), dtype=np.int32)
    steps = list(ids) + [tokenizer.eos_id]
    t_start = time.perf_counter()
    times: list[float] = []
    first: list[float] = []
    truncated = None

    def fits() -> bool:   # the next batch step, estimated from the last one (first: B times the first mask)
        estimate_s = (times[-1] if times else first[0] * B) / 1e6
        return time.perf_counter() - t_start + estimate_s <= budget_s

    def first_mask(step, rows, allowed, mask_ns, jit):
        first.append(mask_ns / 1000.0)
        return Outcome.OK, ""

    def on_mask(step, rows, allowed, mask_ns, jit):
        times.append(mask_ns / 1000.0)

    def on_commit(step, tok, commit_ns):
        nonlocal truncated
        if not fits():
            truncated = step + 1
            return Outcome.OK, ""
        return None

    outcome, message = step_along(_LockStep(engine, seqs[:1]), steps, out[:1], first_mask, allows=_LockStep.allows)
    if first and not fits():
        truncated = 0
    elif first:
        outcome, message = step_along(_LockStep(engine, seqs), steps, out, on_mask, on_commit,
                                      allows=_LockStep.allows)
    for q in seqs:
        q.reset()
    return {"warmup_s": time.perf_counter() - t_start, "first_mask_us": first[0] if first else None,
            "warmup_masks": len(times) * B + len(first), "warmup_steps": len(times),
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
              journal: SlotJournal, chan, on_step=None) -> dict:
    """Teacher-force ``work`` (``[(sample_id, token_ids, audit_steps)]``) over the slots ``seqs`` in lock-step.

    One batch step = one ``fill_masks`` call over the live sequences (rows ``0..live-1`` of the mask buffer),
    timed as one; then each live sequence's oracle token is checked in its row, and the tokens of those that go on
    are committed by one ``commit_many`` call, timed as one (each row's ``commit_us`` its share).
    A sequence that ends (any outcome) is reported at once (``("seq", ...)``) and its slot takes the next sample
    of ``work`` before the next step (continuous batching). Outcomes are those of single mode, per sequence:

    * the batch call raised: each live sequence's own ``fill_mask`` is called to find which one failed; that one
      ends ``engine_error``/``crash``, the others go on with the masks of that loop (the step is marked
      ``fallback``);
    * a sequence whose time in the batch passes ``sample_timeout_s`` ends ``timeout`` at the next step boundary;
    * once ``run_left_s`` has passed, every sequence in flight ends ``timeout`` and no sample is started.

    At audited steps the row is kept for the reference audit, and the sequence's own ``fill_mask`` is compared
    with it (untimed, after the timed call): batch and single path must give the same mask.

    ``on_step(batch_step)``, if given, is called before each step's timer starts (the bench's processes wait there
    for each other, so that their steps run together)."""
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
            "rows": journal.columns(i), "peak_rss_mb": peak_rss_mb(),
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
        if on_step is not None:
            on_step(batch_step)
        j0 = WATCH.locks
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
        jit = WATCH.locks - j0   # numba loaded or compiled inside the step's timer: every mask of the step says so
        step_us = (t1 - t0) / 1000.0
        share = step_us / L
        commits = 0.0
        going = []      # the live sequences that commit their oracle token this step
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
            journal.append(i, WORKER_BATCH_STEP.pack(step=step, prefix_bytes=q.nbytes, mask_us=share, commit_us=0.0,
                                                     n_allowed=mask_count(mask, vocab), oracle_allowed=allowed,
                                                     batch_step=batch_step, jit=jit))
            outcome, message = step_verdict(allowed, step == len(q.steps) - 1, tok, step)
            if outcome is None:
                going.append(i)
            else:
                finish(i, outcome, message)
        results: list = []
        if going:
            t2 = perf()
            try:
                results = engine.commit_many([seqs[i] for i in going], [slots[i].steps[slots[i].pos] for i in going])
            except Exception as err:   # noqa: BLE001 - its contract is one entry per sequence; a raise fails them all
                results = [err] * len(going)
            if len(results) != len(going):   # a short list would leave sequences neither advanced nor ended
                results = [RuntimeError(f"commit_many returned {len(results)} results for {len(going)} sequences")] \
                    * len(going)
            commits = (perf() - t2) / 1000.0
        for i, ok in zip(going, results):
            q = slots[i]
            step, tok = q.pos, q.steps[q.pos]
            journal.set_commit_us(i, commits / len(going))
            if isinstance(ok, EngineError):
                finish(i, Outcome.ENGINE_ERROR, f"commit at step {step}: {ok}")
            elif isinstance(ok, BaseException):
                finish(i, Outcome.CRASH, f"commit at step {step}: {type(ok).__name__}: {ok}")
            elif ok:
                q.pos += 1
                q.nbytes += len(token_bytes[tok])
            else:
                finish(i, Outcome.REJECTED, f"engine refused to commit token {tok} at step {step}")
        if log.count == log.capacity:
            chan.send(("bsteps", log.raw_rows()))
            log.reset()
        log.append(WORKER_BATCH_SUMMARY.pack(batch_step=batch_step, size=B, live=L, step_us=step_us, commit_us=commits,
                                             fallback=fallback, masks=L - len(failed)))
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


def serve_batch(chan, msg) -> None:
    """Batch mode: compile, make the sequences, warm up (batch path), then run the queues the parent sends."""
    from gcdbench.parsers.registry import create_engine

    _, engine_name, engine_opts, grammar, tokenizer_name, warmup_ids, log_path, batch = msg
    log = StepLog(log_path, layout=WORKER_BATCH_SUMMARY)
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

    got = compile_engine(chan, engine_name, engine_opts, grammar, tokenizer_name, prepare)
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
    main(serve_batch)
