"""Benchmark numbers go to a file with what is needed to quote them (machine, commit, versions, command)."""
import json

from gcdbench.experiments.benchfile import write_bench


def test_write_bench_records_machine_and_numbers(tmp_path):
    path = write_bench(tmp_path / "sub" / "bench.json", [{"dataset": "spider", "mask_p99_us": 12.5}])
    doc = json.loads(path.read_text())
    assert doc["records"] == [{"dataset": "spider", "mask_p99_us": 12.5}]
    assert doc["machine"]["cpu_count"] >= 1 and "memory_gb" in doc["machine"]
    assert doc["command"].startswith("python") and "numpy" in doc["versions"]
    assert len(doc["git_commit"]) == 40 and isinstance(doc["git_dirty"], bool)   # the checkout's commit, flagged
