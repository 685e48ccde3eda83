"""``report.table1`` on hand-made cells: every kind of entry, exact strings (Markdown included)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from gcdbench.experiments.report import details, table1
from gcdbench.experiments.report.text import markdown as _markdown

NAN = np.nan
BASE = dict(tokenizer="qwen3", requested=30, init_s=NAN, compile_error=None, aborted=None, samples=NAN, passed=NAN,
            pass_rate=NAN, outcomes=None, mask_n=NAN, mask_mean_us=NAN, mask_p50_us=NAN, mask_p99_us=NAN,
            mask_max_us=NAN, init_cache_hit=False, ambiguous=False)
CELLS = pd.DataFrame([
    # complete, init from the on-disk cache
    {**BASE, "engine": "valiant", "config": "valiant", "dataset": "spider", "init_s": 2.345, "samples": 30,
     "passed": 30, "pass_rate": 1.0, "outcomes": "ok: 30", "mask_n": 1200, "mask_mean_us": 812.34,
     "mask_p50_us": 95.04, "mask_p99_us": 4321.0, "mask_max_us": 123456.0, "init_cache_hit": True},
    # compile error (only the first line of the reason goes into the note)
    {**BASE, "engine": "psc", "config": "psc", "dataset": "treebank", "ambiguous": True,
     "compile_error": "psc: not LALR(1): 6 conflicts\nsecond line", "outcomes": "compile_error: 30", "samples": 0,
     "passed": 0},
    # partial: the run time limit cut it short
    {**BASE, "engine": "llguidance", "config": "llguidance", "dataset": "spider", "init_s": 0.5, "samples": 20,
     "passed": 18, "pass_rate": 0.9, "outcomes": "ok: 18, skipped: 10, rejected: 2",
     "aborted": "run time limit of 3600 s reached", "mask_n": 700, "mask_mean_us": 55.55, "mask_p50_us": 40.0,
     "mask_p99_us": 99.94, "mask_max_us": 150.0},
    # every sample stopped by the engine's own error state, on a grammar the dataset marks ambiguous
    {**BASE, "engine": "llguidance", "config": "llguidance", "dataset": "treebank", "ambiguous": True,
     "init_s": 123.4, "samples": 30, "passed": 0, "pass_rate": 0.0, "outcomes": "engine_error: 30", "mask_n": 360,
     "mask_mean_us": 2500.0, "mask_p50_us": 2000.0, "mask_p99_us": 9000.0, "mask_max_us": 12000.0},
    # another vocabulary: not in this table
    {**BASE, "engine": "valiant", "config": "valiant", "dataset": "spider", "tokenizer": "bytes", "init_s": 9.0},
])


def test_every_kind_of_cell():
    t, notes = table1(CELLS)
    assert notes == [
        "valiant × spider: init read from the engine's on-disk cache, not a cold compile",
        "psc × treebank: not run: psc: not LALR(1): 6 conflicts",
        "llguidance × spider: estimated from 700 masks of 20 samples (ok: 18, skipped: 10, rejected: 2); "
        "run time limit of 3600 s reached",
        "llguidance × treebank: estimated from 360 masks of 30 samples (engine_error: 30)",
    ]
    rows = {r["Method"]: r for r in t.to_dict("records")}
    assert list(rows) == ["valiant", "psc", "llguidance"]
    cols = ("Cmplx.", "Init", "Per-mask µs", "p50/p99/max µs", "Pass")
    get = lambda m, ds: tuple(rows[m][f"{ds} {c}"] for c in cols)  # noqa: E731
    assert get("valiant", "spider") == ("O(n^3)", "2.35s [1]", "812", "95.0/4,321/123,456", "30/30")
    assert get("valiant", "treebank") == ("", "", "", "", "")
    assert get("psc", "treebank") == ("O(n)", "×", "× [2]", "×", "×")
    assert get("llguidance", "spider") == ("O(n)", "0.50s", "55.5 [3]", "40.0/99.9/150", "18/20")
    # the complexity comes from the engine class, told by the dataset that the grammar is ambiguous
    assert get("llguidance", "treebank") == ("O(n^3)", "123s", "2,500 [4]", "2,000/9,000/12,000", "0/30")


def test_markdown_keeps_the_entries_as_written():
    t, _ = table1(CELLS[CELLS["dataset"] == "spider"])
    assert _markdown(t, parse_numbers=False).splitlines() == [
        "| Method     | spider Cmplx.   | spider Init   | spider Per-mask µs   | spider p50/p99/max µs   | spider Pass   |",
        "|:-----------|:----------------|:--------------|:---------------------|:------------------------|:--------------|",
        "| valiant    | O(n^3)          | 2.35s [1]     | 812                  | 95.0/4,321/123,456      | 30/30         |",
        "| llguidance | O(n)            | 0.50s         | 55.5 [2]             | 40.0/99.9/150           | 18/20         |",
    ]


def test_details_markdown_formats_numbers_and_leaves_missing_values_empty():
    d = details(CELLS.assign(audit_steps=NAN, peak_rss_compile_mb=1234.56))
    md = _markdown(d[["config", "dataset", "tokenizer", "samples", "mask_mean_us", "peak_rss_compile_mb"]].head(2))
    assert md.splitlines() == [
        "| config     | dataset   | tokenizer   |   samples |   mask_mean_us |   peak_rss_compile_mb |",
        "|:-----------|:----------|:------------|----------:|---------------:|----------------------:|",
        "| valiant    | spider    | bytes       |           |                |               1,234.6 |",
        "| llguidance | spider    | qwen3       |        20 |           55.5 |               1,234.6 |",
    ]
