"""experiments/maskbench_cells.sh: the one-cell-at-a-time MaskBench driver runs the cells it says, in its order, skips
the cells already packed, and stops at the stop file (a stand-in python records each runner call)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "maskbench_cells.sh"


def drive(tmp_path, env: dict, done: Path | None = None) -> tuple[list[str], str]:
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "python"
    # the runner's stand-in records its arguments and its cache folder; anything else (-c) goes to the real python
    fake.write_text(f'#!/usr/bin/env bash\nif [ "$1" = -m ]; then echo "$GCDBENCH_CACHE $*" >> {calls}; exit 0; fi\n'
                    f'exec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    out = tmp_path / "runs"
    args = ["bash", str(SCRIPT), str(out)] + ([str(done)] if done else [])
    got = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PY": str(fake), "CACHE_ROOT": str(tmp_path / "cache"), **env})
    assert got.returncode == 0, got.stderr
    return (calls.read_text().splitlines() if calls.exists() else []), got.stdout


def test_quick_engines_first_then_the_slow_ones_as_shards(tmp_path):
    calls, _ = drive(tmp_path, {"ENGINES": "slowone quick", "SLOW": "slowone", "SHARDS": "2"})
    cache = tmp_path / "cache"
    want = [(f"{cache}/quick", "valid", None), (f"{cache}/quick", "invalid", None),
            (f"{cache}/slowone", "valid", "0/2"), (f"{cache}/slowone", "invalid", "0/2"),
            (f"{cache}/slowone", "valid", "1/2"), (f"{cache}/slowone", "invalid", "1/2")]
    assert len(calls) == len(want)
    for line, (c, kind, shard) in zip(calls, want):
        words = line.split()
        assert words[0] == c and "experiment=maskbench" in words and f"dataset.kind={kind}" in words
        assert f"engine={c.rsplit('/', 1)[1]}" in words and f"out_dir={tmp_path / 'runs'}" in words
        assert (f"dataset.shard={shard}" in words) == (shard is not None)
        assert shard is not None or not any(w.startswith("dataset.shard") for w in words)


def test_the_preset_s_engines_by_default(tmp_path):
    calls, _ = drive(tmp_path, {"SLOW": "none"})
    engines = [w.split("=", 1)[1] for line in calls for w in line.split() if w.startswith("engine=")]
    assert engines[::2] == ["llguidance_schema", "xgrammar_schema", "llguidance_unforced", "xgrammar", "glrmask",
                            "psc", "pre3", "valiant", "kbnf", "cfgzip"]


def test_packed_cells_are_skipped_and_the_stop_file_stops(tmp_path):
    done = tmp_path / "done"
    (done / "_restored").mkdir(parents=True)
    pd.DataFrame({"cell": ["maskbench/qwen3/quick", "maskbench_invalid_shard0of2/qwen3/slowone"]}).to_parquet(
        done / "_restored" / "cells.parquet")
    calls, out = drive(tmp_path, {"ENGINES": "quick slowone", "SLOW": "slowone", "SHARDS": "2"}, done)
    assert len(calls) == 4 and "packed in" in out
    assert not any("engine=quick" in c and "dataset.kind=valid" in c for c in calls)
    assert not any("dataset.shard=0/2" in c and "dataset.kind=invalid" in c for c in calls)
    (tmp_path / "calls.txt").unlink()
    (tmp_path / "runs").mkdir(exist_ok=True)
    (tmp_path / "runs" / "STOP").touch()
    calls, out = drive(tmp_path, {"ENGINES": "quick", "SLOW": "none"})
    assert calls == [] and "STOP: stopping before" in out


def test_a_cell_that_ended_in_out_is_not_run_again_one_left_half_done_is(tmp_path):
    """As in sweep_cells.sh: a restarted sitting must not resume a cell its run time limit ended; a cell killed
    half way (``parts/`` left) is resumed."""
    ended = tmp_path / "runs" / "maskbench" / "qwen3" / "quick"
    ended.mkdir(parents=True)
    (ended / "run.json").write_text("{}")
    half = tmp_path / "runs" / "maskbench_invalid" / "qwen3" / "quick"
    (half / "parts").mkdir(parents=True)
    (half / "run.json").write_text("{}")
    calls, out = drive(tmp_path, {"ENGINES": "quick", "SLOW": "none"})
    assert len(calls) == 1 and "dataset.kind=invalid" in calls[0].split() and "ended in" in out


def test_the_preset_names_the_sharded_engines(tmp_path):
    calls, _ = drive(tmp_path, {"ENGINES": "glrmask kbnf", "SHARDS": "1"})
    assert [("engine=kbnf" in c, "dataset.shard=0/1" in c) for c in calls] == [(False, False)] * 2 + [(True, True)] * 2
