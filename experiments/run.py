"""Command line: ``python -m experiments.run engine=xgrammar dataset=spider samples=30`` from the repository root,
or the same as ``gcdbench-run ...`` (or ``python -m gcdbench.experiments.run ...``) from anywhere.

A thin ``@hydra.main`` wrapper around :func:`gcdbench.experiments.runner.run`; tests call ``run`` directly.
A configuration, data or cell-folder problem prints ``error: <reason>`` (one line) and exits with code 2; so does
a full disk (or quota) while results are written (``error: no space left on device writing <file>; ...``: the
finished samples are kept, the same command resumes). In a multirun (``-m``) a failing job is recorded as failed
(``<sweep dir>/<job>/job.json``) and the other jobs still run; at the end :class:`SweepSummary` lists the failed
jobs, writes ``jobs.json`` and the process exits with code 1 if any failed.

Where a sweep's files go. A sweep into one out_dir keeps them in ``<out_dir>/.hydra/multirun_<time>/``
(``multirun.yaml``, ``jobs.json``, one folder per job). A sweep over ``out_dir`` itself (``-m out_dir=a,b ...``,
or ``out_dir`` among ``hydra.sweeper.params``) has no one out_dir: each job stays in its own out_dir's
``.hydra/multirun_<time>/<job>/`` (one ``<time>`` for the whole sweep), and each of those folders gets the
sweep's ``multirun.yaml`` and a ``jobs.json`` of the jobs it holds, as a sweep into that out_dir alone would;
nothing is written outside the out_dirs (no ``outputs/`` in the working folder), every out_dir is checked before
any job runs, and the sweep line names every ``jobs.json``. (A common parent folder is not used: out_dirs need
not share one below ``/``.) An out_dir that varies only through an interpolation of other swept keys is not
recognised; sweep ``out_dir`` itself.
"""
from __future__ import annotations

import json
import shutil
import sys
import traceback
from pathlib import Path

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, read_write

from gcdbench.experiments.config import folder_problem, register
from gcdbench.experiments.launcher import JOB_FILE, SchedulerStop, register_launcher, scheduler_signals
from gcdbench.experiments.store import NoSpace, is_no_space, no_space_message

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")   # the checkout's conf/; in a wheel, gcdbench/conf/
register()
register_launcher()   # hydra/launcher=slurm (experiments/launcher.py)


def _record(job_dir, status: str, **extra) -> None:
    """The job's status beside Hydra's own files of the job (read by :class:`SweepSummary`)."""
    try:
        Path(job_dir).mkdir(parents=True, exist_ok=True)
        (Path(job_dir) / JOB_FILE).write_text(json.dumps({"status": status, **extra}, indent=1))
    except OSError:
        pass


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from hydra.utils import to_absolute_path

    from gcdbench.experiments.report import cell_summary
    from gcdbench.experiments.runner import run

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    job_dir = hc.runtime.output_dir
    cfg.data_root = to_absolute_path(cfg.data_root)
    cfg.out_dir = to_absolute_path(cfg.out_dir)
    show = (lambda done: print(cell_summary(done))) if cfg.report else None   # each cell's line as it ends
    try:
        with scheduler_signals():   # a SLURM job: scancel / time limit stop the run as Ctrl-C does
            out = run(cfg, on_cell=show)
    except SchedulerStop as err:
        print(f"error: {err}", file=sys.stderr)
        if not multirun:
            sys.exit(130)
        _record(job_dir, "failed", error=str(err), stopped_by=err.signal_name)
        return
    except KeyboardInterrupt:
        print("interrupted: the finished samples are kept; run the same command again to resume", file=sys.stderr)
        sys.exit(130)
    except (FileNotFoundError, ValueError, OSError) as err:   # configuration, data, cell-folder refusals: one line
        if isinstance(err, OSError) and not isinstance(err, FileNotFoundError) and not is_no_space(err):
            if not multirun:
                raise   # another OS error: its traceback
            traceback.print_exc()
            _record(job_dir, "failed", error=f"{type(err).__name__}: {err}")
            return
        line = (no_space_message(err, err.filename or f"results under {cfg.out_dir}")
                if is_no_space(err) and not isinstance(err, NoSpace) else str(err))
        print(f"error: {line}", file=sys.stderr)
        if not multirun:
            sys.exit(2)
        _record(job_dir, "failed", error=line)
        return
    except Exception as err:   # noqa: BLE001 - a bug: its traceback, and in a sweep the other jobs still run
        if not multirun:
            raise
        traceback.print_exc()
        _record(job_dir, "failed", error=f"{type(err).__name__}: {err}")
        return
    _record(job_dir, "ok", cell=str(out))


#: an out_dir on a file system with less free space than this is refused before Hydra writes its own files there
#: (a disk already full would fail in Hydra's config writes, with Hydra's traceback)
MIN_FREE_BYTES = 1 << 20


def out_dir_problem(out_dir) -> str | None:
    """Why ``out_dir`` cannot hold results (one line with the fix), or None. Checked by :class:`OutDirCheck`
    before Hydra creates its own folders there."""
    problem = folder_problem(out_dir)
    if problem is None:
        probe = Path(str(out_dir)).expanduser()
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        try:
            free = shutil.disk_usage(probe).free
        except OSError:
            return None
        if free >= MIN_FREE_BYTES:
            return None
        return (f"out_dir={out_dir}: no space left on device ({free} bytes free on the file system of {probe}); "
                "free space (or give another out_dir) and run the same command again: finished samples are kept")
    fix = "give a folder (or a path to create)" if problem.endswith("not a folder") else "give a folder you can write to"
    return f"out_dir={out_dir}: {problem}; {fix} as out_dir"


def _plain_value(x) -> str:
    from hydra.core.override_parser.types import QuotedString

    return x.text if isinstance(x, QuotedString) else str(x)


def swept_out_dirs(config: DictConfig) -> list[str] | None:
    """The ``out_dir`` values of a sweep over ``out_dir`` (command line, else ``hydra.sweeper.params``), in sweep
    order, or None when ``out_dir`` is not swept."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    args = [f"{k}={v}" for k, v in OmegaConf.to_container(params, resolve=False).items()] if params else []
    args += list(OmegaConf.select(config, "hydra.overrides.task", default=None) or [])
    found = None
    mine = [a for a in args if a.split("=", 1)[0].lstrip("+~") == "out_dir"]
    for o in OverridesParser.create().parse_overrides(mine):
        found = ([_plain_value(v) for v in o.sweep_iterator()] if o.is_sweep_override() else None)
    return found if found and len(found) > 1 else None


def sweep_dirs(config: DictConfig) -> list[Path]:
    """The folders holding the jobs of this multirun: ``hydra.sweep.dir``, or, in a sweep over ``out_dir`` whose
    ``hydra.sweep.dir`` lies under ``${out_dir}`` (the default), that folder in each out_dir (module docstring)."""
    master = Path(str(config.hydra.sweep.dir))
    values = swept_out_dirs(config)
    try:
        rel = master.relative_to(Path(str(config.out_dir)))
    except ValueError:   # hydra.sweep.dir given elsewhere: every job is there
        return [master]
    if values is None:
        return [master]
    out, seen = [], set()
    for v in values:
        d = Path(v) / rel
        if d.resolve() not in seen:
            seen.add(d.resolve())
            out.append(d)
    return out


class OutDirCheck(Callback):
    """Refuses an unusable ``out_dir`` in one line (exit code 2) before Hydra writes its run folder into it; in a
    sweep over ``out_dir`` checks every value, and puts the sweep's own folder into the first out_dir (each job
    stays in its own out_dir; module docstring)."""

    def _check(self, out_dirs) -> None:
        for out_dir in out_dirs:
            problem = out_dir_problem(out_dir)
            if problem:
                print(f"error: {problem}", file=sys.stderr)
                sys.exit(2)

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        self._check([config.out_dir])

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        values = swept_out_dirs(config)
        self._check(values or [config.out_dir])
        if values is not None:
            # the sweep's own folder (multirun.yaml; a launcher's files) goes into the first out_dir, not into the
            # default out_dir none of the jobs uses; ${now:...} was resolved above, so every job's folder has the
            # same time (Hydra copies the resolver cache into each job's config)
            with read_write(config):
                config.out_dir = values[0]


class SweepSummary(Callback):
    """At the end of a multirun: one line per failed job (from each job's ``job.json``; a job without one died
    before it could write it), ``<sweep dir>/jobs.json`` with every job's status, exit code 1 if any failed."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        dirs = sweep_dirs(config)
        master = Path(str(config.hydra.sweep.dir))
        jobs, details = [], []
        for sweep in dirs:
            here = []
            for d in sorted((p for p in sweep.iterdir() if (p / ".hydra" / "overrides.yaml").exists()),
                            key=lambda p: (len(p.name), p.name)) if sweep.exists() else []:
                overrides = list(OmegaConf.load(d / ".hydra" / "overrides.yaml"))
                try:
                    rec = json.loads((d / JOB_FILE).read_text())
                except (OSError, ValueError):
                    rec = {"status": "failed", "error": "the job ended without recording a result (killed?)"}
                here.append({"job": d.name, "overrides": overrides, **rec})
            if not here:
                continue
            jobs += here
            try:   # a full disk must not hide the summary
                if sweep != master and (master / "multirun.yaml").exists() and not (sweep / "multirun.yaml").exists():
                    shutil.copyfile(master / "multirun.yaml", sweep / "multirun.yaml")
                (sweep / "jobs.json").write_text(json.dumps(here, indent=1))
                details.append(str(sweep / "jobs.json"))
            except OSError as err:
                print(f"sweep: cannot write {sweep / 'jobs.json'}: {err}", file=sys.stderr)
        if not jobs:
            return
        jobs.sort(key=lambda j: (len(j["job"]), j["job"]))
        where = f" (details: {', '.join(details)})" if details else ""
        failed = [j for j in jobs if j["status"] != "ok"]
        if failed:
            print(f"sweep: {len(failed)} of {len(jobs)} jobs failed{where}:", file=sys.stderr)
            for j in failed:
                first = (j.get("error") or "").splitlines()[0][:300] if j.get("error") else ""
                named = [o for o in j["overrides"] if o != "repeat=0"]   # repeat=0: every job of a sweep run once
                print(f"  #{j['job']} {' '.join(named)}: {first}", file=sys.stderr)
            sys.exit(1)
        print(f"sweep: all {len(jobs)} jobs ok{where if len(details) > 1 else ''}", file=sys.stderr)


if __name__ == "__main__":
    main()
