"""``run(cfg)``: one cell (engine x dataset x tokenizer), teacher-forced in a child process under limits.

The parent owns everything that must survive a failing engine: it sends samples one at a time, enforces the
per-sample / per-run time limits and the memory limit, turns a hang, an out-of-memory or a dead child into a
typed outcome of that sample, restarts the child for the rest, audits masks against the reference checker, and
writes each finished sample to ``parts/`` at once. What a run guarantees (README "What a run guarantees"):
identity, lock and atomic files (``experiments/store.py``), and resume: finished samples are kept, with the
provenance (commit, machine, session) they were run with (``experiments/provenance.py``); samples never
attempted (``skipped``) are run; ``compile_error`` samples are compiled again unless the failure was deterministic
(the engine refused the grammar with ``CompileError``, same engine version).

This module is the orchestration only: which samples run, in which mode, and what a failure does to them. Single
mode (:func:`_run_single`) and batch mode (:func:`_run_batch`, ``batch.size`` = B >= 1: the samples run B at a
time in lock-step in one worker, one ``fill_masks`` call per step) share one failure path: the worker is
supervised by ``experiments/supervisor.py`` (:func:`~gcdbench.experiments.supervisor.ended` gives the outcome),
and :func:`_fail` records the samples a failure ends. A batch cell keeps its per-step summary
(``batch_steps.parquet``) and, with ``batch.steps=all``, every mask's row too (README "Batch mode").
"""
from __future__ import annotations

import functools
import random
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
from omegaconf import OmegaConf

from gcdbench.experiments.provenance import (RESULT_FOLDERS, git_state, machine_info, machine_snapshot, machine_state,
                                             not_alone_text, package_versions, repo_folders)
from gcdbench.experiments.store import Cell, CellLock, cell_identity, clear, engine_label, load_json, write_json
from gcdbench.experiments.jitwatch import DAMAGED_CACHE
from gcdbench.experiments.supervisor import Supervised, ended, start_worker, switch_grammar
from gcdbench.experiments.worker import COMPILE_TIMEOUTS, DETERMINISTIC_COMPILE_FAILURES
from gcdbench.parsers.base import Outcome

#: the reference's audited masks, shared by every cell of one out_dir (``experiments/audit.py``, MaskCache)
REFERENCE_CACHE = ".cache/reference_masks"
#: ``batch.steps``: what a batch cell keeps of its masks (summary: batch_steps.parquet only; all: steps.parquet too)
BATCH_STEPS = ("summary", "all")


def audited_samples(sample_ids: list[str], n) -> set[str]:
    """The samples whose steps are audited: all (``n`` None), or the first ``n`` in the cell's order
    (``audit.samples``; the order is already a seeded choice). Batch sweeps audit a few sequences per cell, since
    the reference's full-vocabulary walk costs more than the masks it checks; the first ones run even in a cell
    cut short by its time limit."""
    return set(sample_ids if n is None else sample_ids[: int(n)])


def audit_steps_for(sample_id: str, n_steps: int, per_sample: int, seed: int) -> list[int]:
    """The steps audited in one sample: ``per_sample`` of its ``n_steps`` + 1 (EOS), chosen from the seed and id."""
    if per_sample <= 0:
        return []
    rng = random.Random(f"{seed}:{sample_id}")
    steps = list(range(n_steps + 1))   # the last step is the EOS step
    return sorted(rng.sample(steps, min(per_sample, len(steps))))


# --------------------------------------------------------------------------------------------------------------
# one run
# --------------------------------------------------------------------------------------------------------------
def run(cfg, on_cell: Callable[[Path], None] | None = None) -> Path:
    """Run (or resume) one cell and return its folder (``<out_dir>/<dataset>/<tokenizer>/<engine label>``).

    ``on_cell(folder)`` is called as each cell ends: the cell, or with ``repeats=R`` run back to back
    (``interleave=false``, or one run) each repeat's cell in turn (the command prints each one's line there,
    ``report.cell_summary``). That line carries the warning of a machine that was not alone; without ``on_cell``
    the runner prints that warning itself (stderr), so it is said once either way.

    Raises ConfigError / DataError / CellError / ValueError with a one-line reason before any work when the
    configuration, the data or the cell folder cannot be used."""
    from gcdbench.experiments.config import validate

    n = validate(cfg)
    if int(cfg.get("repeats", 1)) > 1:   # issue 66: repeats 0..R-1, each its own cell (a sweep interleaves them)
        from gcdbench.experiments.repeats import run_repeats

        return run_repeats(cfg, functools.partial(run, on_cell=on_cell))
    out = _run(cfg, n, warn_not_alone=on_cell is None)
    if on_cell is not None:
        on_cell(out)
    return out


def _run(cfg, n: int | None, warn_not_alone: bool) -> Path:
    """:func:`run` of one cell (``repeats`` 1; ``n``: the sample count, validated)."""
    from gcdbench.datasets.registry import load_dataset
    from gcdbench.experiments.config import ConfigError
    from gcdbench.parsers.registry import engine_class
    from gcdbench.parsers.tokenizers import load_tokenizer

    if str(cfg.batch.get("steps", "summary")) not in BATCH_STEPS:
        raise ConfigError(f"batch.steps={cfg.batch.steps!r}: must be one of {', '.join(BATCH_STEPS)} (summary: batch "
                          "cells keep one row per batch step; all: also every mask's row in steps.parquet)")
    engine_name = cfg.engine.name
    opts = {k: v for k, v in OmegaConf.to_container(cfg.engine, resolve=True).items() if k not in ("name", "label")}
    cls = engine_class(engine_name)
    batch_size = int(cfg.batch.size)
    preset = dict(opts)
    if batch_size and cfg.batch.threads is not None and getattr(cls, "threads_option", None):
        opts[cls.threads_option] = int(cfg.batch.threads)   # the engine's own option: in its label and identity
    probe = cls(**opts)   # unknown options and values outside an option's choices fail here, before any work
    # a named preset keeps its name, plus any option batch.threads changed from the preset's own value
    label = (engine_label(cfg.engine.label, opts, preset) if cfg.engine.get("label")
             else engine_label(engine_name, opts, cls.options()))
    tokenizer = load_tokenizer(cfg.tokenizer.name)
    dataset = load_dataset(cfg.dataset, data_root=cfg.data_root, n=n, seed=cfg.seed)
    if batch_size and dataset.groups:
        raise ConfigError(f"dataset {dataset.name} has {len(dataset.groups)} grammars (one per group of samples); "
                          "batch mode runs one grammar: use batch.size=0, or select one group (e.g. dataset.schema=ID)")
    if n is not None and len(dataset.samples) < n:   # never a silent truncation (issue 27, item 10)
        print(f"samples={n}: dataset {dataset.name} has {len(dataset.samples)} samples; running those "
              f"{len(dataset.samples)} (samples=all says the same)", file=sys.stderr)
    identity = cell_identity(engine_name, label, probe.opts, dataset, OmegaConf.to_container(cfg.dataset, resolve=True),
                             tokenizer, int(cfg.seed), batch_size)
    repeat = int(cfg.get("repeat", 0))
    if repeat:   # issue 66: each repeat its own cell; repeat 0 keeps the identity and folder of a cell run once
        identity["repeat"] = repeat
    cold = bool(cfg.get("cold", False))
    if cold:     # empty caches in every worker: a cell of its own beside the cached one
        identity["cold"] = True
    out = Path(cfg.out_dir) / dataset.name / tokenizer.name / (label + (f"__batch-{batch_size}" if batch_size else "")
                                                               + ("__cold" if cold else "")
                                                               + (f"__repeat-{repeat}" if repeat else ""))
    if (batch_size and cfg.batch.threads not in (None, 1) and not getattr(cls, "threads_option", None)
            and not cfg.fresh and (out / "run.json").exists()):
        # no thread option: batch.threads=T names the threads=1 cell, already run; resuming it here would give its
        # samples cut by the run time limit a second limit (a sweep over batch.threads runs each cell once)
        print(f"{label}: no thread option, so batch.threads={cfg.batch.threads} is the cell {out} already run "
              "(not run again; batch.threads=1 resumes it)", file=sys.stderr)
        return out
    out.mkdir(parents=True, exist_ok=True)
    with CellLock(out):
        for stale in out.glob(".*.tmp*"):   # a write killed before its rename (no other writer holds the lock)
            stale.unlink(missing_ok=True)
        if cfg.fresh:
            clear(out)
        cell = Cell(out, identity, cls.options())
        if not (out / "run.json").exists():
            cell.merge(dataset, tokenizer)   # the identity is on disk before any row is
            cell.parts.mkdir(exist_ok=True)
        current = _run_cell(cfg, cell, dataset, tokenizer, engine_name, opts, probe, warn_not_alone)
        cell.merge(dataset, tokenizer, current)
    return out


def _run_cell(cfg, cell: Cell, dataset, tokenizer, engine_name: str, opts: dict, probe,
              warn_not_alone: bool = True) -> int | None:
    """Run the samples the folder does not hold yet; returns this session's id (None: nothing was left to do).
    ``warn_not_alone``: print the warning of a machine that was not alone during the session (stderr); the
    caller that shows the cell's line says it there instead (:func:`run`)."""
    version = probe.version()
    kinds = DETERMINISTIC_COMPILE_FAILURES + (() if cfg.retry_compile_timeouts else COMPILE_TIMEOUTS)
    stored = cell.stored_outcomes()   # the cell's rows and parts, read once
    reuse = cell.reusable_compile_error(version, kinds, stored)
    # a sample that crashed on a damaged numba cache file (removed since) runs again
    again = {sid for sid, (_, _, message) in stored.items() if DAMAGED_CACHE in message}
    keep = {sid for sid, (oc, _, _) in stored.items()
            if (Outcome(oc).attempted and sid not in again) or (oc == Outcome.COMPILE_ERROR.value and reuse)}
    if dataset.groups:   # many grammars: a group's deterministic refusal stands, its other failures are retried
        reuse = None
        keep = {sid for sid, (oc, _, _) in stored.items() if Outcome(oc).attempted and sid not in again}
        keep |= cell.reusable_group_errors(version, dataset.group_of(), kinds, stored)
    todo = [s for s in dataset.samples if s.id not in keep]
    label = cell.identity["config"]
    if not todo:
        _audit_pending(cell, None, dataset, tokenizer, engine_name, opts, probe, cfg)
        return None
    g = git_state(ignore=repo_folders(cfg.out_dir) + RESULT_FOLDERS)
    session = {
        "id": cell.next_session_id(), "status": "running",
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"), "command": " ".join(["python", *sys.argv]),
        "git_commit": g["commit"], "git_dirty": g["dirty"], "machine": machine_info(), "versions": package_versions(),
        "engine_version": version, "limits": OmegaConf.to_container(cfg.limits, resolve=True),
        "audit_per_sample": int(cfg.audit.per_sample), "audit_samples": cfg.audit.samples,
        "warmup": bool(cfg.warmup), "inits": [], "samples_run": 0,
    }
    machine_before = machine_snapshot()   # issue 66: was the machine alone while the cell ran
    failure = None
    if reuse:   # a refusal of this grammar by this engine version (or, if asked, its time-out): not compiled again
        failure = session["compile_failure"] = {"message": reuse[0], "kind": reuse[1], "engine_version": version,
                                                "reused": True}
    batch_size = int(cfg.batch.size)
    if batch_size:
        option = getattr(type(probe), "threads_option", None)
        session["batch"] = {"size": batch_size, "threads_option": option,
                            "threads": int(probe.opts[option]) if option else 1,
                            "steps": str(cfg.batch.get("steps", "summary"))}
    cell.save_session(session)
    progress = _progress(len(dataset.samples), len(keep), f"{label} on {dataset.name}"
                         + (f" (batch {batch_size})" if batch_size else ""), cfg.progress)
    ctx = _Ctx(cfg, session, cell, dataset, tokenizer, engine_name, opts, version, progress,
               warm_ids=dataset.samples[0].ids(tokenizer) if cfg.warmup else None,
               run_deadline=time.monotonic() + float(cfg.limits.run_timeout_s),
               audited=audited_samples([s.id for s in dataset.samples], cfg.audit.samples))
    try:
        (_run_batch if batch_size else _run_single)(ctx, todo, failure)
    finally:
        progress.close()
    session["status"] = "finished"
    session["ended"] = time.strftime("%Y-%m-%d %H:%M:%S %z")
    session["machine_state"] = machine_state(machine_before, machine_snapshot())   # the timed part, not the audit
    if warn_not_alone and not_alone_text(session["machine_state"]):
        print(f"warning: {label}: {not_alone_text(session['machine_state'])}", file=sys.stderr)
    _audit_pending(cell, session, dataset, tokenizer, engine_name, opts, probe, cfg)
    cell.save_session(session)
    return session["id"]


class _Ctx:
    """What both loops of one session share: the config, the session record, the cell, the data and the engine."""

    def __init__(self, cfg, session, cell, dataset, tokenizer, engine_name, opts, version, progress, warm_ids,
                 run_deadline, audited):
        self.cfg, self.limits, self.session, self.cell = cfg, cfg.limits, session, cell
        self.dataset, self.tokenizer, self.engine_name, self.opts = dataset, tokenizer, engine_name, opts
        self.version, self.progress, self.warm_ids = version, progress, warm_ids
        self.run_deadline, self.audited = run_deadline, audited
        self.started = False    # the session's first worker start is done (start: outside the run's time)

    def start(self, batch: dict | None = None, group=None):
        """(worker, None) or (None, failure): :func:`supervisor.start_worker` with this session's arguments, for
        the dataset's grammar or (a dataset of many grammars) ``group``'s, warmed up on that group's first sample.

        The session's first start is outside the run's time: its time moves the run's deadline on. That compile and
        warm-up have limits of their own (``limits.compile_timeout_s``, ``limits.warmup_timeout_s``), and the
        SLURM time adds them to ``limits.run_timeout_s`` (``launcher.slurm_minutes``); a first run on an empty
        numba cache compiles for minutes, which used to leave no run time for the samples. A restart after a
        failure and a dataset's next grammars (a compile per group) are run time, as before: a bounded total."""
        t0 = time.monotonic()
        try:
            if group is None:
                return start_worker(self.cfg, self.session, self.cell, self.engine_name, self.opts,
                                    self.dataset.grammar, self.tokenizer, self.warm_ids, self.version, self.progress,
                                    batch)
            warm = group.samples[0].ids(self.tokenizer) if self.cfg.warmup else None
            return start_worker(self.cfg, self.session, self.cell, self.engine_name, self.opts, group.grammar,
                                self.tokenizer, warm, self.version, self.progress, batch, group=group.id)
        finally:
            if not self.started:
                self.started = True
                self.run_deadline += time.monotonic() - t0

    def ready_for(self, sup, group, compiled: list) -> dict | None:
        """A dataset of many grammars: make the worker hold ``group``'s grammar (``compiled[0]``: the group it
        holds), switching in the running worker or starting one; the group's compile failure, or None."""
        if compiled[0] == group.id and sup.worker is not None:
            return None
        failure = None
        if sup.worker is not None:
            failure, usable = switch_grammar(self.cfg, self.session, self.cell, sup.worker, group.grammar, group.id,
                                             self.version)
            if not usable:
                sup.kill()
        else:
            sup.worker, failure = self.start(group=group)
        compiled[0] = group.id if failure is None else None
        return failure

    def audit_at(self, sample_id: str, n_tokens: int) -> list[int]:
        if sample_id not in self.audited:
            return []
        return audit_steps_for(sample_id, n_tokens, int(self.cfg.audit.per_sample), int(self.cfg.seed))

    def save_audit_masks(self, sample_id: str, audited: dict) -> None:
        """Masks to audit go beside the part; the reference compares them after the timed loop (its work between
        two samples would evict the engine's caches and inflate the next sample's mask times)."""
        if audited:
            np.savez(self.cell.parts / f"{sample_id}.audit.npz", **{str(k): v for k, v in audited.items()})

    def record(self, sample_id, outcome: Outcome, message: str, cols, wall_s: float, peak=None, **kw) -> None:
        self.cell.write_part(self.session, sample_id, outcome, message, cols, wall_s, peak, **kw)
        self.progress.update(1)


def _not_run(ctx: _Ctx, samples, failure: dict | None) -> None:
    """Samples that cannot run: each one a ``compile_error`` (``failure``), else ``skipped`` (run time is up)."""
    for s in samples:
        if failure is not None:
            ctx.record(s.id, Outcome.COMPILE_ERROR, failure["message"], None, 0.0)
        else:
            ctx.record(s.id, Outcome.SKIPPED, f"run time limit of {ctx.limits.run_timeout_s:g} s reached "
                                              "(limits.run_timeout_s)", None, 0.0)


def _fail(ctx: _Ctx, sup: Supervised, flight: dict, outcome: Outcome, message: str, wall_s: float,
          keep_rows: bool = True) -> None:
    """The one failure path of both modes: the worker hung, ran out of memory or died. It is killed; every sample
    it had in flight (``flight``: sample id -> the step columns it finished) is recorded with the outcome and
    keeps its steps; the caller starts a fresh worker for the samples not yet run."""
    sup.kill()
    for sid, cols in flight.items():
        ctx.record(sid, outcome, message, cols, wall_s, keep_rows=keep_rows)


def _run_single(ctx: _Ctx, todo, failure) -> None:
    """Single mode: one sample at a time in one worker, compiled again after a failure."""
    limits = ctx.limits
    group_of, failed, compiled = ctx.dataset.group_of(), {}, [None]
    with Supervised() as sup:
        for k, sample in enumerate(todo):
            if failure is None and time.monotonic() > ctx.run_deadline:
                _not_run(ctx, [sample], None)
                continue
            group = group_of.get(sample.id)
            if group is not None:   # a dataset of many grammars: this sample's group's, compiled once
                if group.id not in failed:
                    got = ctx.ready_for(sup, group, compiled)
                    if got is not None:
                        failed[group.id] = got
                if group.id in failed:
                    _not_run(ctx, [sample], failed[group.id])
                    continue
            elif failure is None and sup.worker is None:
                sup.worker, failure = ctx.start()
            if failure is not None:
                _not_run(ctx, [sample], failure)
                continue
            ids = sample.ids(ctx.tokenizer)
            left = ctx.run_deadline - time.monotonic()
            timeout = min(float(limits.sample_timeout_s), max(1.0, left))
            which = "limits.sample_timeout_s" if timeout == float(limits.sample_timeout_s) else "limits.run_timeout_s"
            t0 = time.monotonic()
            ev, cols = sup.worker.run_sample(sample.id, ids, ctx.audit_at(sample.id, len(ids)), timeout,
                                             float(limits.memory_mb))
            if ev.kind == "message" and ev.value[0] == "result":
                res = ev.value[1]
                ctx.save_audit_masks(sample.id, res["audited"])
                ctx.session["peak_rss_method"] = res.get("peak_rss_method")
                outcome, message = Outcome(res["outcome"]), res["message"]
                if (res.get("peak_rss_mb") or 0) > float(limits.memory_mb):   # a burst between two polls
                    outcome, message = Outcome.OOM, (f"resident memory peaked at {res['peak_rss_mb']:.0f} MB, above "
                                                     f"{limits.memory_mb:g} MB (limits.memory_mb)")
                ctx.record(sample.id, outcome, message, cols, res["wall_s"], res.get("peak_rss_mb"))
            else:
                _fail(ctx, sup, {sample.id: cols}, *ended(ev, limits, timeout, which), time.monotonic() - t0)
            ctx.cell.save_session(ctx.session)


def _run_batch(ctx: _Ctx, todo, failure) -> None:
    """Batch mode: the samples ``todo`` run ``batch.size`` at a time in lock-step in one worker
    (``worker_batch.run_batch``); each sequence's outcome is written as a part the moment it ends.

    A worker that dies (``crash``), runs out of memory (``oom``) or hangs (``timeout``: no batch step within
    ``limits.sample_timeout_s``) takes every sequence in flight with it -- as in a batched server, the batch fails
    together; each of them keeps the steps it finished (from the SlotJournal) and a message saying so. The
    sequences that had ended are kept; the worker is compiled again for the samples not yet started. Samples not
    started when the run's time is up are ``skipped``."""
    limits, session = ctx.limits, ctx.session
    mem = float(limits.memory_mb)
    keep_rows = ctx.session["batch"]["steps"] == "all"
    ids = {s.id: s.ids(ctx.tokenizer) for s in todo}
    batch = {"size": int(ctx.cfg.batch.size), "capacity": max(len(v) for v in ids.values()) + 2,
             "warmup_budget_s": 0.5 * float(limits.sample_timeout_s)}
    pending = list(todo)
    run_no = 0

    def record(res: dict) -> None:
        ctx.save_audit_masks(res["sample_id"], res["audited"])
        session["peak_rss_method"] = res.get("peak_rss_method")
        ctx.record(res["sample_id"], Outcome(res["outcome"]), res["message"], res["rows"], res["wall_s"],
                   res.get("peak_rss_mb"), keep_rows=keep_rows,
                   extra={"single_check": {str(k): v for k, v in res.get("single_check", {}).items()}})

    with Supervised() as sup:
        while pending:
            # the time is up: the samples not started are skipped (a worker started in time runs one batch, of at
            # least 1 s, as single mode runs one sample)
            if failure is None and time.monotonic() >= ctx.run_deadline and (sup.worker is None or run_no):
                _not_run(ctx, pending, None)
                break
            if failure is None and sup.worker is None:
                sup.worker, failure = ctx.start(batch)
            if failure is not None:
                _not_run(ctx, pending, failure)
                break
            work = [(s.id, ids[s.id], ctx.audit_at(s.id, len(ids[s.id]))) for s in pending]
            reported: set[str] = set()

            def on_seq(res, reported=reported):
                reported.add(res["sample_id"])
                record(res)

            run_no += 1
            t0 = time.monotonic()
            ev, in_flight, steps = sup.worker.run_batch(work, float(limits.sample_timeout_s),
                                                        max(1.0, ctx.run_deadline - time.monotonic()), mem, on_seq)
            ctx.cell.write_batch_steps(session, run_no, steps)
            done = ev.kind == "message" and ev.value[0] == "batch_done"
            session.setdefault("batch_runs", []).append({"run": run_no, "batch_steps": len(steps),
                                                         "ended": ev.value[0] if ev.kind == "message" else ev.kind,
                                                         **(ev.value[1] if done else {})})
            if not done:
                kind, msg = ended(ev, limits)
                flight = {work[k][0]: cols for k, cols in in_flight.items() if work[k][0] not in reported}
                _fail(ctx, sup, flight, kind, f"{msg}; batch mode: the {len(flight)} sequence(s) in flight end "
                                              "together", time.monotonic() - t0, keep_rows)
                reported |= set(flight)
                if not reported:   # died before any sequence started: it would again
                    for s in pending:
                        ctx.record(s.id, kind, f"{msg}, before any sequence of the batch started", None, 0.0)
                        reported.add(s.id)
            pending = [s for s in pending if s.id not in reported]
            ctx.cell.save_session(session)


def _compiled_profiles(cell: Cell, session) -> dict:
    """The profile each compiled grammar's engine declared (group id, None for a one-grammar cell -> Profile),
    from the sessions' compile records, the latest winning: an engine's profile may depend on the grammar it
    compiled (Pre3 picks its front end per grammar), which the parent's uncompiled probe cannot know."""
    from gcdbench.parsers.base import Profile

    out = {}
    for s in [*cell.sessions(), *([session] if session is not None else [])]:
        for init in s.get("inits") or []:
            if init.get("profile"):
                out[init.get("group")] = Profile(**init["profile"])
    return out


def _audit_pending(cell: Cell, session, dataset, tokenizer, engine_name, opts, probe, cfg) -> None:
    """Compare the masks saved during the run (``<sample>.audit.npz``) with the reference, once no engine is being
    timed; each part gets its audit rows. A run stopped before this point audits them when resumed. The reference
    runs in a child under the cell's limits (``experiments/audit_child.py``): a sample whose audit exceeds them is
    recorded as skipped, with the reason, and the rest go on; a resume with ``audit.per_sample=0`` drops them."""
    from gcdbench.experiments.audit_child import audit_groups

    pending = sorted(cell.parts.glob("*.audit.npz"))
    if not pending:
        return
    skip = getattr(type(probe), "audit_skip", None)   # an engine that implements no language (the null engine)
    if int(cfg.audit.per_sample) == 0 or skip:   # a resume with the audit turned off: the saved masks stay unaudited
        for npz in pending:
            npz.unlink()
        why = skip or "audit.per_sample=0 on resume: the masks saved for the audit were dropped"
        if skip:
            if session is not None:
                session["audit_error"] = why
            return
        print(f"note: {cell.out}: {why} ({len(pending)} sample(s) stay unaudited)", file=sys.stderr)
        if session is not None:
            session["audit_error"] = why
        return
    by_id = {s.id: s for s in dataset.samples}
    jobs = []
    for npz in pending:
        sample_id = npz.name[: -len(".audit.npz")]
        if load_json(cell.parts / f"{sample_id}.sample.json") is None or sample_id not in by_id:
            npz.unlink()
            continue
        sample = by_id[sample_id]
        jobs.append((sample_id, sample.text, sample.ids(tokenizer), npz))
    skipped: dict[str, str] = {}

    def on_result(sample_id: str, rows, reason) -> None:
        part = cell.parts / f"{sample_id}.sample.json"
        rec = load_json(part)
        if rows is None:
            skipped[sample_id] = reason
        else:
            rec["audits"] = rows
            single = rec.get("single_check")
            if single is not None:   # batch mode: the batch row equalled the sequence's own fill_mask
                for a in rec["audits"]:
                    a["agree_single_mode"] = bool(single.get(str(a["step"]), False))
            write_json(part, rec)
        (cell.parts / f"{sample_id}.audit.npz").unlink(missing_ok=True)

    group_of = dataset.group_of()
    compiled_profiles = _compiled_profiles(cell, session)
    by_grammar: dict = {}   # the jobs of each grammar (a dataset of many grammars has one per group)
    for job in jobs:
        group = group_of.get(job[0])
        by_grammar.setdefault(group.id if group is not None else None, (group.grammar if group else dataset.grammar,
                                                                         []))[1].append(job)
    groups = []
    for gid, (grammar, grammar_jobs) in by_grammar.items():
        if grammar.refusal is not None:   # no Lark grammar (an engine with its own schema compiler ran it)
            for sample_id, *_ in grammar_jobs:
                on_result(sample_id, None, f"audit skipped: the harness has no grammar: {grammar.refusal}")
            continue
        groups.append((grammar, compiled_profiles.get(gid) or probe.profile(), grammar_jobs))
    audit_groups(groups, tokenizer.name, Path(cfg.out_dir) / REFERENCE_CACHE, float(cfg.limits.sample_timeout_s),
                 float(cfg.limits.memory_mb), on_result, setup_timeout_s=float(cfg.limits.compile_timeout_s))
    if skipped and session is not None:
        reasons = sorted(set(skipped.values()))
        if len(skipped) == len(jobs) and len(reasons) == 1:
            session["audit_error"] = reasons[0].removeprefix("audit skipped: ")
        session["audit_skipped"] = {**session.get("audit_skipped", {}), **skipped}


class _NoProgress:
    def update(self, n):
        pass

    def set_postfix_str(self, s):
        pass

    def close(self):
        pass


def _progress(total, initial, desc, enabled):
    if not enabled:
        return _NoProgress()
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="sample", file=sys.stderr, dynamic_ncols=True)
