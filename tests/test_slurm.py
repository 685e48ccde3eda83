"""Sweeps through a real SLURM scheduler (issue 69): ``hydra/launcher=slurm`` on a one-node cluster started on this
machine (tests/slurm_cluster.py: munge, slurmctld, slurmd; installed from Debian's packages where missing).

- a 4-cell sweep goes out as one ``sbatch --array`` whose time, memory, CPUs and partition come from the run's
  limits and the launcher config, and its cells equal those of the same sweep run locally;
- MaskBench's shards (``dataset.shard=i/N``) as one job array hold together what one unsharded run holds;
- faults the scheduler makes: a node drained then resumed (the running task finishes, the others wait) and then
  ``scancel`` mid-cell (the running task stops as on Ctrl-C, the pending ones never start: each a failed job in
  jobs.json), in one sweep; the time limit (submitit's SIGUSR2 warning stops the runner); nothing is lost or
  duplicated, and submitting the same sweep again runs only what is missing.

Marker ``slurm`` (``pytest -m slurm`` runs them alone). The cells are tiny (bytes tokenizer, the sample dataset,
the reference/psc/null engines) and the slow cells of the fault tests sleep per mask (tests/slurm_engine.py).
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("slurm_cluster", Path(__file__).with_name("slurm_cluster.py"))
slurm_cluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(slurm_cluster)

TINY = ["tokenizer=bytes", "dataset=sample", "samples=2", "progress=false", "limits.memory_mb=2000",
        "limits.compile_timeout_s=60", "limits.sample_timeout_s=60", "limits.run_timeout_s=120"]
SLOW = ["engine=null_engine", "tokenizer=bytes", "dataset=sample", "progress=false", "limits.memory_mb=2000"]
SLURM = ["hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1",
         f"hydra.launcher.partition={slurm_cluster.PARTITION}"]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """One SLURM cluster for the session (its folder); stopped at the end."""
    have = all(Path(d).exists() for d in slurm_cluster.DAEMONS) and shutil.which("sbatch")
    if not have and (os.geteuid() != 0 or not shutil.which("apt-get")):
        pytest.skip("slurm-wlm and munge are not installed and cannot be here (needs root and apt-get; "
                    "`apt-get install -y slurm-wlm munge`)")
    d = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    yield d
    slurm_cluster.stop(d)
    os.environ.pop("SLURM_CONF", None)   # start() set it for this process


def _env(cluster) -> dict:
    return {**os.environ, "SLURM_CONF": str(cluster / "slurm.conf")}


def sweep(cluster, out, *args, timeout=300, wait=True):
    """``python -m experiments.run -m ... out_dir=<out>`` from the repository root (the cluster's jobs import
    tests.slurm_engine from there); the finished process, or the running one with ``wait=False``."""
    cmd = [sys.executable, "-m", "experiments.run", "-m", *args, f"out_dir={out}"]
    if not wait:
        return subprocess.Popen(cmd, cwd=REPO, env=_env(cluster), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    return subprocess.run(cmd, cwd=REPO, env=_env(cluster), capture_output=True, text=True, timeout=timeout)


def slurm(cluster, *cmd) -> str:
    return subprocess.run(list(cmd), env=_env(cluster), capture_output=True, text=True, timeout=60,
                          check=True).stdout


def jobs_json(out) -> list[dict]:
    files = sorted(Path(out).glob(".hydra/multirun_*/jobs.json"))
    assert files, f"no jobs.json under {out}"
    return json.loads(files[-1].read_text())


def cells(out) -> dict[str, dict]:
    """Every cell under ``out`` (folder relative to out -> run.json)."""
    return {str(p.parent.relative_to(out)): json.loads(p.read_text()) for p in Path(out).rglob("run.json")
            if ".hydra" not in p.parts}


def submission(out) -> str:
    """The one sbatch script of the (last) sweep under ``out``."""
    scripts = sorted(Path(out).glob(".hydra/multirun_*/.submitit/*/*_submission.sh"))
    assert len({s.parent.name for s in scripts}) == 1, f"one job array expected, got {scripts}"
    return scripts[-1].read_text()


def parts(out) -> int:
    return sum(1 for _ in Path(out).rglob("parts/*.sample.json"))


def wait_for(ok, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ok():
            return
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout_s} s")


def finish(proc, timeout=300) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def sample_rows(cell_dir: Path):
    import pandas as pd

    return pd.read_parquet(cell_dir / "samples.parquet")


# --------------------------------------------------------------------------------------------------------------
def test_sweep_is_one_job_array_equal_to_the_local_sweep(cluster, tmp_path):
    args = ["engine=reference,psc", "repeats=2", *TINY]
    got = sweep(cluster, tmp_path / "slurm", *SLURM, *args)
    assert got.returncode == 0, got.stderr[-3000:]
    assert "sweep: all 4 jobs ok" in got.stderr
    script = submission(tmp_path / "slurm")
    # one array of 4 tasks; time = compile 60 + warm-up (the sample limit) 60 + run 120 s = 4 min + 5; memory
    # = limits.memory_mb 2000 -> 2 GB + 2; CPUs and partition from the launcher config
    for line in ("--array=0-3", "--time=9", "--mem=4GB", "--cpus-per-task=1", "--partition=debug"):
        assert f"#SBATCH {line}" in script, script
    assert all(j["status"] == "ok" for j in jobs_json(tmp_path / "slurm"))

    local = sweep(cluster, tmp_path / "local", *args)   # the default (basic) launcher, in this process
    assert local.returncode == 0, local.stderr[-3000:]
    a, b = cells(tmp_path / "slurm"), cells(tmp_path / "local")
    assert len(a) == 4 and sorted(a) == sorted(b)
    for key in a:
        for field in ("identity", "outcomes", "audit", "n_rows", "aborted", "compile_error"):
            assert a[key].get(field) == b[key].get(field), (key, field)
        assert a[key]["outcomes"] == {"ok": 2}


@pytest.mark.data
def test_maskbench_shards_as_one_array_hold_the_unsharded_run(cluster, tmp_path, data_root):
    if not (data_root / "maskbench" / "maskbench.jsonl.gz").exists():
        pytest.skip(f"no MaskBench data under {data_root}/maskbench (README 'Data')")
    # the 256-byte vocabulary: what is checked is how shards split and join, not the vocabulary (Qwen3's costs each
    # of the three processes seconds to load)
    pre = ["experiment=maskbench", "dataset=maskbench", "engine=llguidance_schema", "dataset.kind=valid",
           "dataset.count=4", "tokenizer=bytes", f"data_root={data_root}", "progress=false"]
    got = sweep(cluster, tmp_path / "slurm", *SLURM, *pre, "dataset.shard=0/2,1/2")
    assert got.returncode == 0, got.stderr[-3000:]
    assert "#SBATCH --array=0-1" in submission(tmp_path / "slurm")
    # the preset's limits: compile 120 + warm-up 120 + run 21600 s -> 364 min + 5
    assert "#SBATCH --time=369" in submission(tmp_path / "slurm")
    whole = subprocess.run([sys.executable, "-m", "experiments.run", *pre, f"out_dir={tmp_path / 'local'}"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr[-3000:]
    import pandas as pd

    shards = sorted((tmp_path / "slurm").glob("maskbench_shard*of2/*/llguidance_schema"))
    assert len(shards) == 2
    one = next((tmp_path / "local").glob("maskbench/*/llguidance_schema"))
    sh = pd.concat([sample_rows(d) for d in shards]).set_index("sample_id").sort_index()
    un = sample_rows(one).set_index("sample_id").sort_index()
    assert list(sh.index) == list(un.index) and sh.index.is_unique
    assert (sh["outcome"] == un["outcome"]).all()
    audits = [json.loads((d / "run.json").read_text())["audit"] for d in shards]
    whole_audit = json.loads((one / "run.json").read_text())["audit"]
    assert {k: sum(a[k] for a in audits) for k in whole_audit} == whole_audit


def test_drained_node_then_scancel_mid_cell_then_a_resubmit_finishes_only_the_rest(cluster, tmp_path):
    """One sweep of three cells, one at a time (2 CPUs a task on a 2-CPU node), meets two of the scheduler's faults
    in turn: the node drained while the first cell runs (it finishes, the others wait until the node is resumed),
    then ``scancel`` of the array while the second runs (it stops as on Ctrl-C, the third never starts). Submitting
    the same sweep again runs only what is missing."""
    out = tmp_path / "out"
    node = slurm_cluster.node_name()
    args = [*SLOW, "engine.name=tests.slurm_engine:Slow5ms", "samples=12", "repeats=3", "hydra/launcher=slurm"]
    proc = sweep(cluster, out, *args, "hydra.launcher.cpus_per_task=2", wait=False)
    first = out / "sample" / "bytes" / "tests.slurm_engine-Slow5ms"   # repeat 0: array task 0
    second = first.with_name(f"{first.name}__repeat-1")
    try:
        wait_for(lambda: parts(out) >= 1, 120, "the first cell running")
        slurm(cluster, "scontrol", "update", f"nodename={node}", "state=drain", "reason=test")
        # the running task finishes on the draining node; the others wait
        wait_for(lambda: (first / "samples.parquet").exists() and "_0 " not in
                 slurm(cluster, "squeue", "-h", "-r", "-o", "%i %t") + " ", 120, "the first task to end")
        time.sleep(3)
        queue = slurm(cluster, "squeue", "-h", "-r", "-o", "%i %t")
        assert [line.split()[1] for line in queue.splitlines()] == ["PD", "PD"], queue
        assert slurm(cluster, "sinfo", "-h", "-N", "-o", "%T").strip() == "drained"
        assert len(cells(out)) == 1
    finally:
        slurm(cluster, "scontrol", "update", f"nodename={node}", "state=resume")

    # resumed: the second cell runs; cancel the array while it does
    wait_for(lambda: len(list((second / "parts").glob("*.sample.json"))) >= 3, 120,
             "3 finished samples in the second cell")
    array = slurm(cluster, "squeue", "-h", "-o", "%A").split()[0]
    slurm(cluster, "scancel", array)
    rc, log = finish(proc)
    assert rc == 1, log[-3000:]
    jobs = jobs_json(out)
    assert [j["status"] for j in jobs] == ["ok", "failed", "failed"], jobs
    assert jobs[1]["stopped_by"] == "SIGTERM" and "scancel" in jobs[1]["error"]   # stopped itself
    assert jobs[2].get("slurm_state") == "CANCELLED", jobs   # never started: recorded by the launcher
    assert "sweep: 2 of 3 jobs failed" in log
    kept = {p.name.split(".")[0] for p in (second / "parts").glob("*.sample.json")}
    assert 3 <= len(kept) < 12
    outcomes = {json.loads(p.read_text())["outcome"] for p in (second / "parts").glob("*.sample.json")}
    assert outcomes == {"ok"}, outcomes   # the sample in flight is not recorded as a crash
    # the report on the partial sweep names the stopped cell and how to resume
    rep = subprocess.run([sys.executable, "-m", "experiments.report", "--results", str(out), "--out",
                          str(tmp_path / "report")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "run the same command again" in rep.stdout + rep.stderr

    again = sweep(cluster, out, *args, "hydra.launcher.cpus_per_task=1")   # the same cells, two at once
    assert again.returncode == 0, again.stderr[-3000:]
    assert "sweep: all 3 jobs ok" in again.stderr
    runs = cells(out)
    assert len(runs) == 3
    for key, r in runs.items():
        assert r["outcomes"] == {"ok": 12} and r["n_rows"] == 12, (key, r["outcomes"])
        assert sample_rows(out / key)["sample_id"].is_unique
    session = lambda cell: [x["status"] for x in runs[str(cell.relative_to(out))]["sessions"]]   # noqa: E731
    assert session(first) == ["finished"]   # the drained node's task ran whole, once; the resubmit found it done
    assert session(second) == ["interrupted", "finished"]
    assert runs[str(second.relative_to(out))]["sessions"][-1]["samples_run"] == 12 - len(kept)   # only the missing
    assert session(first.with_name(f"{first.name}__repeat-2")) == ["finished"]


def test_time_limit_stops_the_cell_as_a_failed_job_keeping_its_samples(cluster, tmp_path):
    out = tmp_path / "out"
    # a cell of ~150 s under a 1-minute limit. submitit asks for SIGUSR2 signal_delay_s before the limit, which
    # SLURM may send up to 60 s early: after the runner started, the runner stops as on Ctrl-C and the job records
    # itself (stopped_by SIGUSR2); before Python installed a handler, the signal ends the task and the launcher
    # records the scheduler's state. Either way: a failed job, the finished samples kept, none recorded wrongly.
    got = sweep(cluster, out, *SLOW, "engine.name=tests.slurm_engine:Slow50ms", "samples=all", *SLURM,
                "hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=10")
    assert got.returncode == 1, got.stderr[-3000:]
    assert "#SBATCH --time=1" in submission(out) and "#SBATCH --signal=USR2@10" in submission(out)
    (job,) = jobs_json(out)
    assert job["status"] == "failed", job
    if "stopped_by" in job:
        assert job["stopped_by"] == "SIGUSR2" and "time limit" in job["error"], job
    else:
        assert job["slurm_state"] in ("FAILED", "TIMEOUT") and "signal" in job["error"].lower(), job
    outcomes = {json.loads(p.read_text())["outcome"] for p in out.rglob("parts/*.sample.json")}
    assert outcomes <= {"ok"}, outcomes
    assert len(cells(out)) <= 1
