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

import itertools
import time

import numpy as np

from gcdbench.experiments.rowlayout import WORKER_BATCH_STEP, WORKER_BATCH_SUMMARY
from gcdbench.experiments.steplog import SlotJournal, StepLog, step_along, step_verdict
from gcdbench.experiments.worker import compile_engine, main, peak_rss_mb, reset_peak_rss, where_in_text
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


class _Batch:
    """A batch step's live sequences as one engine for :func:`~gcdbench.experiments.steplog.step_along` (driven by
    :func:`run_batch`): its mask is one ``fill_masks`` call over them into rows ``0..L-1`` of the mask buffer, its
    commit one ``commit_many`` call with each sequence's own oracle token.

    :func:`run_batch` hands each step its sequences and rows (:meth:`begin`) and its commits (:meth:`to_commit`)
    before the step's timers, so that the timed calls only pass them on. Neither call raises: a batch call that
    fails falls back to each sequence's own ``fill_mask`` (that loop timed on its own, ``fallback_ns``, as the
    step's time; the failures kept by row in ``failed``), and a ``commit_many`` that raises fails every sequence
    it held (its error as each one's entry of ``results``)."""

    def __init__(self, engine):
        self.engine = engine
        self.live: list = []              # the step's sequences (engines) and their rows of the mask buffer
        self.rows = None
        self.going: list = []             # the sequences that commit this step, and their oracle tokens
        self.tokens: list = []
        self.results: list = []           # commit_many's entries, one per sequence of ``going``
        self.error: Exception | None = None    # the batch call's error: a fallback step
        self.failed: dict[int, Exception] = {}  # row -> the error of that sequence's own fill_mask
        self.fallback_ns = 0

    def begin(self, live: list, rows) -> None:
        self.live, self.rows = live, rows
        self.going, self.tokens, self.results = [], [], []
        self.error, self.failed = None, {}

    def to_commit(self, going: list, tokens: list) -> None:
        self.going, self.tokens = going, tokens

    def reset(self) -> None:
        """Nothing: each sequence is reset when its slot takes a sample (:func:`run_batch`)."""

    def fill_mask(self, _buffer) -> None:
        try:
            self.engine.fill_masks(self.live, self.rows)
        except Exception as err:   # noqa: BLE001 - which sequence failed: each one's own fill_mask says
            self._fall_back(err)

    def _fall_back(self, err: Exception) -> None:
        perf = time.perf_counter_ns
        self.error = err
        t0 = perf()
        for j, q in enumerate(self.live):
            try:
                q.fill_mask(self.rows[j])
            except Exception as e:   # noqa: BLE001 - that sequence's failure; the others go on
                self.failed[j] = e
        self.fallback_ns = perf() - t0

    def commit(self, _tok) -> bool:
        if self.going:
            try:
                self.results = self.engine.commit_many(self.going, self.tokens)
            except Exception as err:   # noqa: BLE001 - its contract is one entry per sequence; a raise fails them all
                self.results = [err] * len(self.going)
        return True

    @staticmethod
    def allows(rows, tok) -> bool:
        """Go on: each sequence's own token is checked in its row (:func:`run_batch`'s ``on_mask``)."""
        return True


def _ended(err: BaseException, where: str) -> tuple[Outcome, str]:
    """A sequence's outcome for an engine error at ``where``: its own typed error, or a crash with its text."""
    if isinstance(err, EngineError):
        return Outcome.ENGINE_ERROR, f"{where}: {err}"
    return Outcome.CRASH, f"{where}: {type(err).__name__}: {err}"


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

    The steps are those of :func:`~gcdbench.experiments.steplog.step_along` (its timers, its ``jit`` count), over
    the live sequences as one engine (:class:`_Batch`): a walk with no last step, each batch step one step of it,
    the sequences' own verdicts in its ``on_mask``, their commits' results in its ``on_commit``, which ends the
    walk once no sequence is left. ``on_step(batch_step)``, if given, is called before each step's timer starts
    (the bench's processes wait there for each other, so that their steps run together)."""
    B = len(seqs)
    vocab, eos, token_bytes = tokenizer.vocab_size, tokenizer.eos_id, tokenizer.token_bytes
    out = np.zeros((B, (vocab + 31) // 32), dtype=np.int32)
    scratch = allocate_mask(vocab)
    slots: list[_Seq | None] = [None] * B
    deadline = time.perf_counter() + run_left_s
    nxt = 0
    reset = reset_peak_rss()
    batch = _Batch(engine)
    live: list[int] = []    # the slots in the step under way
    going: list[int] = []   # those that commit their oracle token this step
    steps_done, fallbacks, first_error = 0, 0, None
    step_us, fallback = 0.0, 0

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

    def begin(batch_step: int) -> bool:
        """The live slots of the next step, handed to the batch before its timer; False when none is left."""
        live[:] = [i for i in range(B) if slots[i] is not None]
        if not live:
            return False
        batch.begin([seqs[i] for i in live], out[:len(live)])
        if on_step is not None:
            on_step(batch_step)
        return True

    def on_mask(batch_step, _buffer, _allowed, mask_ns, jit):
        # jit: numba loaded or compiled inside the step's timer (fallback included): every mask of the step says so
        nonlocal fallbacks, first_error, step_us, fallback
        fallback = 0
        if batch.error is not None:   # the batch call raised: the step's time is that of the single-path loop
            err = batch.error
            fallbacks += 1
            first_error = first_error or f"batch step {batch_step}: {type(err).__name__}: {err}"[:2000]
            mask_ns = batch.fallback_ns
            fallback = 1 if batch.failed else 2
        step_us = mask_ns / 1000.0
        share = step_us / len(live)
        going.clear()
        for j, i in enumerate(live):
            q = slots[i]
            if j in batch.failed:
                finish(i, *_ended(batch.failed[j], f"step {q.pos}"))
                continue
            mask = batch.rows[j]
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
            else:   # a refusal says where in the text, as in single mode (worker.teacher_force)
                finish(i, outcome, message + (where_in_text(q.steps[:-1], token_bytes, step)
                                              if outcome in (Outcome.REJECTED, Outcome.NO_EOS) else ""))
        batch.to_commit([seqs[i] for i in going], [slots[i].steps[slots[i].pos] for i in going])

    def on_commit(batch_step, _tok, commit_ns):
        nonlocal steps_done
        results = batch.results
        if len(results) != len(going):   # a short list would leave sequences neither advanced nor ended
            results = [RuntimeError(f"commit_many returned {len(results)} results for {len(going)} sequences")] \
                * len(going)
        commits = commit_ns / 1000.0 if going else 0.0
        for i, ok in zip(going, results):
            q = slots[i]
            step, tok = q.pos, q.steps[q.pos]
            journal.set_commit_us(i, commits / len(going))
            if isinstance(ok, BaseException):
                finish(i, *_ended(ok, f"commit at step {step}"))
            elif ok:
                q.pos += 1
                q.nbytes += len(token_bytes[tok])
            else:
                finish(i, Outcome.REJECTED, f"engine refused to commit token {tok} at step {step}"
                       + where_in_text(q.steps[:-1], token_bytes, step))
        if log.count == log.capacity:
            chan.send(("bsteps", log.raw_rows()))
            log.reset()
        log.append(WORKER_BATCH_SUMMARY.pack(batch_step=batch_step, size=B, live=len(live), step_us=step_us,
                                             commit_us=commits, fallback=fallback, masks=len(live) - len(batch.failed)))
        steps_done = batch_step + 1
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
        return None if begin(steps_done) else (Outcome.OK, "")

    refill()
    if begin(0):
        step_along(batch, itertools.repeat(None), out, on_mask, on_commit, allows=_Batch.allows, raise_errors=True)
    return {"started": nxt, "batch_steps": steps_done, "fallback_steps": fallbacks, "first_batch_error": first_error}


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
