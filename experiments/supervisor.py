"""The engine's worker process, parent side: starting it under the cell's limits (compile, warm-up), feeding it
samples or a batch queue, watching for hangs, out-of-memory and a dead child, and turning what ended a wait into a
typed outcome (:func:`ended`, shared by single and batch mode). The orchestration (``runner``) decides what to
run; this module only supervises the child.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import weakref

from gcdbench.experiments.rowlayout import WORKER_BATCH_SUMMARY, WORKER_STEP
from gcdbench.experiments.steplog import SlotJournal, StepLog
from gcdbench.parsers.base import Outcome
from gcdbench.parsers.common.limited import Event, LimitedProcess, exit_description


class Worker:
    """The engine's child process (``experiments/worker.py``; batch mode ``worker_batch.py``) and its StepLog
    (batch mode: the log of batch steps, and the SlotJournal of the sequences in flight)."""

    def __init__(self, engine: str, opts: dict, grammar, tokenizer_name: str, warmup_ids, on_progress,
                 batch: dict | None = None, env: dict | None = None):
        self.journal = None
        if batch:
            self.log = StepLog.create(layout=WORKER_BATCH_SUMMARY)
            self.journal = SlotJournal.create(int(batch["size"]), int(batch["capacity"]))
            extra = ({"size": int(batch["size"]), "journal": self.journal.path,
                      "warmup_budget_s": float(batch["warmup_budget_s"])},)
        else:
            self.log = StepLog.create()
            extra = ()
        module = "gcdbench.experiments.worker_batch" if batch else "gcdbench.experiments.worker"
        self.proc = LimitedProcess([sys.executable, "-m", module], channel=True, env=env)
        self.proc.send(("init", engine, opts, grammar, tokenizer_name, warmup_ids, self.log.path, *extra))
        self.on_progress = on_progress
        self.last_progress = None
        self.rows: list | None = None
        self.bsteps: list = []
        self.on_seq = None

    def _on_message(self, msg) -> bool:
        kind = msg[0]
        if kind == "attached":   # both sides map the StepLog (and the journal): their files can go
            self.log.unlink()
            if self.journal is not None:
                self.journal.unlink()
            return True
        if kind == "bsteps":   # the batch-step log was full
            self.bsteps.extend(msg[1])
            return True
        if kind == "seq" and self.on_seq is not None:   # a sequence of the batch ended
            self.on_seq(msg[1])
            return True
        if kind == "progress":
            self.last_progress = msg[1]
            self.on_progress(msg[1])
            return True
        if kind == "steps":   # a sample longer than the StepLog: a full batch
            if self.rows is not None:
                self.rows.extend(msg[1])
            return True
        return False

    def wait(self, timeout_s: float, memory_mb: float):
        return self.proc.wait(timeout_s, memory_mb, self._on_message)

    def run_sample(self, sample_id, ids, audit_at, timeout_s: float, memory_mb: float):
        """(event, columns): the ``result`` message or what ended the wait, and every step the sample finished
        (``{name: values}`` of :data:`~gcdbench.experiments.rowlayout.WORKER_STEP`)."""
        self.log.reset()
        self.rows = []
        if not self.proc.send(("sample", sample_id, ids, audit_at)):
            ev = self.proc.wait(1.0)
        else:
            ev = self.wait(timeout_s, memory_mb)
        rows, self.rows = self.rows, None
        if ev.kind != "message":
            self.proc.kill()
            self.proc.drain(lambda m: rows.extend(m[1]) if m[0] == "steps" else None)
        rows.extend(self.log.raw_rows())
        return ev, WORKER_STEP.columns(rows)

    def run_batch(self, work: list, sample_timeout_s: float, run_left_s: float, memory_mb: float, on_seq):
        """Send the whole queue and wait for ``batch_done``. ``on_seq(result)`` gets each sequence as it ends.

        The parent also watches for a hang: when no batch step finishes within ``sample_timeout_s`` (a step that
        long already exceeds the limit of every sequence in it), or the worker is still running
        ``sample_timeout_s`` after the run's time is up, it kills the worker. Returns (event, in_flight, steps):
        the ``batch_done`` message or what ended the wait (``timeout`` here = a hang); the rows of the sequences
        still in flight (work index -> columns; empty unless the worker died or was killed); the batch-step rows
        (in :data:`~gcdbench.experiments.rowlayout.WORKER_BATCH_SUMMARY` order)."""
        self.on_seq = on_seq
        self.bsteps = []
        self.log.reset()
        seen, last_change = -1, time.monotonic()
        hard_end = time.monotonic() + run_left_s + sample_timeout_s
        if not self.proc.send(("batch", work, sample_timeout_s, run_left_s)):
            ev = self.proc.wait(1.0)
        else:
            while True:
                now = time.monotonic()
                ev = self.wait(max(0.05, min(1.0, hard_end - now)), memory_mb)
                if ev.kind != "timeout":
                    break
                done = len(self.bsteps) + self.log.count
                now = time.monotonic()
                if done != seen:
                    seen, last_change = done, now
                if now - last_change > sample_timeout_s:
                    ev = Event("timeout", "stall")
                    break
                if now >= hard_end:
                    ev = Event("timeout", "run")
                    break
        in_flight: dict = {}
        if not (ev.kind == "message" and ev.value[0] == "batch_done"):
            self.proc.kill()
            self.proc.drain(lambda m: self._on_message(m))
            in_flight = self.journal.in_flight()
        self.on_seq = None
        steps, self.bsteps = self.bsteps + self.log.raw_rows(), []
        self.log.reset()
        return ev, in_flight, steps

    def kill(self) -> None:
        self.proc.kill()
        self.proc.close()
        self.log.close(unlink=True)
        if self.journal is not None:
            self.journal.close(unlink=True)

    def stop(self) -> None:
        self.proc.send(("stop",))
        self.proc.close(grace_s=10)
        self.log.close(unlink=True)
        if self.journal is not None:
            self.journal.close(unlink=True)


def compile_failure(ev, worker: Worker, limits) -> dict:
    """``{"message", "kind"}`` of a compile that did not end in ``compiled``."""
    if ev.kind == "message" and ev.value[0] == "compile_error":
        return dict(ev.value[1])
    last = f" (last progress: {worker.last_progress})" if worker.last_progress else ""
    if ev.kind == "timeout":
        return {"message": f"compile did not finish within {limits.compile_timeout_s:g} s "
                           f"(limits.compile_timeout_s){last}", "kind": "timeout"}
    if ev.kind == "oom":
        return {"message": f"compile exceeded the memory limit of {limits.memory_mb:g} MB (limits.memory_mb; "
                           f"{ev.value:.0f} MB resident){last}", "kind": "oom"}
    if ev.kind == "exit":
        return {"message": f"worker died while compiling ({exit_description(ev.value)}){last}", "kind": "died"}
    return {"message": f"unexpected message from the worker while compiling: {ev.value!r:.200}", "kind": "crash"}


def await_compile(worker: Worker, limits, version) -> tuple[dict | None, dict | None, bool]:
    """Wait for the worker's compile: (info, None, True) once ``compiled``, else (info or None, failure, alive):
    ``alive`` when the engine itself reported the failure (``compile_error``) and the worker waits for more. A
    compile whose recorded peak is above ``limits.memory_mb`` (a burst between two polls, issue 27 item 3) is an
    ``oom``."""
    mem = float(limits.memory_mb)
    ev = worker.wait(float(limits.compile_timeout_s), mem)
    if not (ev.kind == "message" and ev.value[0] == "compiled"):
        alive = ev.kind == "message" and ev.value[0] == "compile_error"
        return None, {**compile_failure(ev, worker, limits), "engine_version": version}, alive
    init = dict(ev.value[1])
    peak = init.get("peak_rss_compile_mb") or 0
    if peak > mem:
        return init, {"message": f"compile exceeded the memory limit of {mem:g} MB (limits.memory_mb; {peak:.0f} MB "
                                 "resident at its peak, between two polls)", "kind": "oom",
                      "engine_version": version}, False
    return init, None, True


def cold_env() -> tuple[dict, str]:
    """A worker environment whose numba cache (``NUMBA_CACHE_DIR``) and gcdbench cache (``GCDBENCH_CACHE``: the
    engines' compiled artifacts) are new empty folders, as on a machine that never ran gcdbench (``cold=true``),
    and the folder holding both."""
    d = tempfile.mkdtemp(prefix="gcdbench-cold-")
    return {**os.environ, "NUMBA_CACHE_DIR": os.path.join(d, "numba"), "GCDBENCH_CACHE": os.path.join(d, "cache")}, d


def _record_failure(session, failure: dict, group: str | None) -> None:
    """A compile failure: the session's (one grammar) or its group's (a dataset of many grammars)."""
    if group is None:
        session["compile_failure"] = failure
    else:
        session.setdefault("group_failures", {})[group] = failure


def start_worker(cfg, session, cell, engine_name, opts, grammar, tokenizer, warm_ids, version, progress,
                 batch: dict | None = None, group: str | None = None):
    """(worker, None) once ``grammar`` is compiled and the worker warmed up, or (None, failure) -- recorded in the
    session either way (``group``: the group of a dataset of many grammars whose grammar this is).
    Batch mode (``batch``): the sequences are made within the compile's wait (``compile_timeout_s``; an engine
    without ``fork()`` compiles copies), and the warm-up runs through the batch path (its own time budget)."""
    limits = cfg.limits
    mem = float(limits.memory_mb)
    while True:
        progress.set_postfix_str("compiling")
        env, cold_dir = cold_env() if cfg.get("cold") else (None, None)
        worker = Worker(engine_name, opts, grammar, tokenizer.name, warm_ids,
                         lambda text: progress.set_postfix_str(f"compiling: {text}"[:80]), batch, env)
        if cold_dir is not None:   # the empty caches go when the worker object does
            weakref.finalize(worker, shutil.rmtree, cold_dir, True)
        init, failure, _alive = await_compile(worker, limits, version)
        if init is not None:
            init.update(session=session["id"], **({"group": group} if group is not None else {}))
        if failure is not None:
            worker.kill()
            if init is not None:
                session["inits"].append(init)
            _record_failure(session, failure, group)
            cell.save_session(session)
            progress.set_postfix_str("")
            return None, failure
        progress.set_postfix_str("warm-up sample" if warm_ids is not None else "")
        warm_s = float(limits.warmup_timeout_s if warm_ids is not None and limits.warmup_timeout_s is not None
                       else limits.sample_timeout_s)   # the untimed warm-up may have its own limit
        ev = worker.wait(warm_s, mem)
        progress.set_postfix_str("")
        if ev.kind == "message" and ev.value[0] == "ready":
            init.update(ev.value[1])
            if init.get("first_mask_us") is not None:
                init["ttfm_s"] = init["init_s"] + init["first_mask_us"] / 1e6
            if init.get("peak_rss_method"):
                session["peak_rss_method"] = init["peak_rss_method"]
            session["inits"].append(init)
            cell.save_session(session)
            return worker, None
        # the warm-up sample hung, ran out of memory or killed the worker: recorded, then one more compile
        # without warm-up (the same sample, timed, then gets its own typed outcome)
        init["warmup_failed"] = {"timeout": f"no result within {warm_s:g} s",
                                 "oom": f"resident memory above {limits.memory_mb:g} MB",
                                 "exit": f"worker died ({exit_description(ev.value)})"}.get(ev.kind, repr(ev.value))
        session["inits"].append(init)
        cell.save_session(session)
        worker.kill()
        if warm_ids is None:
            return None, {"message": "worker failed before its first sample", "kind": "died", "engine_version": version}
        warm_ids = None


def switch_grammar(cfg, session, cell, worker: Worker, grammar, group: str, version) -> tuple[dict | None, bool]:
    """Compile the next group's grammar in the running worker (a dataset of many grammars): (None, True) once
    compiled, else (failure, usable): the failure is recorded under the group; ``usable`` is False when the worker
    must be killed (it hung, died or ran out of memory) and True when the engine refused the grammar (the worker
    waits for the next one)."""
    if not worker.proc.send(("grammar", grammar)):
        failure, usable = {"message": "the worker was gone before compiling", "kind": "died",
                           "engine_version": version}, False
        init = None
    else:
        init, failure, usable = await_compile(worker, cfg.limits, version)
    if init is not None:
        session["inits"].append({**init, "session": session["id"], "group": group})
    if failure is not None:
        _record_failure(session, failure, group)
    cell.save_session(session)
    return failure, usable


def ended(ev, limits, timeout_s: float | None = None, which: str = "limits.sample_timeout_s") -> tuple[Outcome, str]:
    """The typed outcome and message of a wait for a sample (single mode) or a batch step that did not end in
    its result: the one mapping from what ended the wait to an outcome, for both modes. ``timeout_s``/``which``:
    the limit a single-mode sample ran under; a batch wait's ``timeout`` says ``stall`` (no batch step within the
    sample limit) or ``run`` (still running a sample limit after the run's time was up)."""
    if ev.kind == "timeout" and ev.value == "run":
        return Outcome.TIMEOUT, (f"the worker was still running {limits.sample_timeout_s:g} s after the run time "
                                 f"limit of {limits.run_timeout_s:g} s (limits.run_timeout_s)")
    if ev.kind == "timeout" and ev.value == "stall":
        return Outcome.TIMEOUT, (f"no batch step finished within {limits.sample_timeout_s:g} s "
                                 "(limits.sample_timeout_s)")
    if ev.kind == "timeout":
        limit = float(limits.sample_timeout_s) if timeout_s is None else timeout_s
        return Outcome.TIMEOUT, f"no result within {limit:g} s ({which})"
    if ev.kind == "oom":
        return Outcome.OOM, f"resident memory above {limits.memory_mb:g} MB (limits.memory_mb)"
    if ev.kind == "exit":
        return Outcome.CRASH, f"worker died ({exit_description(ev.value)})"
    return Outcome.CRASH, f"unexpected message from the worker: {ev.value!r:.200}"


class Supervised:
    """The worker of one session's loop, whichever mode: ``with Supervised() as sup`` kills the worker at once on
    Ctrl-C or a bug (finished samples stay in ``parts/``) and stops it politely at the end; ``sup.worker`` is
    None while no worker runs (not started yet, or killed after a failure)."""

    def __init__(self):
        self.worker: Worker | None = None

    def kill(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.kill()
        elif self.worker is not None:
            self.worker.stop()
            self.worker = None
        return False
