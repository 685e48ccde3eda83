"""The "Seeds' tables" report section (``report.seeds``): seed 003's Tables 1-2 and seed 002's CFGzip tables, on
hand-made cell rows and on real cells of the java dataset (a toy grammar and files the test writes)."""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
from hydra import compose, initialize_config_dir

from gcdbench.experiments.config import register
from gcdbench.experiments.report import seeds
from gcdbench.experiments.runner import run
from test_code_datasets import write_root
from test_maskbench_run import REPO

NAN = np.nan
BASE = dict(requested=300, compile_error=None, aborted=None, samples=NAN, mask_n=NAN, mask_mean_us=NAN,
            outcome_counts={}, provenance="", path="/nonexistent")


def row(**kw):
    return {**BASE, **kw}


CELLS = pd.DataFrame([
    row(engine="psc", config="psc", dataset="java", tokenizer="qwen3", compile_error="psc: not LALR(1): 17\nmore"),
    row(engine="xgrammar", config="xgrammar", dataset="java", tokenizer="qwen3", samples=300, mask_n=9000,
        mask_mean_us=312_345.0, outcome_counts={"ok": 299, "rejected": 1}),
    row(engine="xgrammar", config="xgrammar", dataset="java_negative", tokenizer="qwen3", samples=280,
        mask_n=7000, mask_mean_us=1.0, outcome_counts={"rejected": 270, "no_eos": 5, "ok": 5}),
    # cut short by the run's time limit; another vocabulary
    row(engine="xgrammar", config="xgrammar", dataset="spider", tokenizer="llama3", samples=120, mask_n=3000,
        mask_mean_us=45.04, outcome_counts={"ok": 120, "skipped": 180}, aborted="run time limit of 1800 s reached"),
    row(engine="valiant", config="valiant", dataset="go", tokenizer="qwen3", samples=300, mask_n=30000,
        mask_mean_us=61.2, outcome_counts={"ok": 300}, provenance="dirty tree"),
])


def test_seed003_tables_layout_entries_and_notes():
    json_cells = {("psc", "qwen3"): seeds._entry(2.25, 100, 9, 10)}
    t1, t2, notes = seeds.seed003_tables(seeds.entries(CELLS, json_cells))
    assert list(t1.columns) == ["Model", "Method", "Java", "Go", "SQL", "JSON Schemas"]
    # vocabularies in the seed's order (by size), configs by name
    assert [(r["Model"][:6], r["Method"]) for r in t1.to_dict("records")] == [
        ("Llama ", "xgrammar"), ("Qwen3 ", "psc"), ("Qwen3 ", "valiant"), ("Qwen3 ", "xgrammar")]
    r1 = {(r["Model"][:6], r["Method"]): r for r in t1.to_dict("records")}
    r2 = {(r["Model"][:6], r["Method"]): r for r in t2.to_dict("records")}
    assert r1[("Qwen3 ", "xgrammar")]["Java"] == "312,345"
    # positives pass with ok, negatives when refused (rejected or no EOS): (299 + 275) / (300 + 280)
    assert r2[("Qwen3 ", "xgrammar")]["Java"] == "99.0% (574/580)"
    assert r1[("Qwen3 ", "psc")]["Java"] == "× [2]" and r2[("Qwen3 ", "psc")]["Java"] == "×"
    assert r1[("Qwen3 ", "psc")]["JSON Schemas"] == "2.2" and r2[("Qwen3 ", "psc")]["JSON Schemas"] == "90.0% (9/10)"
    assert r1[("Llama ", "xgrammar")]["SQL"] == "45.0 [1]"
    assert r2[("Llama ", "xgrammar")]["SQL"] == "100.0% (120/120) [1]"
    assert r1[("Qwen3 ", "valiant")]["Go"] == "61.2 [3]" and r1[("Qwen3 ", "valiant")]["Java"] == ""
    assert notes == ["xgrammar × SQL (llama3): 120 of 300 positive samples run (run time limit of 1800 s reached)",
                     "psc × Java (qwen3): not run: psc: not LALR(1): 17",
                     "valiant × Go (qwen3): go: not from one clean commit: dirty tree"]


def test_seed002_tables_read_the_engines_own_figures(tmp_path):
    cell = tmp_path / "java" / "qwen3" / "cfgzip"
    cell.mkdir(parents=True)
    (cell / "run.json").write_text(json.dumps({
        "engine": "cfgzip", "config": "cfgzip", "dataset": "java", "tokenizer": "qwen3",
        "inits": [{"engine_info": {"preprocess_s_recorded": 812.5, "n_classes": 4321}}]}))
    cells = pd.DataFrame([
        row(engine="cfgzip", config="cfgzip", dataset="java", tokenizer="qwen3", path=str(cell), mask_mean_us=250.0,
            mask_p50_us=200.0, mask_p99_us=900.0),
        row(engine="xgrammar", config="xgrammar", dataset="java", tokenizer="qwen3", mask_mean_us=300_000.0,
            mask_p50_us=100_000.0, mask_p99_us=2_000_000.0),
        row(engine="cfgzip", config="cfgzip", dataset="go", tokenizer="qwen3", compile_error="cfgzip: too big\nx")])
    prep, lat = seeds.seed002_tables(cells)
    assert prep.to_dict("records") == [
        {"grammar": "go", "vocabulary": seeds.MODELS["qwen3"], "engine": "cfgzip", "offline preprocessing (s)": "×",
         "token classes": "×", "note": "cfgzip: too big"},
        {"grammar": "java", "vocabulary": seeds.MODELS["qwen3"], "engine": "cfgzip",
         "offline preprocessing (s)": "812s", "token classes": "4,321", "note": ""}]
    java = lat.set_index("grammar").loc["java"]
    assert java["xgrammar mean µs"] == "300,000" and java["cfgzip p50/p99 µs"] == "200/900"
    assert java["speed-up (mean)"] == "1200.0x"
    go = lat.set_index("grammar").loc["go"]
    assert go["cfgzip mean µs"] == "×" and go["xgrammar mean µs"] == "–"   # refused; not run


def test_seed_tables_from_real_java_cells(tmp_path):
    """Real cells (the runner on a toy java.lark and files the test writes), positive and negative, into the
    report: PSC processes every sample correctly, and the section says where its JSON column would come from."""
    root = write_root(tmp_path)
    register()

    def cell(*overrides):
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[
                f"out_dir={tmp_path / 'runs'}", "progress=false", "tokenizer=bytes", "samples=all", f"data_root={root}",
                "dataset.max_chars=100", "audit.per_sample=1", *overrides])
        return run(cfg)

    assert cell("engine=psc", "dataset=java").parts[-3] == "java"
    neg = cell("engine=psc", "dataset=java_negative")
    assert neg.parts[-3] == "java_negative"
    from gcdbench.experiments.report import cell_summary
    from gcdbench.experiments.report.build import write_report

    # the runner's end-of-cell line counts a negative sample as passed when it is refused, as the tables do
    assert re.search(r": refused (\d+)/\1 \(negative samples\), init", cell_summary(neg)), cell_summary(neg)
    assert re.search(r": pass (\d+)/\1, init", cell_summary(neg.parents[2] / "java" / "bytes" / "psc"))

    write_report(tmp_path / "runs", tmp_path / "report", tokenizer="bytes", seeds=tmp_path / "runs")
    t2 = pd.read_csv(tmp_path / "report" / "seed003_table2.csv")
    (row,) = t2.to_dict("records")   # (a dirty tree, as in a test, adds notes after the entry)
    assert (row["Model"], row["Method"]) == ("bytes", "psc") and row["Java"].startswith("100.0% (8/8)")
    text = (tmp_path / "report" / "README.md").read_text()
    assert "### Seed 003, Table 1" in text and "JSON Schemas: every schema" not in text


def test_json_entries_add_a_sharded_config_together(monkeypatch):
    """The JSON column of a config run as MaskBench shards (one cell each) counts every shard's schemas."""
    def schemas(names, ok, masks):
        n = len(names)
        return pd.DataFrame({"schema": names, "instances": [1] * n, "ok": [ok] * n, "rejected": [1 - ok] * n,
                             "no_eos": [0] * n, "compile_error": [False] * n, "mask_sum_us": [10.0 * masks] * n,
                             "masks": [masks] * n})

    def info(kind):
        return {"config": "e", "tokenizer": "qwen3", "kind": kind, "commit": "a" * 40}

    fake = [(info("valid"), schemas(["s1", "s2"], 1, 4), None), (info("valid"), schemas(["s3", "drop"], 1, 2), None),
            (info("invalid"), schemas(["s1"], 0, 0), None), (info("invalid"), schemas(["s3"], 0, 0), None)]
    monkeypatch.setattr(seeds.maskbench, "collect_maskbench", lambda roots: fake)
    (entry,) = seeds.json_entries(["x"], drop={"drop"}).values()
    # valid: s1, s2, s3 pass; invalid: s1, s3 refused (rejected); the mean over the kept valid masks (4 + 4 + 2)
    assert (entry["passed"], entry["samples"], entry["masks"]) == (5, 5, 10) and entry["mean_us"] == 10.0
    assert entry["notes"] == ["1 of 4 schemas left out (converted language not exact)"]
