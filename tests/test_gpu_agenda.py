"""The GPU agenda (``experiments/gpu_agenda.sh``) runs end to end as a dry run on numba's CUDA simulator (tiny SQL
grammar, byte vocabulary, two samples) for every engine that declares CUDA kernels (Valiant and Pre³): tests,
Table 1 rows (CUDA and CPU), each engine's occupancy sweep and the summary with its figure; a second call resumes
(every finished phase is skipped)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.first
def test_gpu_agenda_dry_run(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": os.environ.get("PYTHON", __import__("sys").executable)}
    r = subprocess.run(["bash", "experiments/gpu_agenda.sh", "--dry-run"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    times = [ln.split("\t") for ln in (tmp_path / "agenda_times.tsv").read_text().splitlines()]
    assert [t[0] for t in times] == ["setup", "tests", "table", "cpu", "sweep", "summary"] and all(t[1] == "0" for t in times)
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert sorted(doc["engines"]) == ["pre3", "valiant"]   # the registry's order (sorted by name)
    methods = [row["Method"] for row in doc["table1"]]
    assert any(m.startswith("valiant cuda, 32 workers (simulator)") for m in methods)
    assert any(m.startswith("valiant cpu") for m in methods)
    assert any(m.startswith("pre3 cuda, 64 cuda_threads (simulator)") for m in methods)
    assert any(m.startswith("pre3 cpu") for m in methods)
    sweep = {(s["engine"], s["option"], s["value"]) for s in doc["sweep"]}
    assert sweep == {("valiant", "workers", 1), ("valiant", "workers", 4), ("valiant", "workers", 32),
                     ("pre3", "cuda_threads", 32), ("pre3", "cuda_threads", 64)}
    assert {r["engine"] for r in doc["ratios"]} == {"valiant", "pre3"}
    for r in doc["ratios"]:
        assert r["cuda_pass"] == "2/2", r
        audit = r["cuda_audit"].split("/")
        assert audit[1] != "0" and r["cuda_audit"] == r["cpu_audit"], r   # the CUDA masks audit as the CPU's
        if r["engine"] == "valiant":
            assert audit[0] == audit[1], r     # every audited mask equals the reference's (pre3: its profile's)
    assert "figures/mask_vs_workers.png" in doc["figures"]
    again = subprocess.run(["bash", "experiments/gpu_agenda.sh", "--dry-run"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0 and again.stdout.count("done before") == 5, again.stdout[-2000:]
