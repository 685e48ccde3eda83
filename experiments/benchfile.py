"""Benchmark records on disk: the numbers a benchmark measured, with the command, machine, versions and commit.

Benchmarks (``experiments/bench.py``, ``ptx_report``) print one JSON object per measurement and, with
``--out FILE``, also write them here so that a report can quote a file rather than a terminal.
"""
from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

from gcdbench.experiments.provenance import RESULT_FOLDERS, git_state, machine_info, package_versions
from gcdbench.experiments.schema import new_bench


def write_bench(path: str | Path, records: list[dict], **extra) -> Path:
    """Write ``records`` with their provenance as a bench file (declared in ``experiments/schema.py`` BenchFile;
    ``extra``: further declared keys, e.g. ``toolchain``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    git = git_state(ignore=RESULT_FOLDERS)
    doc = new_bench(command=" ".join(["python", *sys.orig_argv[1:]]), when=time.strftime("%Y-%m-%d %H:%M:%S %z"),
                    machine=machine_info(), git_commit=git["commit"], git_dirty=git["dirty"],
                    versions=package_versions(), records=records, **extra)
    path.write_text(compact_number_lists(json.dumps(doc, indent=1, default=str)) + "\n")
    return path


#: an indented list of plain numbers: ``[`` then a newline (never inside a JSON string, where it is escaped)
_NUMBER_LIST = re.compile(r"\[\n\s*(-?[0-9][-+0-9.eE,\s]*?)\s*\]")


def compact_number_lists(text: str) -> str:
    """Indented JSON with every list of plain numbers on one line (``[1.5,2,3]``): the per-mask and per-step times
    a bench keeps (``mask_us_by_sample``, ``step_us_series``) take a line each otherwise. The same JSON value."""
    return _NUMBER_LIST.sub(lambda m: "[" + ",".join(x.strip() for x in m.group(1).split(",")) + "]", text)
