"""The by-work table (``report.by_work``) from bench files of ``bench masks --by-work``: one row per cell, the pack
keeps what the table reads and refuses files of two commits."""
from __future__ import annotations

import gzip
import json

import pytest

from gcdbench.experiments.bench_setup import by_work
from gcdbench.experiments.benchfile import write_bench
from gcdbench.experiments.report import by_work as report
from gcdbench.experiments.schema import read_bench
from gcdbench.parsers.valiant.engine import ValiantEngine


def _record(name, slow_steps):
    us = [2.0] * 99 + [40.0]
    work = [{"masks_reused": 1}] * 99 + [{"searches": 1, "chart_steps": slow_steps}]
    return {"dataset": "shapes", "dataset_name": name, "engine": "valiant", "options": {"regularize": True},
            "steps": 100, "mask_median_us": 2.0, "mask_p99_us": 39.6, "per_prefix": [{"prefix_tokens": 0}],
            "per_sample": [{"masks": 100}], "by_work": by_work(us, work, ValiantEngine().work_kind)}


def test_table_and_pack(tmp_path):
    a = write_bench(tmp_path / "a.json", [_record("shapes_ladder_5_ladder", 3)])
    b = write_bench(tmp_path / "b.json", [_record("shapes_ladder_25_ladder", 20)])
    md, packed = tmp_path / "by_work.md", tmp_path / "by_work.json.gz"
    report.main([str(a), str(b), "--out", str(md), "--pack", str(packed)])
    rows = [line for line in md.read_text().splitlines() if line.startswith("| shapes_")]
    assert len(rows) == 2 and "whole mask from the memo (83%, 99%)" in rows[0]   # 198 of 238 us
    assert "searched, 2-4 chart steps (1)" in rows[0] and "searched, 17+ chart steps (1)" in rows[1]
    assert "| 0.03 / 3.00 | 0.01 / 1.00 |" in rows[0]          # chart steps and searches: all / slowest 1%
    doc = read_bench(packed)
    assert [r["dataset_name"] for r in doc["records"]] == ["shapes_ladder_5_ladder", "shapes_ladder_25_ladder"]
    assert not {"per_prefix", "per_sample"} & set(doc["records"][0])
    again = tmp_path / "again.md"
    report.main([str(packed), "--out", str(again)])              # the table from the pack alone
    assert again.read_text() == md.read_text()
    frame = report.kinds_frame(doc["records"])
    assert len(frame) == 4 and set(frame["set"]) == {"shapes_ladder_5_ladder", "shapes_ladder_25_ladder"}


def test_pack_refuses_two_commits_and_files_without_by_work(tmp_path):
    a = write_bench(tmp_path / "a.json", [_record("x", 1)])
    doc = json.loads(a.read_text())
    doc["git_commit"] = "0" * 40
    (tmp_path / "b.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    with pytest.raises(ValueError, match="2 commits"):
        report.pack(*report.read([a, tmp_path / "b.json.gz"]), tmp_path / "p.json.gz")
    c = write_bench(tmp_path / "c.json", [{"dataset": "sample", "steps": 3}])
    with pytest.raises(ValueError, match="no record with by_work"):
        report.read([c])


def test_counter_columns_come_from_the_engines_headline_counters():
    """The table's counter columns are the engines' own (Engine.headline_counters): Valiant's chart steps and
    searches; an engine naming none (PSC) gets none, and no other engine's counter names."""
    psc = {**_record("x", 1), "engine": "psc"}
    head, sep, row = report.table([psc])
    assert "chart steps" not in head and head.count("|") == sep.count("|") == row.count("|") == 7
    head = report.table([_record("y", 1)])[0]
    assert "chart steps a mask" in head and "searches a mask" in head
