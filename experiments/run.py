"""Command line: ``python -m experiments.run engine=xgrammar dataset=spider samples=30`` from the repository root,
or the same as ``gcdbench-run ...`` (or ``python -m gcdbench.experiments.run ...``) from anywhere.

A thin ``@hydra.main`` wrapper around :func:`gcdbench.experiments.runner.run`; tests call ``run`` directly.
A configuration, data or cell-folder problem prints ``error: <reason>`` (one line) and exits with code 2. In a
multirun (``-m``) a failing job is recorded as failed (``<sweep dir>/<job>/job.json``) and the other jobs still
run; at the end :class:`SweepSummary` lists the failed jobs and the process exits with code 1 if any failed.
"""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from gcdbench.experiments.config import folder_problem, register

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")   # the checkout's conf/; in a wheel, gcdbench/conf/
JOB_FILE = "job.json"
register()


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
    try:
        out = run(cfg)
    except KeyboardInterrupt:
        print("interrupted: the finished samples are kept; run the same command again to resume", file=sys.stderr)
        sys.exit(130)
    except (FileNotFoundError, ValueError) as err:   # configuration, data and cell-folder refusals: one line
        print(f"error: {err}", file=sys.stderr)
        if not multirun:
            sys.exit(2)
        _record(job_dir, "failed", error=str(err))
        return
    except Exception as err:   # noqa: BLE001 - a bug: its traceback, and in a sweep the other jobs still run
        if not multirun:
            raise
        traceback.print_exc()
        _record(job_dir, "failed", error=f"{type(err).__name__}: {err}")
        return
    _record(job_dir, "ok", cell=str(out))
    if cfg.report:
        print(cell_summary(out))


def out_dir_problem(out_dir) -> str | None:
    """Why ``out_dir`` cannot hold results (one line with the fix), or None. Checked by :class:`OutDirCheck`
    before Hydra creates its own folders there."""
    problem = folder_problem(out_dir)
    if problem is None:
        return None
    fix = "give a folder (or a path to create)" if problem.endswith("not a folder") else "give a folder you can write to"
    return f"out_dir={out_dir}: {problem}; {fix} as out_dir"


class OutDirCheck(Callback):
    """Refuses an unusable ``out_dir`` in one line (exit code 2) before Hydra writes its run folder into it."""

    def _check(self, config: DictConfig) -> None:
        problem = out_dir_problem(config.out_dir)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config)

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config)


class SweepSummary(Callback):
    """At the end of a multirun: one line per failed job (from each job's ``job.json``; a job without one died
    before it could write it), ``<sweep dir>/jobs.json`` with every job's status, exit code 1 if any failed."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep = Path(config.hydra.sweep.dir)
        jobs = []
        for d in sorted((p for p in sweep.iterdir() if (p / ".hydra" / "overrides.yaml").exists()),
                        key=lambda p: (len(p.name), p.name)) if sweep.exists() else []:
            overrides = list(OmegaConf.load(d / ".hydra" / "overrides.yaml"))
            try:
                rec = json.loads((d / JOB_FILE).read_text())
            except (OSError, ValueError):
                rec = {"status": "failed", "error": "the job ended without recording a result (killed?)"}
            jobs.append({"job": d.name, "overrides": overrides, **rec})
        if not jobs:
            return
        (sweep / "jobs.json").write_text(json.dumps(jobs, indent=1))
        failed = [j for j in jobs if j["status"] != "ok"]
        if failed:
            print(f"sweep: {len(failed)} of {len(jobs)} jobs failed (details: {sweep / 'jobs.json'}):", file=sys.stderr)
            for j in failed:
                first = (j.get("error") or "").splitlines()[0][:300] if j.get("error") else ""
                print(f"  #{j['job']} {' '.join(j['overrides'])}: {first}", file=sys.stderr)
            sys.exit(1)
        print(f"sweep: all {len(jobs)} jobs ok", file=sys.stderr)


if __name__ == "__main__":
    main()
