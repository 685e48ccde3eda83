"""``bench batch``: B sequences of one grammar teacher-forced in lock-step, one ``fill_masks`` call per step, timed
(the runner's own :func:`~gcdbench.experiments.worker_batch.run_batch`), in one process or sharded over processes.

With ``--processes P`` > 1 the B sequences are split into P shards, each in its own process (spawned: each loads
the tokenizer and the compiled grammar from the artifact cache, and makes its shard's sequences). The processes
step together: before each step's timer every process waits at a barrier in shared memory (it spins, yielding the
core, until every other process has reached the step or finished), so a step of the whole batch is the step of
its slowest shard. The record's ``step_us`` is that maximum at each step; ``per_sequence_us`` divides it by B, as
for one process; ``per_sequence_with_commit_us`` adds the step's ``commit_many`` call (the commits of all B).
This is how a CPU mask server scales past the GIL: an engine whose step holds the GIL between its compiled calls
gains nothing from threads, and one process per core gains for every engine. The barrier assumes one core per
process: with more processes than cores, they wait for each other's time slices (``cpu_count`` is in the record).
"""
from __future__ import annotations

import functools
import itertools
import json
import os
import time
import traceback

import numpy as np

from gcdbench.experiments.bench_setup import _compile, _stats
from gcdbench.experiments.steplog import step_along
from gcdbench.experiments.worker_batch import _Batch
from gcdbench.parsers.base import Outcome, mask_get

#: how long the parent waits for every shard of one ``--processes`` record (compile from cache, warm-up and run)
SHARD_TIMEOUT_S = 3600


class _Inbox:
    """The channel :func:`worker.run_batch` reports to, kept in memory."""

    def __init__(self):
        self.messages: list[tuple] = []

    def send(self, msg) -> None:
        self.messages.append(msg)


def _work(streams: list, B: int, args, offset: int = 0) -> list[tuple]:
    """Samples cycled (from ``offset``) until the batch can stay full for ``--warmup + --steps`` steps."""
    want = (args.warmup + args.steps + 1) * B + B * max(map(len, streams)) + B
    work, total = [], 0
    for k in itertools.count():
        ids = streams[(k + offset) % len(streams)]
        work.append((str(k), ids, ()))
        total += len(ids) + 1
        if total >= want:
            return work


def _timed(e, seqs, tok, work, max_len: int, ready=None, on_step=None) -> tuple[list, dict, dict]:
    """(batch summary rows, outcome counts, run_batch's result) of one untimed pass over the first B samples (jitted
    functions and the batch path's buffers load outside the timings), then the timed run over ``work``."""
    from gcdbench.experiments.rowlayout import WORKER_BATCH_SUMMARY as SUMMARY
    from gcdbench.experiments.steplog import SlotJournal, StepLog
    from gcdbench.experiments.worker_batch import run_batch

    B = len(seqs)
    log = StepLog.create(capacity=1 << 14, layout=SUMMARY)
    journal = SlotJournal.create(B, max_len + 2)
    inbox = _Inbox()
    try:
        run_batch(e, seqs, tok, work[:B], 1e9, 1e9, log, journal, _Inbox())
        log.reset()
        if ready is not None:
            ready()
        done = run_batch(e, seqs, tok, work, 1e9, 1e9, log, journal, inbox, on_step=on_step)
        rows = [r for m in inbox.messages if m[0] == "bsteps" for r in m[1]] + log.raw_rows()
    finally:
        log.close(unlink=True)
        journal.close(unlink=True)
    outcomes: dict[str, int] = {}
    for m in inbox.messages:
        if m[0] == "seq":
            outcomes[m[1]["outcome"]] = outcomes.get(m[1]["outcome"], 0) + 1
    return rows, outcomes, done


def _full_steps(rows: list, B: int) -> dict[int, tuple[float, float]]:
    """{batch step: (step µs, commit µs)} of the steps where all B sequences were live."""
    from gcdbench.experiments.rowlayout import WORKER_BATCH_SUMMARY as SUMMARY

    live, step_us, commit_us, bstep = (SUMMARY.index[k] for k in ("live", "step_us", "commit_us", "batch_step"))
    return {int(r[bstep]): (r[step_us], r[commit_us]) for r in rows if int(r[live]) == B}


def brief(rec: dict) -> dict:
    """A record as its printed line shows it: without the per-step series (the file keeps them)."""
    return {k: v for k, v in rec.items() if not k.endswith("_series")}


def _series(step_us: list, commit_us: list) -> dict:
    """Every timed step's ``fill_masks`` and ``commit_many`` µs in step order (0.01 µs), the raw data behind
    ``step_us``: ``gcdbench-compare`` and the interleaved A/B's ratios resample them (report/stats.py
    ``bench_configs``)."""
    return {"step_us_series": [round(float(x), 2) for x in step_us],
            "commit_us_series": [round(float(x), 2) for x in commit_us]}


def time_batch(engine: str, opts: dict, name: str, ds, tok, args) -> list[dict]:
    """Per-step times of ``fill_masks`` over B sequences (the engine and its forks, or compiled copies), for each
    ``--batch`` size and each ``--processes`` count: samples cycle so that the batch stays full for ``--warmup +
    --steps`` steps."""
    from gcdbench.experiments.worker_batch import make_sequences

    streams = [s.ids(tok) for s in ds.samples]
    e, init_s = _compile(engine, opts, ds.grammar, tok, args.cache_dir)
    records = []
    for B, P in itertools.product(args.batch, args.processes):
        if P > B:
            continue
        rec = {"dataset": name, "tokenizer": tok.name, "engine": engine, "options": opts, "B": B, "processes": P}
        if P > 1:
            full, outcomes, how, fallbacks, shards = _sharded(engine, opts, ds.grammar, tok, streams, B, P, args)
            rec["shards"] = shards
        else:
            seqs, how = make_sequences(e, B, lambda: _compile(engine, opts, ds.grammar, tok, args.cache_dir)[0])
            rows, outcomes, done = _timed(e, seqs, tok, _work(streams, B, args), max(map(len, streams)))
            fallbacks = done["fallback_steps"]
            steps = _full_steps(rows, B)
            full = [steps[k] for k in sorted(steps)][args.warmup: args.warmup + args.steps]
            if how != "fork":   # compiled copies hold their own resources; forks share the engine's
                for s in seqs[1:]:
                    s.close()
        st = _stats([s for s, _ in full])
        rec.update({"steps": len(full), "step_us": st, "per_sequence_us": round(st.get("mean", 0.0) / B, 2),
                    "per_sequence_with_commit_us": round(float(np.mean([a + c for a, c in full])) / B, 2)
                    if full else 0.0,
                    "commit_us_per_step": _stats([c for _, c in full]), **_series([s for s, _ in full],
                                                                                  [c for _, c in full]),
                    "outcomes": outcomes,
                    "violations": sum(v for k, v in outcomes.items() if k != "ok"), "sequences": how,
                    "fallback_steps": fallbacks, "init_s": round(init_s, 3), "cache_hit": e.info().get("cache_hit"),
                    "cpu_count": os.cpu_count()})
        print(json.dumps(brief(rec), default=str), flush=True)
        records.append(rec)
    e.close()
    return records


class _OptionSet(_Batch):
    """One option set of :func:`time_batch_interleaved` as one engine for
    :func:`~gcdbench.experiments.steplog.step_along`: batch mode's :class:`~gcdbench.experiments.worker_batch._Batch`
    over the set's B sequences, all of them live at every step (a lane whose sample ends takes the next one at
    once), each bench step a walk of one step (:meth:`step`).

    Its mask is the engine's ``fill_masks`` itself over the B sequences into the set's own rows (a ``partial``: no
    frame of ours inside the timer, and no fallback: an error ends the bench, as before); its commit is
    ``_Batch.commit``, one ``commit_many`` with the tokens handed over before the timer (``to_commit``). The walk's
    callbacks keep the set's timed steps, ``fill_masks`` in ``step_us`` and ``commit_many`` in ``commit_us`` (µs),
    and run what the step holds between the two (``between``: the other sets' steps)."""

    def __init__(self, engine, seqs: list, how: str, width: int):
        super().__init__(engine)
        self.seqs, self.how = seqs, how
        self.out = np.zeros((len(seqs), width), dtype=np.int32)
        self.begin(seqs, self.out)
        self.fill_mask = functools.partial(engine.fill_masks, seqs)
        self.step_us: list[float] = []
        self.commit_us: list[float] = []
        self._between = None

    def step(self, going: list[int], tokens: list, between) -> list:
        """One bench step of this set: its mask, then ``between()`` (untimed), then the lanes ``going`` commit
        ``tokens``; returns each one's ``commit_many`` entry (its result, or the exception it raised)."""
        self.to_commit([self.seqs[i] for i in going], tokens)
        self._between = between
        step_along(self, itertools.repeat(None, 1), self.out, self._took_mask, self._took_commit,
                   allows=_Batch.allows, raise_errors=True)
        return self.results if going else []

    def _took_mask(self, _step, _rows, _allowed, mask_ns, _jit) -> None:
        self.step_us.append(mask_ns / 1000.0)
        self._between()

    def _took_commit(self, _step, _tokens, commit_ns) -> tuple[Outcome, str]:
        self.commit_us.append(commit_ns / 1000.0)
        return Outcome.OK, ""   # the bench step done: the walk ends


def time_batch_interleaved(engine: str, opt_sets: list[dict], name: str, ds, tok, args) -> list[dict]:
    """``--interleave``: every option set of ``engine`` in this one process, each with its own B sequences over the
    same samples, stepped together. At every step each set's ``fill_masks`` is timed, the sets' order rotating from
    step to step, the sets' rows compared (``masks_equal``, or the first step where they differ), then each set
    commits every lane's next token in one ``commit_many`` call, timed too, in the reverse order of the masks (a
    finished sample: the lane resets to the next one). Each set's step is one
    :func:`~gcdbench.experiments.steplog.step_along` step (:class:`_OptionSet`), the next set's step (or, after the
    last mask, the comparison) running inside its mask callback, between its two timers.
    The machine's drift falls on every set alike, so the ratio between sets holds where two runs minutes apart do
    not; the samples cycle as in :func:`time_batch`. One record per (set, B), ``interleaved`` naming the sets."""
    from gcdbench.experiments.worker_batch import make_sequences

    streams = [list(s.ids(tok)) for s in ds.samples]
    built = [(opts, *_compile(engine, opts, ds.grammar, tok, args.cache_dir)) for opts in opt_sets]
    labels = [json.dumps(o, sort_keys=True) for o in opt_sets]
    width = (tok.vocab_size + 31) // 32
    records = []
    for B in args.batch:
        work = _work(streams, B, args)
        nxt = B
        lanes = [[list(work[i][1]), 0] for i in range(B)]
        sets = []
        for opts, e, _ in built:
            seqs, how = make_sequences(e, B, lambda o=opts: _compile(engine, o, ds.grammar, tok, args.cache_dir)[0])
            for q in seqs:
                q.reset()
            sets.append(_OptionSet(e, seqs, how, width))
        K = len(sets)
        differ, violations, finished = None, 0, 0

        def take(step: int, r: int, going: list[int], tokens: list, oks: list[bool]) -> None:
            """The ``r``-th set of ``step``'s order: its mask, the next sets' steps, its commit."""
            nonlocal differ, violations
            if r == K:   # every set's mask in, no commit yet: the rows compared, the first set's checked
                if differ is None and any(not np.array_equal(sets[0].out, st.out) for st in sets[1:]):
                    differ = step
                for i, (ids, pos) in enumerate(lanes):
                    violations += not mask_get(sets[0].out[i], ids[pos] if pos < len(ids) else tok.eos_id)
                return
            got = sets[(step + r) % K].step(going, tokens, lambda: take(step, r + 1, going, tokens, oks))
            for i, ok in zip(going, got):
                oks[i] = oks[i] and not isinstance(ok, BaseException) and bool(ok)

        for step in range(args.warmup + args.steps):
            going = [i for i, (ids, pos) in enumerate(lanes) if pos < len(ids)]   # the lanes inside their sample
            oks = [True] * B
            take(step, 0, going, [lanes[i][0][lanes[i][1]] for i in going], oks)
            for i, lane in enumerate(lanes):
                if i in going and oks[i]:
                    lane[1] += 1
                    continue
                violations += i in going       # a commit refused (or failed) inside the sample
                finished += 1
                lane[:] = [list(work[nxt % len(work)][1]), 0]
                nxt += 1
                for st in sets:
                    st.seqs[i].reset()
        for (opts, e, init_s), st in zip(built, sets):
            step_us, commit_us = st.step_us[args.warmup:], st.commit_us[args.warmup:]
            stats = _stats(step_us)
            both = [a + c for a, c in zip(step_us, commit_us)]
            rec = {"dataset": name, "tokenizer": tok.name, "engine": engine, "options": opts, "B": B, "processes": 1,
                   "steps": args.steps, "step_us": stats, "per_sequence_us": round(stats.get("mean", 0.0) / B, 2),
                   "per_sequence_with_commit_us": round(float(np.mean(both)) / B, 2) if both else 0.0,
                   "commit_us_per_step": _stats(commit_us), **_series(step_us, commit_us), "interleaved": labels,
                   "masks_equal": differ is None, "first_difference_step": differ, "violations": violations,
                   "samples_finished": finished, "sequences": st.how, "init_s": round(init_s, 3),
                   "cpu_count": os.cpu_count()}
            print(json.dumps(brief(rec), default=str), flush=True)
            records.append(rec)
        for st in sets:
            if st.how != "fork":
                for q in st.seqs[1:]:
                    q.close()
    for _, e, _ in built:
        e.close()
    return records


# --------------------------------------------------------------------------------------------------------------
# one process per shard
# --------------------------------------------------------------------------------------------------------------
def _sharded(engine, opts, grammar, tok, streams, B, P, args):
    """(full steps [(max step µs over the shards, summed commit µs)], outcomes, how, fallback steps, shard records)
    of B sequences split over P spawned processes that step together."""
    import multiprocessing as mp
    import queue

    sizes = [B // P + (p < B % P) for p in range(P)]
    ctx = mp.get_context("spawn")
    raw = ctx.RawArray("q", 2 * P)   # shared memory, no lock: row 0 the step each shard has reached, row 1 finished
    flags = np.frombuffer(raw, dtype=np.int64).reshape(2, P)
    flags[0], flags[1] = -1, 0
    start, results = ctx.Barrier(P), ctx.Queue()
    procs = [ctx.Process(target=_shard_child, daemon=True, name=f"bench-shard-{p}",
                         args=(p, P, sizes[p], engine, opts, grammar, tok.name, args.cache_dir,
                               _work(streams, sizes[p], args, offset=p), max(map(len, streams)), raw, start, results))
             for p in range(P)]
    for pr in procs:
        pr.start()
    got = {}
    deadline = time.monotonic() + SHARD_TIMEOUT_S
    try:
        while len(got) < P:
            try:
                msg = results.get(timeout=max(1.0, deadline - time.monotonic()))
            except queue.Empty:
                dead = [f"{pr.name} (exit {pr.exitcode})" for pr in procs if not pr.is_alive()]
                raise SystemExit(f"bench batch --processes {P}: only {len(got)} of {P} shards reported within "
                                 f"{SHARD_TIMEOUT_S} s; ended: {dead or 'none'}") from None
            if msg[1] == "error":
                raise SystemExit(f"bench batch --processes {P}: shard {msg[0]} failed:\n{msg[2]}")
            got[msg[0]] = msg
    finally:
        for pr in procs:
            pr.join(timeout=30)
            if pr.is_alive():   # a shard still stepping after another failed: ours, ended by its own handle
                pr.kill()
    per = [_full_steps(got[p][1], sizes[p]) for p in range(P)]
    common = sorted(set.intersection(*(set(d) for d in per)))[args.warmup: args.warmup + args.steps]
    full = [(max(d[k][0] for d in per), sum(d[k][1] for d in per)) for k in common]
    outcomes: dict[str, int] = {}
    for p in range(P):
        for k, v in got[p][2].items():
            outcomes[k] = outcomes.get(k, 0) + v
    shards = [{"B": sizes[p], "step_us": _stats([per[p][k][0] for k in common]), "init_s": round(got[p][5], 3)}
              for p in range(P)]
    return full, outcomes, got[0][4], sum(got[p][3]["fallback_steps"] for p in range(P)), shards


def _shard_child(p, P, size, engine, opts, grammar, tok_name, cache_dir, work, max_len, raw, start, results):
    """One shard: compile (from the artifact cache), make ``size`` sequences, then run them in lock-step, waiting
    before each step until every other shard has reached it (or finished)."""
    flags = np.frombuffer(raw, dtype=np.int64).reshape(2, P)
    try:
        from gcdbench.experiments.worker_batch import make_sequences
        from gcdbench.parsers.tokenizers import load_tokenizer

        tok = load_tokenizer(tok_name)
        e, init_s = _compile(engine, opts, grammar, tok, cache_dir)
        seqs, how = make_sequences(e, size, lambda: _compile(engine, opts, grammar, tok, cache_dir)[0])
        others = [q for q in range(P) if q != p]
        reached, finished, yield_ = flags[0], flags[1], os.sched_yield

        def on_step(k: int) -> None:
            reached[p] = k
            for q in others:
                while reached[q] < k and not finished[q]:
                    yield_()

        rows, outcomes, done = _timed(e, seqs, tok, work, max_len, ready=lambda: start.wait(600), on_step=on_step)
        finished[p] = 1
        results.put((p, rows, outcomes, done, how, init_s))
    except BaseException:   # noqa: BLE001 - reported to the parent, which stops the bench with it
        flags[1, p] = 1
        start.abort()
        results.put((p, "error", traceback.format_exc(limit=12)))
