"""`engine=valiant` from the command line: a multirun over `workers` with the cuda backend and Hydra's
joblib launcher, run on the CUDA simulator (correctness only: simulator timings mean nothing), and the
workers figure drawn from it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GRAMMARS = REPO / "tests" / "grammars"


@pytest.mark.slow
def test_workers_multirun_on_the_simulator(tmp_path):
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "experiments.run", "-m", "hydra/launcher=parallel", "engine=valiant", "engine.backend=cuda",
         "engine.workers=1,4", "engine.cache=false", "dataset=custom", f"dataset.grammar={GRAMMARS / 'tiny_sql.lark'}",
         f"dataset.samples={GRAMMARS / 'tiny_sql.txt'}", "samples=2", "tokenizer=bytes", "audit.per_sample=2",
         "progress=false", f"out_dir={tmp_path}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    runs = sorted((tmp_path / "custom_tiny_sql" / "bytes").glob("valiant*"))
    assert [p.name for p in runs] == ["valiant__backend-cuda_cache-False_workers-1",
                                     "valiant__backend-cuda_cache-False_workers-4"]
    for p in runs:
        meta = json.loads((p / "run.json").read_text())
        assert meta["outcomes"] == {"ok": 2} and meta["audit"]["agree"] == meta["audit"]["steps"] > 0
    from gcdbench.experiments.report.figures import draw_all

    paths = draw_all(tmp_path, tmp_path / "fig")
    assert any("workers" in p.name for p in paths)
