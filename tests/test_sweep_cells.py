"""experiments/sweep_cells.sh: a preset's sweep one cell at a time, tokenizers outermost, packed cells skipped, the
stop file honoured (a stand-in python records each runner call)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "sweep_cells.sh"


def drive(tmp_path, env: dict, args: list[str]) -> tuple[list[list[str]], subprocess.CompletedProcess]:
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "python"
    # the runner's stand-in records its arguments; anything else (-c) goes to the real python
    fake.write_text(f'#!/usr/bin/env bash\nif [ "$1" = -m ]; then echo "$*" >> {calls}; exit 0; fi\n'
                    f'exec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    got = subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PY": str(fake), "LOGS": str(tmp_path / "logs"), **env})
    lines = calls.read_text().splitlines() if calls.exists() else []
    return [dict(w.split("=", 1) for w in line.split() if "=" in w) for line in lines], got


def test_the_preset_s_sweep_tokenizers_outermost(tmp_path):
    calls, got = drive(tmp_path, {}, ["seed_tables", str(tmp_path / "runs")])
    assert got.returncode == 0, got.stderr
    assert len(calls) == 5 * 3 * 10   # seed_tables: 5 datasets x 3 tokenizers x 10 engines
    assert [c["tokenizer"] for c in calls[::50]] == ["llama3", "qwen3", "qwen3_6"]
    assert [c["dataset"] for c in calls[:50:10]] == ["java", "java_negative", "go", "go_negative", "spider"]
    assert all(c["experiment"] == "seed_tables" and c["out_dir"] == str(tmp_path / "runs") for c in calls)
    assert (tmp_path / "logs" / "java_llama3_xgrammar.log").exists()


def test_packed_cells_are_skipped_and_the_stop_file_stops(tmp_path):
    done = tmp_path / "done"
    (done / "_restored").mkdir(parents=True)
    pd.DataFrame({"cell": ["go/qwen3/psc"]}).to_parquet(done / "_restored" / "cells.parquet")
    env = {"DATASETS": "java go", "TOKENIZERS": "qwen3", "ENGINES": "psc valiant"}
    calls, got = drive(tmp_path, env, ["seed_tables", str(tmp_path / "runs"), str(done)])
    assert [(c["dataset"], c["engine"]) for c in calls] == [("java", "psc"), ("java", "valiant"), ("go", "valiant")]
    assert "packed in" in got.stdout
    (tmp_path / "calls.txt").unlink()
    (tmp_path / "runs").mkdir(exist_ok=True)
    (tmp_path / "runs" / "STOP").touch()
    calls, got = drive(tmp_path, env, ["seed_tables", str(tmp_path / "runs")])
    assert calls == [] and "STOP: stopping before" in got.stdout


def test_a_cell_that_ended_in_out_is_not_run_again_one_left_half_done_is(tmp_path):
    """A restarted sweep must not resume a cell its run time limit ended (the runner would run its skipped
    samples with the limit's time again); a cell killed half way (``parts/`` left) is resumed."""
    runs = tmp_path / "runs"
    (runs / "java" / "qwen3" / "psc").mkdir(parents=True)
    (runs / "java" / "qwen3" / "psc" / "run.json").write_text("{}")
    (runs / "java" / "qwen3" / "kbnf" / "parts").mkdir(parents=True)
    (runs / "java" / "qwen3" / "kbnf" / "run.json").write_text("{}")
    env = {"DATASETS": "java", "TOKENIZERS": "qwen3", "ENGINES": "psc kbnf valiant"}
    calls, got = drive(tmp_path, env, ["seed_tables", str(runs)])
    assert [c["engine"] for c in calls] == ["kbnf", "valiant"] and "ended in" in got.stdout


def test_an_unknown_preset_is_one_clear_error(tmp_path):
    calls, got = drive(tmp_path, {}, ["no_such_preset"])
    assert got.returncode == 2 and "no preset conf/experiment/no_such_preset.yaml" in got.stderr and calls == []
