"""Fault injection: every way a run can be broken or misused ends in a correct result or one clear message.

Kill the parent, kill the worker while it compiles and inside a mask, two runs on one cell, a damaged parquet
file, a changed command resumed, compile failures of every kind resumed, the run time limit, a failing job of a
sweep. Each case uses the reference engine (or a misbehaving wrapper of it, tests/faulty_engines.py) with the
256-byte vocabulary, so the whole file runs in a minute or two.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

import runconf
from gcdbench.experiments.runner import run
from gcdbench.experiments.store import CellBusy, CellDamaged, CellMismatch

REPO = Path(__file__).resolve().parents[1]
FAULTY = "tests.faulty_engines"
pytestmark = pytest.mark.faults   # the fault-injection suite: pytest -m faults


make_cfg = runconf.cfg_maker("audit.per_sample=0")


@pytest.fixture
def words(tmp_path):
    """A grammar of lowercase words and eight samples (the second has a 'z')."""
    return [*runconf.words(tmp_path, "abc de", "azb", "xy", "hello world", "foo bar", "lorem ipsum", "quick fox",
                           "lucky dog", name="words"), "samples=all"]


@pytest.fixture
def marker(tmp_path, monkeypatch):
    """The file faulty engines write ``<phase> <pid>`` lines to (inherited by the worker)."""
    path = tmp_path / "marker.txt"
    monkeypatch.setenv("GCDBENCH_TEST_MARKER", str(path))
    return path


def cell_dir(out: Path, engine_class: str) -> Path:
    """The folder of a cell run with ``engine.name=tests.faulty_engines:<engine_class>``."""
    return out / "custom_words" / "bytes" / f"tests.faulty_engines-{engine_class}"


def samples_of(cell: Path) -> pd.DataFrame:
    return pd.read_parquet(cell / "samples.parquet").set_index("sample_id")


def meta_of(cell: Path) -> dict:
    return json.loads((cell / "run.json").read_text())


def wait_for(predicate, timeout_s=120.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def marked_pid(marker: Path, phase: str) -> int | None:
    if not marker.exists():
        return None
    for line in marker.read_text().splitlines():
        p, pid = line.split()
        if p == phase:
            return int(pid)
    return None


def kill_when_marked(marker: Path, phase: str) -> threading.Thread:
    """Kill (SIGKILL) the process that marks ``phase``, from a thread, while the test runs the cell."""
    def go():
        pid = wait_for(lambda: marked_pid(marker, phase), what=f"phase {phase}")
        os.kill(pid, signal.SIGKILL)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def cli(*args, env=None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "experiments.run", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}, **kw)


def steplogs_of(pid: int) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"gcdbench-steps-{pid}-")] \
        if os.path.isdir("/dev/shm") else []


# --------------------------------------------------------------------------------------------------------------
# killed processes
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_killed_parent_resumes_with_nothing_lost_or_duplicated(tmp_path, words, marker):
    out = tmp_path / "out"
    args = [f"out_dir={out}", "progress=false", "tokenizer=bytes", "audit.per_sample=0", "engine=reference",
            f"engine.name={FAULTY}:SlowEngine", *words]
    proc = cli(*args, env={"GCDBENCH_TEST_MARKER": str(marker)})
    cell = cell_dir(out, "SlowEngine")
    wait_for(lambda: len(list((cell / "parts").glob("*.sample.json"))) >= 2, what="two finished samples")
    worker = marked_pid(marker, "compile")
    proc.send_signal(signal.SIGKILL)
    _, stderr = proc.communicate(timeout=60)
    # the worker dies with its parent, no traceback from an orphan, no step log left in /dev/shm
    wait_for(lambda: not psutil.pid_exists(worker) or psutil.Process(worker).status() == psutil.STATUS_ZOMBIE,
             timeout_s=10, what="the orphaned worker to die")
    assert "Traceback" not in stderr and "ConnectionResetError" not in stderr, stderr
    assert steplogs_of(proc.pid) == []
    kept = {json.loads(p.read_text())["sample_id"] for p in (cell / "parts").glob("*.sample.json")}
    # resume (the lock died with the killed run)
    run(make_cfg(out, "engine=reference", f"engine.name={FAULTY}:SlowEngine", *words))
    samples = samples_of(cell)
    assert sorted(samples.index) == [f"words-{i:04d}" for i in range(8)] and set(samples["outcome"]) == {"ok"}
    steps = pd.read_parquet(cell / "steps.parquet")
    assert not steps.duplicated(["sample_id", "step"]).any()
    assert len(steps) == sum(len(t.encode()) + 1 for t in (tmp_path / "words.txt").read_text().splitlines())
    meta = meta_of(cell)
    assert [s["status"] for s in meta["sessions"]] == ["interrupted", "finished"]
    # the samples the killed run finished keep its session (and so its commit and machine)
    assert set(samples.index[samples["session"] == 1]) == kept
    assert meta["n_rows"] == 8 and meta["outcomes"] == {"ok": 8}
    assert not (cell / "parts").exists()


def test_worker_killed_while_compiling_is_retried_on_resume(tmp_path, words, marker):
    out = tmp_path / "out"
    cfg = make_cfg(out, "engine=reference", f"engine.name={FAULTY}:HangCompileEngine", *words)
    killer = kill_when_marked(marker, "compile")
    cell = run(cfg)
    killer.join(5)
    samples = samples_of(cell)
    assert set(samples["outcome"]) == {"compile_error"}
    assert samples["message"].str.contains(r"worker died while compiling \(killed by signal 9 \(SIGKILL\)\)").all()
    assert meta_of(cell)["compile_error_kind"] == "died"
    # not a deterministic refusal: the next run compiles again (HangCompileEngine compiles the second time)
    run(cfg)
    meta = meta_of(cell)
    assert set(samples_of(cell)["outcome"]) == {"ok"} and "compile_error" not in meta
    assert [line.split()[0] for line in marker.read_text().splitlines()] == ["compile", "compile"]


def test_worker_killed_inside_a_mask_is_a_crash_of_that_sample_only(tmp_path, words, marker):
    cfg = make_cfg(tmp_path, "engine=reference", f"engine.name={FAULTY}:WaitForKillEngine", *words)
    killer = kill_when_marked(marker, "mask")
    cell = run(cfg)
    killer.join(5)
    samples = samples_of(cell)
    assert samples.loc["words-0001", "outcome"] == "crash"
    assert samples.loc["words-0001", "message"] == "worker died (killed by signal 9 (SIGKILL))"
    assert set(samples.drop("words-0001")["outcome"]) == {"ok"}
    steps = pd.read_parquet(cell / "steps.parquet")
    # 'a' masked and committed, 'z' masked and committed: the two finished masks are kept
    assert list(steps.loc[steps["sample_id"] == "words-0001", "step"]) == [0, 1]
    # a crash is a result: a resume keeps it
    run(cfg)
    assert samples_of(cell).loc["words-0001", "outcome"] == "crash" and len(meta_of(cell)["sessions"]) == 1


# --------------------------------------------------------------------------------------------------------------
# one cell, one run
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_second_run_on_a_busy_cell_refuses_with_one_line(tmp_path, words, marker):
    out = tmp_path / "out"
    args = [f"out_dir={out}", "progress=false", "tokenizer=bytes", "audit.per_sample=0", "engine=reference",
            f"engine.name={FAULTY}:SlowEngine", *words]
    first = cli(*args, env={"GCDBENCH_TEST_MARKER": str(marker)})
    wait_for(lambda: marked_pid(marker, "compile"), what="the first run to compile")
    # the first run holds the lock: paused (SIGSTOP) while the others try, so that it cannot end before they do,
    # however slow the machine (its worker finishes the sample in hand and waits; far within the sample limit)
    os.kill(first.pid, signal.SIGSTOP)
    try:
        second = cli(*args)
        _, err2 = second.communicate(timeout=120)
        assert second.returncode == 2
        lines = err2.strip().splitlines()
        assert len(lines) == 1 and "is in use by another run (pid" in lines[0] and "out_dir=" in lines[0], err2
        with pytest.raises(CellBusy, match=f"pid {first.pid} on"):
            run(make_cfg(out, "engine=reference", f"engine.name={FAULTY}:SlowEngine", *words))
    finally:
        os.kill(first.pid, signal.SIGCONT)
    out1, err1 = first.communicate(timeout=300)
    assert first.returncode == 0, err1[-2000:]
    cell = cell_dir(out, "SlowEngine")
    assert meta_of(cell)["outcomes"] == {"ok": 8} and len(meta_of(cell)["inits"]) == 1


# --------------------------------------------------------------------------------------------------------------
# damaged files
# --------------------------------------------------------------------------------------------------------------
def test_damaged_parquet_is_refused_by_the_runner_and_skipped_by_the_report(tmp_path, words, capsys):
    from gcdbench.experiments.report import write_report

    out = tmp_path / "out"
    cfg = make_cfg(out, "engine=reference", *words, "samples=2")
    cell = run(cfg)
    healthy = run(make_cfg(out, "engine=reference", *words, "samples=2", "+engine.label=reference_copy"))
    data = (cell / "steps.parquet").read_bytes()
    (cell / "steps.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(CellDamaged, match=r"cannot read .*steps.parquet .*fresh=true"):
        run(cfg)
    # an orphan folder: result files without run.json
    orphan = out / "custom_words" / "bytes" / "orphan"
    orphan.mkdir()
    (orphan / "samples.parquet").write_bytes((healthy / "samples.parquet").read_bytes())
    capsys.readouterr()
    write_report(out, tmp_path / "report", tokenizer="bytes")
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len([w for w in warnings if "steps.parquet" in w]) == 1 and str(cell / "steps.parquet") in err
    assert len([w for w in warnings if str(orphan) in w and "no run.json" in w]) == 1
    cells = pd.read_csv(tmp_path / "report" / "cells.csv")
    assert list(cells["config"]) == ["reference_copy"]
    assert "## Not reported" in (tmp_path / "report" / "README.md").read_text()
    # fresh=true starts the damaged cell over
    run(make_cfg(out, "engine=reference", *words, "samples=2", "fresh=true"))
    assert meta_of(cell)["outcomes"] == {"ok": 2} and len(pd.read_parquet(cell / "steps.parquet"))


# --------------------------------------------------------------------------------------------------------------
# a changed command resumed into the same folder
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("second,expect", [
    (["samples=3"], r"sample list: 2 stored \(words-"),
    (["seed=5"], r"seed: 0 -> 5"),
    (["seed=-1"], r"sample list: .*seed: 0 -> -1|seed: 0 -> -1"),
])
def test_changed_command_is_refused_with_how_to_start_fresh(tmp_path, words, second, expect):
    out = tmp_path / "out"
    first = [w for w in words if w != "samples=all"] + ["samples=2"]
    cell = run(make_cfg(out, "engine=reference", *first))
    before = (cell / "samples.parquet").read_bytes()
    changed = [w for w in first if not any(w.startswith(s.split("=")[0] + "=") for s in second)] + second
    with pytest.raises(CellMismatch, match=expect) as err:
        run(make_cfg(out, "engine=reference", *changed))
    assert "fresh=true" in str(err.value) and "out_dir=" in str(err.value)
    assert (cell / "samples.parquet").read_bytes() == before   # nothing touched
    run(make_cfg(out, "engine=reference", *changed, "fresh=true"))
    assert meta_of(cell)["identity"]["seed"] == int(dict(s.split("=") for s in changed).get("seed", 0))


def test_fixed_grammar_is_a_new_cell_not_a_resume(tmp_path, words):
    """The broken grammar's compile_error rows are never mixed with the fixed grammar's key."""
    g = Path(words[1].split("=", 1)[1])
    g.write_text('start: WORD (" " WORD)*\nWORD: /[a-z]+/ other\n')   # a rule in a terminal: malformed
    cfg = make_cfg(tmp_path, "engine=reference", *words)
    cell = run(cfg)
    assert set(samples_of(cell)["outcome"]) == {"compile_error"}
    g.write_text('start: WORD (" " WORD)*\nWORD: /[a-z]+/\n')
    with pytest.raises(CellMismatch, match="grammar_key"):
        run(cfg)
    run(make_cfg(tmp_path, "engine=reference", *words, "fresh=true"))
    meta = meta_of(cell)
    assert meta["outcomes"] == {"ok": 8} and meta["grammar_key"] == meta["identity"]["grammar_key"]


def test_other_engine_options_under_one_label_are_refused(tmp_path, words):
    first = [w for w in words if w != "samples=all"] + ["samples=1"]
    run(make_cfg(tmp_path, "engine=xgrammar", "+engine.label=xg", *first))
    with pytest.raises(CellMismatch, match=r"engine_options: grammar_form='ebnf' -> 'lark'"):
        run(make_cfg(tmp_path, "engine=xgrammar", "+engine.label=xg", "engine.grammar_form=lark", *first))


# --------------------------------------------------------------------------------------------------------------
# compile failures, resumed
# --------------------------------------------------------------------------------------------------------------
def test_deterministic_compile_error_is_reused_without_compiling(tmp_path, words, marker):
    cfg = make_cfg(tmp_path, "engine=reference", f"engine.name={FAULTY}:RefuseEngine", *words, "samples=2")
    cell = run(cfg)
    assert meta_of(cell)["compile_error_kind"] == "refused"
    run(cfg)   # nothing left to do: no compile, no new session
    assert marker.read_text().count("compile") == 1 and len(meta_of(cell)["sessions"]) == 1


@pytest.mark.parametrize("engine,limits,kind,message", [
    # the compile limit covers the worker's start, which can take seconds on a loaded machine: the engine must mark
    # its compile before the limit (the resume below reads that mark), and hangs an hour after, far past it
    ("HangCompileEngine", ["limits.compile_timeout_s=8"], "timeout",
     "compile did not finish within 8 s (limits.compile_timeout_s)"),
    ("BudgetEngine", [], "engine_timeout", "construction exceeded its time budget (test)"),
])
def test_compile_time_out_is_retried_on_resume(tmp_path, words, marker, engine, limits, kind, message):
    cfg = make_cfg(tmp_path, "engine=reference", f"engine.name={FAULTY}:{engine}", *words, "samples=2", *limits)
    cell = run(cfg)
    meta = meta_of(cell)
    assert meta["compile_error_kind"] == kind and message in meta["compile_error"]
    assert meta["outcomes"] == {"compile_error": 2}
    # retry_compile_timeouts=false: the stored time-out stands (nothing compiled, no new session)
    run(make_cfg(tmp_path, "engine=reference", f"engine.name={FAULTY}:{engine}", *words, "samples=2",
                 "retry_compile_timeouts=false"))
    assert meta_of(cell)["outcomes"] == {"compile_error": 2} and len(meta_of(cell)["sessions"]) == 1
    assert marker.read_text().count("compile") == 1
    # the engine compiles the second time (under the default compile limit; limits are no part of the cell's
    # identity)
    run(make_cfg(tmp_path, "engine=reference", f"engine.name={FAULTY}:{engine}", *words, "samples=2"))
    meta = meta_of(cell)
    assert meta["outcomes"] == {"ok": 2} and "compile_error" not in meta and len(meta["sessions"]) == 2
    assert marker.read_text().count("compile") == 2


def test_compile_crash_and_compile_oom_are_typed(tmp_path, words):
    from gcdbench.experiments.report import cell_summary

    crash = run(make_cfg(tmp_path, "engine=reference", f"engine.name={FAULTY}:CrashCompileEngine", *words,
                         "samples=1"))
    meta = meta_of(crash)
    assert meta["compile_error_kind"] == "crash" and "deliberate crash while compiling" in meta["compile_error"]
    line = cell_summary(crash)
    assert "compile error [crash]" in line and "deliberate crash while compiling" in line   # the whole reason
    oom = run(make_cfg(tmp_path, "engine=reference", f"engine.name={FAULTY}:HogCompileEngine",
                       "+engine.label=hog", *words, "samples=1", "limits.memory_mb=1500"))
    meta = meta_of(oom)
    assert meta["compile_error_kind"] == "oom" and "memory limit of 1500 MB" in meta["compile_error"]


def test_memory_limit_holds_for_a_burst_between_polls(tmp_path, words):
    """Issue 27, item 3: resident memory is polled every 0.1 s, which a short burst slips through; the worker's
    recorded high-water mark is checked against limits.memory_mb too, so the compile ends 'oom'."""
    plain = run(make_cfg(tmp_path / "plain", "engine=reference", *words, "samples=1"))
    base = meta_of(plain)["peak_rss_compile_mb"]
    limit = int(base + 150)   # the burst adds 400 MB
    cell = run(make_cfg(tmp_path / "burst", "engine=reference", f"engine.name={FAULTY}:BurstCompileEngine",
                        *words, "samples=1", f"limits.memory_mb={limit}"))
    meta = meta_of(cell)
    assert meta["compile_error_kind"] == "oom", meta.get("compile_error")
    assert f"memory limit of {limit} MB" in meta["compile_error"]


# --------------------------------------------------------------------------------------------------------------
# limits and warm-up
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_run_time_limit_skips_and_a_resume_runs_the_skipped(tmp_path, words):
    slow = ["engine=reference", f"engine.name={FAULTY}:SlowEngine", *words]
    cell = run(make_cfg(tmp_path, *slow, "limits.run_timeout_s=3"))
    first = samples_of(cell)
    assert (first["outcome"] == "skipped").sum() >= 1
    assert "run time limit reached" in meta_of(cell)["aborted"]
    run(make_cfg(tmp_path, *slow))
    second = samples_of(cell)
    assert "skipped" not in set(second["outcome"]) and "aborted" not in meta_of(cell)
    done = first.index[first["outcome"] != "skipped"]
    assert (second.loc[done, "session"] == 1).all()   # finished samples were not run again


@pytest.mark.slow
def test_compile_and_warm_up_are_not_run_time(tmp_path, words):
    """A compile (2 s) and a warm-up (3 s) longer than the run time limit (1.5 s) leave the samples their run
    time: each has its own limit, and README command 1's first run (minutes of numba compiles on an empty cache)
    had skipped 9 of 10 Valiant samples under a 300 s limit."""
    cell = run(make_cfg(tmp_path, "engine=reference", f"engine.name={FAULTY}:SlowStartEngine", *words,
                        "limits.run_timeout_s=1.5", "audit.per_sample=0"))
    got = samples_of(cell)
    assert set(got["outcome"]) == {"ok"} and "aborted" not in meta_of(cell), got[["outcome", "message"]]


def test_warm_up_sample_takes_the_cold_path(tmp_path, words):
    """ColdEngine's first mask after its first commit sleeps 0.3 s once per process: the untimed warm-up sample
    (the cell's first sample, masks and commits) takes it."""
    cell = run(make_cfg(tmp_path, "engine=reference", f"engine.name={FAULTY}:ColdEngine", *words, "samples=2",
                        "seed=-1"))
    init = meta_of(cell)["inits"][0]
    assert init["warmup_outcome"] == "ok" and init["warmup_masks"] == len("abc de") + 1
    assert init["warmup_max_mask_us"] >= 3e5 and init["first_mask_us"] < init["warmup_max_mask_us"]
    assert meta_of(cell)["sessions"][0]["warmup"] is True


def test_warm_up_has_its_own_time_limit(tmp_path, words):
    """A warm-up longer than the sample limit (a JIT on an empty cache) fails, and the same sample is then timed
    cold (here it times out); with ``limits.warmup_timeout_s`` above it, the warm-up pays it and every timed
    sample is fast."""
    cold = ["engine=reference", f"engine.name={FAULTY}:ColderEngine", *words, "samples=2", "seed=-1",
            "limits.sample_timeout_s=2"]
    cell = run(make_cfg(tmp_path / "tight", *cold))
    init = meta_of(cell)["inits"][0]
    assert init["warmup_failed"] == "no result within 2 s"
    assert samples_of(cell)["outcome"].tolist()[0] == "timeout"
    # the timed samples under a limit far above them (a loaded machine can make a plain sample slow): none paid
    # the 3-s mask, which is a floor (a sleep), so no timed mask near it
    cell = run(make_cfg(tmp_path / "roomy", *cold, "limits.warmup_timeout_s=30", "limits.sample_timeout_s=60"))
    init = meta_of(cell)["inits"][0]
    assert "warmup_failed" not in init and init["warmup_max_mask_us"] >= 2.7e6
    assert set(samples_of(cell)["outcome"]) == {"ok"}
    assert pd.read_parquet(cell / "steps.parquet")["mask_us"].max() < 2.7e6


# --------------------------------------------------------------------------------------------------------------
# sweeps
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_failing_job_of_a_sweep_is_recorded_and_the_others_run(tmp_path):
    out = tmp_path / "out"
    proc = cli("-m", "dataset=spider,sample", f"data_root={tmp_path / 'nowhere'}", f"out_dir={out}",
               "engine=reference", "tokenizer=bytes", "samples=1", "audit.per_sample=0", "progress=false")
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stderr[-3000:]
    assert "error: missing data file" in stderr and "sweep: 1 of 2 jobs failed" in stderr
    assert "#0 dataset=spider" in stderr
    assert meta_of(out / "sample" / "bytes" / "reference")["outcomes"] == {"ok": 1}   # the job after it ran
    jobs = json.loads(next(out.glob(".hydra/multirun_*/jobs.json")).read_text())
    assert [j["status"] for j in jobs] == ["failed", "ok"] and "dev_gold.sql" in jobs[0]["error"]


# --------------------------------------------------------------------------------------------------------------
# PSC on a grammar too large for it: progress, then a typed refusal in seconds
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_psc_refuses_a_huge_literal_alternation_with_progress(tmp_path, monkeypatch, caplog):
    import logging
    import random

    from gcdbench.parsers.base import CompileError, CompileTimeout, GrammarSpec
    from gcdbench.parsers.psc import build
    from gcdbench.parsers.psc.engine import build_artifact
    from gcdbench.parsers.tokenizers import load_tokenizer

    rng = random.Random(1)
    words = sorted({"".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
                    for _ in range(3200)})[:3000]
    grammar = GrammarSpec("alternation", 'start: word (" " word)*\nword: ' + " | ".join(f'"{w}"' for w in words))
    monkeypatch.setattr(build, "PROGRESS_EVERY_S", 0.0)
    caplog.set_level(logging.INFO, logger="gcdbench.psc")
    with pytest.raises(CompileError, match=r"lexer automaton exceeds max_lexer_states=1000 states \(3001 "
                                           r"terminals\).*raise engine.max_lexer_states") as err:
        build_artifact(grammar, load_tokenizer("bytes"), max_lexer_states=1000)
    assert not isinstance(err.value, CompileTimeout)   # a size bound: deterministic
    records = [r.getMessage() for r in caplog.records if r.name == "gcdbench.psc"]
    assert "psc: Lark's LALR(1) analysis" in records
    assert any(m.startswith("psc: lexer automaton: ") and "states expanded (3001 terminals)" in m for m in records)
    # the time budget is a CompileTimeout (retried on resume), naming the phase it stopped in, with its progress
    # (which phase depends on the machine's speed: Lark's own analysis on a slow one)
    with pytest.raises(CompileTimeout, match=r"time budget of 5 s \(max_build_s\) in the "
                                             r"(lexer automaton|realizable terminal sequences) phase \(.+\)"
                                             r"|LALR\(1\) analysis did not finish in 5 s"):
        build_artifact(grammar, load_tokenizer("bytes"), max_build_s=5, lalr_timeout_s=60, max_lexer_states=10**6)


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_the_run_resumes(tmp_path, words, marker):
    """SIGINT to the whole process group (a terminal's Ctrl-C): one line, no traceback from the parent or the
    worker, finished samples kept for the resume."""
    out = tmp_path / "out"
    args = [f"out_dir={out}", "progress=false", "tokenizer=bytes", "audit.per_sample=0", "engine=reference",
            f"engine.name={FAULTY}:SlowEngine", *words]
    # A terminal's Ctrl-C reaches a process whose SIGINT is at its default. Whoever started this test may have
    # ignored SIGINT (a background job of a non-interactive shell does), and an ignored disposition is inherited
    # across exec, so Python would install no KeyboardInterrupt handler and the run would ignore the signal.
    proc = cli(*args, env={"GCDBENCH_TEST_MARKER": str(marker)}, start_new_session=True,
               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    cell = cell_dir(out, "SlowEngine")
    wait_for(lambda: len(list((cell / "parts").glob("*.sample.json"))) >= 1, what="a finished sample")
    worker = marked_pid(marker, "compile")
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    assert "interrupted: the finished samples are kept" in stderr
    assert not psutil.pid_exists(worker) or psutil.Process(worker).status() == psutil.STATUS_ZOMBIE
    run(make_cfg(out, "engine=reference", f"engine.name={FAULTY}:SlowEngine", *words))
    assert meta_of(cell)["outcomes"] == {"ok": 8}
    assert [s["status"] for s in meta_of(cell)["sessions"]] == ["interrupted", "finished"]


def test_report_warns_when_run_json_does_not_describe_the_rows(tmp_path, words, capsys):
    """A run killed between writing samples.parquet and run.json (both atomic, one after the other): the report
    says so and the next run repairs it."""
    from gcdbench.experiments.report import collect

    cfg = make_cfg(tmp_path, "engine=reference", *words, "samples=2")
    cell = run(cfg)
    meta = meta_of(cell)
    (cell / "run.json").write_text(json.dumps({**meta, "n_rows": 1}))
    capsys.readouterr()
    assert len(collect(tmp_path)) == 1
    assert "run.json describes 1 samples, samples.parquet holds 2" in capsys.readouterr().err
    run(cfg)   # nothing to run; the merge rewrites run.json from the rows
    assert meta_of(cell)["n_rows"] == 2


def test_foreign_run_json_is_one_skipped_cell_not_a_failed_report(tmp_path, words, capsys):
    """Issue 27, item 4: a run.json that is not a cell's (``{"foo": 1}``) beside a real cell: the report is built,
    names the foreign file once under "Not reported", and reports the real cell."""
    from gcdbench.experiments.report import write_report

    run(make_cfg(tmp_path, "engine=reference", *words, "samples=2"))
    alien = tmp_path / "stray" / "bytes" / "thing"
    alien.mkdir(parents=True)
    (alien / "run.json").write_text('{"foo": 1}')
    capsys.readouterr()
    write_report(tmp_path, tmp_path / "report", tokenizer="bytes")
    err = capsys.readouterr().err
    assert err.count("is not a gcdbench run.json (no engine, config, dataset, tokenizer)") == 1, err
    text = (tmp_path / "report" / "README.md").read_text()
    assert "## Not reported" in text and "stray" in text.split("## Not reported")[1]
    cells = pd.read_csv(tmp_path / "report" / "cells.csv")
    assert list(cells["config"]) == ["reference"]


def test_killed_write_leaves_no_temporary_and_no_blank_report_row(tmp_path, words, capsys):
    """Issue 27, item 13: a kill -9 inside the first merge leaves run.json (written first), a half-written
    ``.steps.parquet.tmp<PID>`` and no samples.parquet. The report names the cell as holding no rows yet (no blank
    row); the resume removes the temporary and finishes the cell."""
    from gcdbench.experiments.report import collect

    cfg = make_cfg(tmp_path, "engine=reference", *words, "samples=2")
    cell = run(cfg)
    for name in ("samples.parquet", "steps.parquet", "audit.parquet"):
        (cell / name).unlink(missing_ok=True)
    (cell / ".steps.parquet.tmp99999").write_bytes(b"PAR1 half")
    capsys.readouterr()
    cells = collect(tmp_path)
    assert cells.empty and "holds no rows yet" in " ".join(cells.attrs["skipped"])
    run(cfg)
    assert not list(cell.glob(".*.tmp*"))
    assert len(collect(tmp_path)) == 1



def test_copied_cell_is_reported_once_and_named(tmp_path, words, capsys):
    """Issue 27, item 4: a cell folder copied elsewhere under the results root (same identity, commit and machine)
    was reported twice without comment (two rows in the cells and audit tables). Now once, from the first; the
    copy is named once under "Not reported"."""
    import shutil

    from gcdbench.experiments.report import collect, write_report

    cell = run(make_cfg(tmp_path / "runs" / "a", "engine=reference", *words, "samples=2"))
    copy = tmp_path / "runs" / "b" / cell.relative_to(tmp_path / "runs" / "a")
    shutil.copytree(cell, copy)
    capsys.readouterr()
    write_report(tmp_path / "runs", tmp_path / "report", tokenizer="bytes")
    err = capsys.readouterr().err
    assert err.count("is a copy of the cell") == 1, err
    assert len(pd.read_csv(tmp_path / "report" / "cells.csv")) == 1
    assert list(collect(tmp_path / "runs")["path"]) == [str(cell)]
    text = (tmp_path / "report" / "README.md").read_text()
    assert f"{copy} is a copy of the cell {cell}" in text.split("## Not reported")[1]


def test_runner_works_from_outside_the_repository(tmp_path, words):
    """Issue 27, item 12: ``python -m experiments.run`` needs the repository root (the folder ``experiments/`` is
    there); the installed package's ``python -m gcdbench.experiments.run`` (= ``gcdbench-run``) runs a cell from any
    folder, with the configs it ships."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = subprocess.run([sys.executable, "-m", "gcdbench.experiments.run", "engine=reference", *words, "samples=1",
                        "tokenizer=bytes", "progress=false", f"out_dir={tmp_path / 'out'}"],
                       cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert list((tmp_path / "out").rglob("samples.parquet"))
    assert not [p for p in elsewhere.rglob("*") if p.name != ".hydra" and ".hydra" not in p.parts], \
        list(elsewhere.rglob("*"))


def test_resume_with_the_audit_off_drops_the_pending_audit(tmp_path, words, monkeypatch, capsys):
    """Issue 27, item 1: a run stopped after its samples and before their audit leaves the masks saved for the
    audit; a resume with ``audit.per_sample=0`` audited them anyway (a cell whose audit exceeds the machine stayed
    stuck). Now it drops them, says so in run.json, and the cell finishes with every row."""
    from gcdbench.experiments import runner

    real = runner._audit_pending
    monkeypatch.setattr(runner, "_audit_pending", lambda *a, **k: None)   # the run stops before its audit
    cell = run(make_cfg(tmp_path, "engine=reference", *words, "samples=3", "audit.per_sample=2"))
    assert len(list((cell / "parts").glob("*.audit.npz"))) == 3
    monkeypatch.setattr(runner, "_audit_pending", real)
    called = []
    monkeypatch.setattr("gcdbench.experiments.audit_child.audit_groups", lambda *a, **k: called.append(a))
    capsys.readouterr()
    run(make_cfg(tmp_path, "engine=reference", *words, "samples=3", "audit.per_sample=0"))
    assert not called and not list((cell / "parts").glob("*.audit.npz"))
    assert "audit.per_sample=0 on resume: the masks saved for the audit were dropped (3 sample(s) stay " \
           "unaudited)" in capsys.readouterr().err
    assert meta_of(cell)["n_rows"] == 3 and len(pd.read_parquet(cell / "samples.parquet")) == 3
