"""``hydra/launcher=slurm``: Hydra's submitit SLURM launcher, made to survive the faults a scheduler makes.

The stock launcher (hydra-submitit-launcher 1.2.0) submits the sweep's jobs as one job array (``sbatch --array``)
and then reads each job's result in turn: the first job that the scheduler ended without a result (``scancel``,
its time limit, a node failure) raises, the sweep command stops with a traceback while the other array tasks go
on running, and no ``jobs.json`` is written. :class:`SlurmLauncher` submits the same array, then waits until
every task has a result or has left the queue (``squeue``; no accounting database needed), and records a task
that ended without a result as a failed job: ``<sweep dir>/<job>/job.json`` with ``status: failed``, its
scheduler state (``CANCELLED``, ``TIMEOUT``, ``NODE_FAIL``, ..., from ``scontrol show job``, else ``sacct``) and
where its log is. :class:`~gcdbench.experiments.run.SweepSummary` then lists it with the sweep's other failed
jobs, writes ``jobs.json`` and exits 1; the cell keeps the samples it finished, and submitting the same sweep
again resumes each cell (only what is missing runs).

Resources of each job come from the run's ``limits`` (``conf/hydra/launcher/slurm.yaml``): resolvers
``${slurm_minutes:...}`` (the job's time limit) and ``${slurm_mem_gb:...}`` (its memory), registered by
:func:`register_launcher`, which also registers the launcher class with Hydra (Hydra instantiates launchers only
from its ``hydra_plugins`` namespace, so the class is registered under :data:`PLUGIN_NAME`; the jobs themselves
run the stock launcher's code: what is pickled to them is a stock ``SlurmLauncher``).

Inside a task, :func:`scheduler_signals` (used by ``run.main``) turns SLURM's SIGTERM (``scancel``, the time limit,
pre-emption) and submitit's SIGUSR2 (``signal_delay_s`` before the time limit) into :class:`SchedulerStop`: the
runner stops as on Ctrl-C, so the sample in flight is not recorded as a crash, and the job records itself as
failed (``stopped_by``). submitit's own requeue on SIGUSR2 (``max_num_timeout`` > 0) is not used: submitting
the sweep again resumes it.
"""
from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Sequence

from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as _StockSlurmLauncher

JOB_FILE = "job.json"   # beside Hydra's own files of each job (read by run.SweepSummary)
PLUGIN_MODULE = "hydra_plugins.gcdbench_launcher"
PLUGIN_NAME = f"{PLUGIN_MODULE}.SlurmLauncher"
#: seconds between two looks at the queue while the sweep's jobs run
POLL_S = 2.0
#: a task that has left the queue gets this long for its result file to appear (a slow shared file system)
RESULT_GRACE_S = 10.0


def slurm_minutes(compile_timeout_s, warmup_timeout_s, sample_timeout_s, run_timeout_s, margin_min=5) -> int:
    """A job's time limit in whole minutes: one cell's compile, warm-up and run limits, plus ``margin_min`` for the
    interpreter's start, the audit and the writes (the runner stops a cell at its own limits before this)."""
    warmup = sample_timeout_s if warmup_timeout_s is None else warmup_timeout_s
    return int(math.ceil((float(compile_timeout_s) + float(warmup) + float(run_timeout_s)) / 60.0)) + int(margin_min)


def slurm_mem_gb(memory_mb, parent_gb=2) -> int:
    """A job's memory in whole GB: the worker's ``limits.memory_mb`` plus ``parent_gb`` for the runner's own
    process and the audit's reference checker."""
    return int(math.ceil(float(memory_mb) / 1024.0)) + int(parent_gb)


def _scheduler_state(job_id: str) -> str:
    """The state SLURM gives a finished task (``CANCELLED``, ``TIMEOUT``, ...): ``scontrol show job`` (kept for
    MinJobAge after the end), else ``sacct`` (a cluster with accounting); ``UNKNOWN`` when neither knows."""
    try:
        out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30)
        for field in out.stdout.split():
            if field.startswith("JobState="):
                return field.split("=", 1)[1]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        out = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State", "-j", job_id], capture_output=True,
                             text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return "UNKNOWN"


def _queued(job_ids: list[str]) -> set[str] | None:
    """The ids among ``job_ids`` (``<array>_<task>``) still in the queue (pending, running, completing), or None
    when ``squeue`` did not answer (ask again later)."""
    arrays = sorted({j.split("_")[0] for j in job_ids})
    try:
        out = subprocess.run(["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(arrays)], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        if "Invalid job id" in out.stderr:   # every array has left the queue
            return set()
        return None
    return set(out.stdout.split()) & set(job_ids)


def _last_line(path) -> str:
    """``(<the last line of the task's error log>)``, e.g. ``(srun: error: node1: task 0: User defined signal 2)``."""
    try:
        lines = [x for x in Path(path).read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return f" ({lines[-1].strip()[:200]})" if lines else ""


class SchedulerStop(KeyboardInterrupt):
    """The scheduler asked a job to stop (:func:`scheduler_signals`): the runner stops as on Ctrl-C (the sample in
    flight is not recorded, the finished ones are kept) and the job records itself as failed with this message."""

    def __init__(self, signum: int) -> None:
        import signal

        self.signal_name = signal.Signals(signum).name
        if signum == signal.SIGUSR2:
            what = ("the job's time limit is near (SIGUSR2, hydra.launcher.signal_delay_s before it; give the jobs "
                    "more time with hydra.launcher.timeout_min=...)")
        else:
            what = f"the scheduler stopped the job ({self.signal_name}: scancel, its time limit or pre-emption)"
        super().__init__(f"{what}: the finished samples are kept; submit the same sweep again to resume")


@contextlib.contextmanager
def scheduler_signals():
    """Inside a SLURM job of :class:`SlurmLauncher` (submitit sets ``SUBMITIT_EXECUTOR=slurm``): SIGTERM (scancel, the
    time limit, pre-emption; SLURM sends it to every process of the job, and submitit's own handler ignores it) and
    SIGUSR2 (submitit's warning ``signal_delay_s`` before the time limit) raise :class:`SchedulerStop` in the runner.
    Elsewhere nothing changes. The worker process ignores SIGTERM (experiments/worker.py): its parent stops it."""
    import os
    import signal
    import threading

    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm" or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SchedulerStop(signum)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGUSR2)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


class SlurmLauncher(_StockSlurmLauncher):
    """The stock submitit SLURM launcher that waits for every task of its array and records a task the scheduler
    ended (module docstring) instead of stopping the sweep at the first one."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int):
        import submitit
        from hydra.core.singleton import Singleton
        from hydra.core.utils import JobReturn, JobStatus, filter_overrides
        from omegaconf import OmegaConf

        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

        assert self.config is not None and len(job_overrides) > 0
        params = self.params
        init = {"folder": params["submitit_folder"]}
        if "max_num_timeout" in params:
            init["slurm_max_num_timeout"] = params["max_num_timeout"]
        executor = submitit.AutoExecutor(cluster="slurm", **init)
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()
                                      if k not in ("submitit_folder", "max_num_timeout")})
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        print(f"slurm: sweep output dir {sweep_dir}", file=sys.stderr)
        worker = _StockSlurmLauncher.__new__(_StockSlurmLauncher)   # what runs in each task: the stock code
        worker.__dict__.update(self.__dict__)
        args, state = [], Singleton.get_state()
        for i, overrides in enumerate(job_overrides):
            idx = initial_job_idx + i
            print(f"slurm:   #{idx} : {' '.join(filter_overrides(overrides))}", file=sys.stderr)
            args.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", state))
        jobs = executor.map_array(worker, *zip(*args))
        ids = [j.job_id for j in jobs]
        print(f"slurm: submitted {len(jobs)} jobs as array {ids[0].split('_')[0]} (watch: squeue -r -j "
              f"{ids[0].split('_')[0]}; logs: {Path(str(jobs[0].paths.stdout)).parent.parent})", file=sys.stderr)
        self._wait(jobs)
        returns = []
        for i, (job, overrides) in enumerate(zip(jobs, job_overrides)):
            job_dir = sweep_dir / str(initial_job_idx + i)
            if job.paths.result_pickle.exists():
                try:
                    ret = job.results()[0]
                except Exception as err:   # noqa: BLE001 - submitit's own failure (e.g. its time-out signal handler)
                    ret = err
                if isinstance(ret, JobReturn) and ret.status != JobStatus.FAILED:
                    returns.append(ret)
                    continue
                # the task raised outside the runner's own handling (Hydra returns it as a failed JobReturn),
                # e.g. submitit's SIGUSR2 handler before the runner started
                err = ret._return_value if isinstance(ret, JobReturn) else ret
                lines = str(err).strip().splitlines()
                error = f"{type(err).__name__}: {lines[-1] if lines else ''} (log: {job.paths.stderr})"
                st = "FAILED"
            else:
                st = _scheduler_state(job.job_id)
                error = (f"slurm ended job {job.job_id} without a result: {st}{_last_line(job.paths.stderr)}; its "
                         f"log: {job.paths.stdout} (submit the same sweep again to resume: finished samples are kept)")
            self._record_failure(job_dir, list(overrides), error, job.job_id, st)
            ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
            ret.return_value = None
            returns.append(ret)
        return returns

    @staticmethod
    def _wait(jobs) -> None:
        """Until every task has a result file or has left the queue."""
        waiting = {j.job_id: j for j in jobs}
        left: dict[str, float] = {}
        while waiting:
            for jid, job in list(waiting.items()):
                if job.paths.result_pickle.exists():
                    del waiting[jid]
            if not waiting:
                break
            queued = _queued(list(waiting))
            now = time.monotonic()
            if queued is not None:
                for jid in list(waiting):
                    if jid in queued:
                        left.pop(jid, None)
                    elif not waiting[jid].paths.stdout.exists() or now - left.setdefault(jid, now) > RESULT_GRACE_S:
                        del waiting[jid]   # gone without a result (one that never started: no log, no wait)
            time.sleep(POLL_S)

    @staticmethod
    def _record_failure(job_dir: Path, overrides: list, error: str, job_id: str, state: str) -> None:
        """``job.json`` of a task the scheduler ended (kept if the task recorded its own), and its overrides for a
        task that never started (so the sweep summary lists it)."""
        print(f"slurm: job {job_id}: {error}", file=sys.stderr)
        try:
            (job_dir / ".hydra").mkdir(parents=True, exist_ok=True)
            over = job_dir / ".hydra" / "overrides.yaml"
            if not over.exists():
                from omegaconf import OmegaConf

                OmegaConf.save(OmegaConf.create(overrides), over)
            rec = job_dir / JOB_FILE
            if not rec.exists():   # a task that recorded its own status (ok: killed after its cell ended) keeps it
                rec.write_text(json.dumps({"status": "failed", "error": error, "slurm_job": job_id,
                                           "slurm_state": state}, indent=1))
        except OSError as err:
            print(f"slurm: cannot record job {job_id} in {job_dir}: {err}", file=sys.stderr)


def register_launcher() -> None:
    """Registers :class:`SlurmLauncher` with Hydra as :data:`PLUGIN_NAME` and the resolvers of
    ``conf/hydra/launcher/slurm.yaml``."""
    from hydra.core.plugins import Plugins
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("slurm_minutes", slurm_minutes, replace=True)
    OmegaConf.register_new_resolver("slurm_mem_gb", slurm_mem_gb, replace=True)
    mod = sys.modules.get(PLUGIN_MODULE)
    if mod is None:
        mod = types.ModuleType(PLUGIN_MODULE, "gcdbench's SLURM launcher (gcdbench.experiments.launcher)")
        sys.modules[PLUGIN_MODULE] = mod
    cls = type("SlurmLauncher", (SlurmLauncher,), {"__module__": PLUGIN_MODULE, "__doc__": SlurmLauncher.__doc__})
    mod.SlurmLauncher = cls
    Plugins.instance().register(cls)


__all__ = ["JOB_FILE", "SchedulerStop", "SlurmLauncher", "register_launcher", "scheduler_signals", "slurm_mem_gb",
           "slurm_minutes"]
