"""Benchmark records on disk: the numbers a benchmark measured, with the command, machine, versions and commit.

Benchmarks (``bench_valiant``, ``gcdbench.parsers.psc.bench``) print one JSON object per measurement and, with
``--out FILE``, also write them here so that a report can quote a file rather than a terminal.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from gcdbench.experiments.provenance import RESULT_FOLDERS, git_state, machine_info, package_versions


def write_bench(path: str | Path, records: list[dict]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    git = git_state(ignore=RESULT_FOLDERS)
    doc = {"command": " ".join(["python", *sys.orig_argv[1:]]),
           "when": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": machine_info(), "git_commit": git["commit"],
           "git_dirty": git["dirty"], "versions": package_versions(), "records": records}
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return path
