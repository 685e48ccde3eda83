"""Fault injection, issue 64 item 5: what a newcomer's machine does to a run.

A full disk while a run writes its results, the report over a sweep that is still running, and a sweep over
``out_dir`` itself. Each case ends as a typed outcome or one line naming the problem and the fix; nothing
finished is lost and nothing is written outside the out_dirs. The runs use the reference engine (or a
misbehaving wrapper of it, tests/faulty_engines.py) with the 256-byte vocabulary.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_faults import FAULTY, cell_dir, cli, make_cfg, marked_pid, marker, meta_of, wait_for, words  # noqa: F401

from gcdbench.experiments.runner import run

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.faults   # the fault-injection suite: pytest -m faults

NO_SPACE = ("no space left on device writing {}; free space (or give another out_dir) and run the same command "
            "again: finished samples are kept")

#: a CLI run (``gcdbench-run``) whose disk is full from the second finished sample on: the first sample part is
#: written, every later one fails half-written with ENOSPC (as a real full disk does), until the process ends
FULL_DISK_CLI = """
import errno, pathlib, runpy, sys
orig = pathlib.Path.write_text
seen = []
def full(self, data, *a, **k):
    if ".sample.json.tmp" in self.name:
        seen.append(self.name)
        if len(seen) >= 2:
            orig(self, data[: len(data) // 2], *a, **k)
            raise OSError(errno.ENOSPC, "No space left on device")
    return orig(self, data, *a, **k)
pathlib.Path.write_text = full
sys.argv = ["gcdbench-run", *sys.argv[1:]]
runpy.run_module("gcdbench.experiments.run", run_name="__main__", alter_sys=True)
"""


def temporaries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob(".*.tmp*"))


def dead_pid() -> int:
    """The id of a process that has ended."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# --------------------------------------------------------------------------------------------------------------
# a full disk
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_full_disk_in_process_is_a_typed_error_and_leaves_no_temporary(tmp_path, words, monkeypatch, code):
    """The third sample's part hits a full disk (or quota): the run stops with an OSError of that errno whose
    message is the one line with the fix, the half-written temporary is removed, the two finished samples stay in
    parts/ and the resume runs only the rest."""
    real = Path.write_text
    written = []

    def full(self, data, *a, **k):
        if ".sample.json.tmp" in self.name:
            written.append(self.name)
            if len(written) == 3:
                real(self, data[: len(data) // 2], *a, **k)
                raise OSError(code, os.strerror(code))
        return real(self, data, *a, **k)

    cfg = make_cfg(tmp_path, "engine=reference", *words)
    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError) as got:
        run(cfg)
    monkeypatch.setattr(Path, "write_text", real)
    assert got.value.errno == code
    msg = str(got.value)
    assert "\n" not in msg and msg.endswith("free space (or give another out_dir) and run the same command again: "
                                            "finished samples are kept"), msg
    assert ".sample.json" in msg and (".tmp" not in msg), msg
    cell = tmp_path / "custom_words" / "bytes" / "reference"
    assert temporaries(tmp_path) == []
    assert len(list((cell / "parts").glob("*.sample.json"))) == 2
    run(cfg)
    meta = meta_of(cell)
    assert sum(meta["outcomes"].values()) == 8, meta["outcomes"]
    assert [s["samples_run"] for s in meta["sessions"]] == [2, 6]   # nothing run twice, nothing lost
    assert temporaries(tmp_path) == []


def test_full_disk_while_merging_keeps_the_parts(tmp_path, words, monkeypatch):
    """ENOSPC while the parquet files are written at the end (pyarrow's OSError): the same one line, the
    temporary removed, the parts kept; the resume merges them without running a sample again."""
    import pyarrow.parquet as pq

    real = pq.write_table

    def full(table, where, *a, **k):
        real(table.slice(0, 1), where, *a, **k)
        raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")

    cfg = make_cfg(tmp_path, "engine=reference", *words, "samples=3")
    monkeypatch.setattr(pq, "write_table", full)
    with pytest.raises(OSError, match=r"^no space left on device writing .*\.parquet; free space"):
        run(cfg)
    monkeypatch.setattr(pq, "write_table", real)
    cell = tmp_path / "custom_words" / "bytes" / "reference"
    assert temporaries(tmp_path) == [] and len(list((cell / "parts").glob("*.sample.json"))) == 3
    run(cfg)
    meta = meta_of(cell)
    assert sum(meta["outcomes"].values()) == 3 and [s["samples_run"] for s in meta["sessions"]] == [3]


@pytest.mark.slow
def test_full_disk_on_the_command_line_is_one_line_and_exit_2(tmp_path, words):
    """The real command line on a full disk: one ``error:`` line naming the file and the fix, exit status 2, no
    traceback, no temporary; the same command again (space freed) finishes with nothing run twice. In a sweep
    the job is recorded as failed and the sweep exits 1."""
    out = tmp_path / "out"
    args = [f"out_dir={out}", "progress=false", "tokenizer=bytes", "audit.per_sample=0", "engine=reference", *words]
    r = subprocess.run([sys.executable, "-c", FULL_DISK_CLI, *args], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: no space left on device writing ") and "Traceback" not in r.stderr
    assert lines[0].endswith("free space (or give another out_dir) and run the same command again: finished "
                             "samples are kept"), lines[0]
    cell = out / "custom_words" / "bytes" / "reference"
    assert temporaries(out) == [] and len(list((cell / "parts").glob("*.sample.json"))) == 1
    again = subprocess.run([sys.executable, "-m", "gcdbench.experiments.run", *args], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [s["samples_run"] for s in meta_of(cell)["sessions"]] == [1, 7] and temporaries(out) == []

    sweep_out = tmp_path / "sweep"
    r = subprocess.run([sys.executable, "-c", FULL_DISK_CLI, "-m", "seed=0", *args[1:],
                        f"out_dir={sweep_out}"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "error: no space left on device writing " in r.stderr
    jobs = json.loads(next(sweep_out.glob(".hydra/multirun_*/jobs.json")).read_text())
    assert jobs[0]["status"] == "failed" and "no space left on device" in jobs[0]["error"]


def test_disk_full_before_the_run_is_refused_in_one_line(tmp_path, words):
    """A disk already full when the command starts would fail in Hydra's own config writes (its traceback): the
    out_dir is refused first, in one line with the fix, exit status 2, nothing written."""
    out = tmp_path / "out"
    code = ("import collections, shutil, runpy, sys\n"
            "Usage = collections.namedtuple('Usage', 'total used free')\n"
            "shutil.disk_usage = lambda p: Usage(10 << 30, 10 << 30, 4096)\n"
            "sys.argv = ['gcdbench-run', *sys.argv[1:]]\n"
            "runpy.run_module('gcdbench.experiments.run', run_name='__main__', alter_sys=True)\n")
    r = subprocess.run([sys.executable, "-c", code, f"out_dir={out}", "engine=reference", "tokenizer=bytes",
                        "progress=false", *words], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.strip().splitlines() == [
        f"error: out_dir={out}: no space left on device (4096 bytes free on the file system of {tmp_path}); free "
        "space (or give another out_dir) and run the same command again: finished samples are kept"], r.stderr
    assert not out.exists()


def test_stale_temporaries_of_dead_processes_are_removed_on_open(tmp_path, words):
    """A write killed before its rename leaves ``.<name>.tmp<pid>``, in the cell folder or in parts/: opening
    the cell again removes those of processes that are gone and keeps one of a live process."""
    cfg = make_cfg(tmp_path, "engine=reference", *words, "samples=2")
    cell = run(cfg)
    parts = cell / "parts"
    parts.mkdir()
    pid = dead_pid()
    stale = [parts / f".x.sample.json.tmp{pid}", cell / f".run.json.tmp{pid}"]
    for p in stale:
        p.write_text("{half")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = parts / f".y.sample.json.tmp{live.pid}"
        alive.write_text("{being written")
        from gcdbench.experiments.store import Cell
        Cell(cell, meta_of(cell)["identity"])
        assert not any(p.exists() for p in stale) and alive.exists()
    finally:
        live.kill()
        live.wait()
    alive.unlink()
    run(cfg)
    assert temporaries(cell) == []


# --------------------------------------------------------------------------------------------------------------
# the report over a sweep still running
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_report_over_a_running_cell_says_running_and_exits_0(tmp_path, words, marker):
    """A cell whose run is still going (its lock held by a live process, one sample stored in parts/) is listed
    as running with the samples it has so far, and a report of nothing but running cells says so and exits 0.
    Once the run is killed (the kernel releases the lock; the lock file still names the dead process) the cell is
    a stopped run again, with the resume command."""
    out = tmp_path / "out"
    proc = cli(f"out_dir={out}", "progress=false", "tokenizer=bytes", "audit.per_sample=0", "engine=reference",
               f"engine.name={FAULTY}:WaitForKillEngine", "limits.sample_timeout_s=600", *words,
               env={"GCDBENCH_TEST_MARKER": str(marker)})
    worker = None
    try:
        worker = wait_for(lambda: marked_pid(marker, "mask"), what="the run to wait inside the sample with a 'z'")
        cell = cell_dir(out, "WaitForKillEngine")
        n = len(list((cell / "parts").glob("*.sample.json")))   # the samples before it (the order is seeded)
        report = [sys.executable, "-m", "gcdbench.experiments.report", "--results", str(out), "--out",
                  str(tmp_path / "report"), "--tokenizer", "bytes"]
        r = subprocess.run(report, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"{cell}: running: {n} samples so far" in r.stderr, r.stderr
        assert "still running" in r.stderr and "no run.json" not in r.stderr, r.stderr
        assert "stopped" not in r.stderr, r.stderr
        from gcdbench.experiments.report import collect
        cells = collect(out)
        assert cells.empty and cells.attrs["running"] == [f"{cell}: running: {n} samples so far"]
    finally:
        proc.kill()
        proc.wait()
        if worker:
            try:
                os.kill(worker, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert str(proc.pid) in (cell / ".lock").read_text()   # the dead run's name stays in the file
    from gcdbench.experiments.report import collect
    cells = collect(out)
    assert cells.attrs["running"] == [] and "a run stopped" in " ".join(cells.attrs["skipped"])


def test_report_names_a_stopped_run_with_samples_not_merged(tmp_path, words, capsys):
    """A resume that was killed after writing a part (no live process holds the lock; the lock file names the dead
    run): the cell's stored rows are reported, and a warning says a run stopped with a sample not merged and how
    to resume it (the part is not counted in the report)."""
    from gcdbench.experiments.report import collect
    from gcdbench.experiments.store import Cell
    from gcdbench.parsers.base import Outcome

    cell = run(make_cfg(tmp_path, "engine=reference", *words, "samples=2"))
    session = {"id": 2, "git_commit": None, "git_dirty": False, "machine": {}}
    identity = meta_of(cell)["identity"]
    Cell(cell, identity).write_part(session, identity["sample_ids"][0], Outcome.OK, "", None, 0.1)
    (cell / ".lock").write_text(f"pid {dead_pid()} on {os.uname().nodename}, since 2026-01-01 00:00:00\n")
    capsys.readouterr()
    cells = collect(tmp_path)
    err = capsys.readouterr().err
    assert len(cells) == 1 and cells.attrs["running"] == []
    assert f"{cell}: a run stopped with 1 finished samples not yet merged" in err, err
    assert "run the same command again" in err and "running:" not in err


# --------------------------------------------------------------------------------------------------------------
# a sweep over out_dir
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_sweep_over_out_dir_keeps_its_files_inside_and_exits_1_on_a_refused_job(tmp_path):
    """``-m out_dir=a,b dataset=spider,sample`` (spider's data missing: two refused jobs): nothing is written in
    the working folder, each out_dir holds its jobs, ``multirun.yaml`` and a ``jobs.json`` of its jobs, the sweep
    line names the failed jobs and the process exits 1, as a sweep into one out_dir does."""
    a, b, cwd = tmp_path / "a", tmp_path / "b", tmp_path / "cwd"
    cwd.mkdir()
    r = subprocess.run([sys.executable, "-m", "gcdbench.experiments.run", "-m", f"out_dir={a},{b}",
                        "dataset=spider,sample", f"data_root={tmp_path / 'nowhere'}", "engine=reference",
                        "tokenizer=bytes", "samples=1", "audit.per_sample=0", "progress=false"],
                       cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stderr[-3000:]
    assert list(cwd.iterdir()) == [], list(cwd.rglob("*"))
    assert "sweep: 2 of 4 jobs failed" in r.stderr, r.stderr
    for out in (a, b):
        sweep = next(out.glob(".hydra/multirun_*"))
        assert (sweep / "multirun.yaml").exists()
        jobs = json.loads((sweep / "jobs.json").read_text())
        assert sorted(j["status"] for j in jobs) == ["failed", "ok"], jobs
        assert all(f"out_dir={out}" in j["overrides"] for j in jobs)
        assert str(sweep / "jobs.json") in r.stderr
        assert meta_of(out / "sample" / "bytes" / "reference")["outcomes"] == {"ok": 1}


@pytest.mark.slow
def test_sweep_over_out_dir_all_ok_prints_the_sweep_line(tmp_path, words):
    """A sweep over out_dir whose jobs all pass: exit 0, the sweep line, a jobs.json in each out_dir."""
    a, b, cwd = tmp_path / "a", tmp_path / "b", tmp_path / "cwd"
    cwd.mkdir()
    r = subprocess.run([sys.executable, "-m", "gcdbench.experiments.run", "-m", f"out_dir={a},{b}",
                        "engine=reference", "tokenizer=bytes", "samples=1", "audit.per_sample=0", "progress=false",
                        *words], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "sweep: all 2 jobs ok" in r.stderr and list(cwd.iterdir()) == []
    for out in (a, b):
        jobs = json.loads(next(out.glob(".hydra/multirun_*/jobs.json")).read_text())
        assert [j["status"] for j in jobs] == ["ok"]


def test_sweep_over_out_dir_refuses_an_unusable_out_dir_in_one_line(tmp_path):
    """Every out_dir of the sweep is checked before any job runs (before, only the default ``outputs`` was)."""
    a, cwd = tmp_path / "a", tmp_path / "cwd"
    cwd.mkdir()
    (tmp_path / "file").write_text("not a folder")
    r = subprocess.run([sys.executable, "-m", "gcdbench.experiments.run", "-m", f"out_dir={a},{tmp_path / 'file'}",
                        "engine=reference", "tokenizer=bytes", "samples=1", "progress=false"],
                       cwd=cwd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.strip().splitlines() == [f"error: out_dir={tmp_path / 'file'}: {tmp_path / 'file'} is a file, "
                                             "not a folder; give a folder (or a path to create) as out_dir"]
    assert list(cwd.iterdir()) == [] and not a.exists()
