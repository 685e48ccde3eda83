"""The "Beyond Table 1" section (experiments/beyond.py), built from result folders these tests make with small
runs (byte vocabulary): the cells table with a typed "not run" reason, gold against sampled, the growth figure and
slopes, and the disagreements list; and the report's README picks the section up from ``<results>/../suite``."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from gcdbench.datasets import sampled
from gcdbench.datasets.registry import load_dataset
from gcdbench.experiments import beyond

REPO = Path(__file__).resolve().parents[1]


def _run(out_dir, *overrides):
    from hydra import compose, initialize_config_dir

    from gcdbench.experiments.config import register
    from gcdbench.experiments.runner import run

    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["tokenizer=bytes", f"out_dir={out_dir}", "progress=false", *overrides])
    return run(cfg)


@pytest.fixture(scope="module")
def results(tmp_path_factory, bytes_tokenizer):
    root = tmp_path_factory.mktemp("results")
    runs, suite_dir = root / "runs", root / "suite"
    ds = load_dataset({"name": "sample"}, data_root="unused")
    seqs = sampled.generate(ds, bytes_tokenizer, n=3, seed=0, params=sampled.SamplerParams(max_target=20))
    tiny = root / "sample.bytes.json"
    sampled.write_sampled(tiny, "sample", ds, bytes_tokenizer, seqs, 0, sampled.SamplerParams(max_target=20), 1.0)
    _run(runs, "engine=llguidance", "dataset=sample", "samples=3", "audit.per_sample=2")          # a gold cell
    _run(suite_dir, "engine=llguidance", "dataset=sampled", "dataset.source=sample", f"dataset.file={tiny}",
         "audit.per_sample=2")
    for engine in ("xgrammar", "psc"):
        _run(suite_dir, f"engine={engine}", "dataset=ambiguous_concat", "dataset.lengths=[3,6,9,12]",
             "audit.per_sample=1")
    return root


@pytest.mark.slow
def test_beyond_section_from_stored_cells(results, tmp_path):
    out = tmp_path / "report"
    lines = beyond.beyond_section([results / "suite", results / "runs"], out, tokenizer="bytes")
    text = "\n".join(lines)
    assert text.startswith("## Beyond Table 1")
    cells = pd.read_csv(out / "beyond_cells.csv")
    assert set(cells["dataset"]) == {"ambiguous_concat", "sample_sampled"}   # gold Table 1 cells are not repeated
    psc = cells[(cells["config"] == "psc")].iloc[0]
    assert psc["pass"] == "×" and "not LALR(1)" in psc["note"]
    xg = cells[(cells["config"] == "xgrammar")].iloc[0]
    assert xg["pass"] == "4/4"
    gvs = pd.read_csv(out / "beyond_gold_vs_sampled.csv")
    assert list(gvs["source"]) == ["sample"] and gvs["gold pass"].iloc[0] == "3/3"
    growth = pd.read_csv(out / "beyond_growth.csv")
    assert sorted(growth[growth["config"] == "xgrammar"]["length"]) == [3, 6, 9, 12]
    assert growth["complete"].all()
    assert (out / "figures" / "ambiguity_growth.png").exists() and (out / "figures" / "ambiguity_growth.pdf").exists()
    dis = pd.read_csv(out / "beyond_disagreements.csv")
    assert list(dis.columns)[:4] == ["dataset", "config", "tokenizer", "kind"]
    assert (out / "beyond.md").read_text().startswith("## Beyond Table 1")


@pytest.mark.slow
def test_report_readme_has_the_section_from_the_sibling_suite_folder(results, tmp_path):
    from gcdbench.experiments.report import write_report

    out = tmp_path / "report"
    write_report(results / "runs", out, tokenizer="bytes")
    readme = (out / "README.md").read_text()
    assert "## Beyond Table 1" in readme and "ambiguity_growth.png" in readme
    t1 = (out / "table1.md").read_text()
    assert "ambiguous_concat" not in t1   # suite cells stay out of Table 1


def test_slope_of_synthetic_growth():
    n = [10, 20, 40, 80, 160]
    assert beyond.loglog_slope(n, [x ** 2 for x in n]) == pytest.approx(2.0)
    assert beyond.loglog_slope(n, [3 * x for x in n]) == pytest.approx(1.0)
    assert pd.isna(beyond.loglog_slope([1, 2], [1, 2]))


def test_refusals_explained_by_a_documented_difference_are_not_disagreements(tmp_path):
    """A rejected sample whose refused step the audit explains is left out; an unexplained one is listed."""
    import json

    cell = tmp_path / "json_sampled" / "bytes" / "llguidance"
    cell.mkdir(parents=True)
    (cell / "run.json").write_text(json.dumps({
        "engine": "llguidance", "config": "llguidance", "dataset": "json_sampled", "tokenizer": "bytes",
        "dataset_meta": {"pieces": {"s000": ["[", "1", "]"], "s001": ["[", "2", "]"]}}}))
    pd.DataFrame([{"sample_id": "s000", "outcome": "rejected", "message": "oracle token 49 not in the mask at step 1",
                   "n_steps": 2}, {"sample_id": "s001", "outcome": "rejected",
                                   "message": "oracle token 50 not in the mask at step 1", "n_steps": 2}]
                 ).to_parquet(cell / "samples.parquet")
    base = {"n_false_allow": 0, "n_false_block": 1, "false_allow_examples": [], "agree": False, "prefix": "["}
    pd.DataFrame([{**base, "sample_id": "s000", "step": 1, "agree_modulo_documented": True,
                   "documented_causes": "longest_match_lexing: 1", "false_block_examples": ["1"]},
                  {**base, "sample_id": "s001", "step": 1, "agree_modulo_documented": False,
                   "documented_causes": "", "false_block_examples": ["2"]}]).to_parquet(cell / "audit.parquet")
    dis = beyond.disagreements([tmp_path])
    assert list(dis["sample_id"]) == ["s001"] and dis["kind"].iloc[0] == "rejected"
    assert dis["prefix"].iloc[0] == "[" and dis["token"].iloc[0] == "2" and dis["false_block"].iloc[0] == "1: 2"
