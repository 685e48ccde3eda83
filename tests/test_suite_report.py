"""The "Beyond Table 1" section (experiments/report/beyond.py), built from result folders these tests make with small
runs (byte vocabulary): the cells table with a typed "not run" reason, gold against sampled, the growth figure and
slopes, and the disagreements list; and the report's README picks the section up from ``<results>/../suite``."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from gcdbench.datasets import sampled
from gcdbench.datasets.registry import load_dataset
from gcdbench.experiments.fit import loglog_slope
from gcdbench.experiments.report import beyond

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
    assert xg["pass"] == "4/4" and xg["audit"] == "4/4 language, 4/4 profile (language)"
    gvs = pd.read_csv(out / "beyond_gold_vs_sampled.csv")
    assert list(gvs["source"]) == ["sample"] and gvs["gold pass"].iloc[0] == "3/3"
    assert gvs["gold audit (declared profile)"].iloc[0] == "6/6"   # 3 samples x 2 audited steps, all agree
    explained = pd.read_csv(out / "beyond_profile_explained.csv")
    assert list(explained.columns) == ["dataset", "config", "tokenizer", "profile", "steps", "of"]
    growth = pd.read_csv(out / "beyond_growth.csv")
    assert sorted(growth[growth["config"] == "xgrammar"]["length"]) == [3, 6, 9, 12]
    assert growth["complete"].all()
    assert (out / "figures" / "ambiguity_growth.png").exists() and (out / "figures" / "ambiguity_growth.pdf").exists()
    dis = pd.read_csv(out / "beyond_disagreements.csv.gz")
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
    assert loglog_slope(n, [x ** 2 for x in n]) == pytest.approx(2.0)
    assert loglog_slope(n, [3 * x for x in n]) == pytest.approx(1.0)
    assert pd.isna(loglog_slope([1, 2], [1, 2]))


def audit_row(sample_id, step, prefix, profile="lexing=longest_match", lang=((), ()), prof=((), ())):
    """An ``audit.parquet`` row as the audit writes it: false allows / blocks against the language (``lang``) and
    against the declared profile (``prof``), each a pair of example lists."""
    (fa, fb), (pa, pb) = lang, prof
    return {"engine": "llguidance", "config": "llguidance", "sample_id": sample_id, "step": step, "prefix": prefix,
            "profile": profile, "n_engine": 10, "n_reference": 10, "n_profile": 10,
            "agree": not fa and not fb, "agree_language": not fa and not fb, "agree_profile": not pa and not pb,
            "n_false_allow": len(fa), "n_false_block": len(fb), "n_false_allow_profile": len(pa),
            "n_false_block_profile": len(pb), "false_allow_examples": list(fa), "false_block_examples": list(fb),
            "false_allow_examples_profile": list(pa), "false_block_examples_profile": list(pb)}


def test_refusals_the_declared_profile_explains_are_not_disagreements(tmp_path):
    """A rejected sample whose refused step agrees with the declared profile is left out; one that does not is
    listed with its audit row's examples against the profile; an audited step that agrees with the profile but
    not with the language is no disagreement."""
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
    pd.DataFrame([audit_row("s000", 1, "[", lang=((), ["1"])),                      # the profile's refusal
                  audit_row("s001", 1, "[", lang=((), ["2"]), prof=((), ["2"])),    # unexplained refusal
                  audit_row("s001", 0, "", lang=(["x"], ()))]                       # explained, not refused
                 ).to_parquet(cell / "audit.parquet")
    dis = beyond.disagreements([tmp_path])
    assert list(dis["sample_id"]) == ["s001"] and dis["kind"].iloc[0] == "rejected"
    assert dis["prefix"].iloc[0] == "[" and dis["token"].iloc[0] == "2"
    assert dis["n_false_block"].iloc[0] == 1 and list(dis["false_block"].iloc[0]) == ["2"]
    assert dis["profile"].iloc[0] == "lexing=longest_match"


def _report_cells(root):
    """Two hand-made cells: one audited with declared profiles (a step that agrees exactly, one the profile
    explains, two that disagree with the profile), and one audited before profiles existed (old columns)."""
    from test_figures import write_cell

    new = write_cell(root, "llguidance", "llguidance", "spider", n_samples=2)
    pd.DataFrame([
        audit_row("spider-0000", 0, ""),
        audit_row("spider-0000", 3, "SELECT a", lang=((), [" ı"])),
        audit_row("spider-0000", 5, "SELECT a FROM", lang=(["<EOS>"], ()), prof=(["<EOS>"], ())),
        audit_row("spider-0001", 2, "SELECT | `x`\n", lang=((), ["\\xc4", "b"]),
                  prof=(["zz"], ["\\xc4", "b", "c", "d", "e"])),
    ]).assign(dataset="spider", tokenizer="qwen3").to_parquet(new / "audit.parquet")
    old = write_cell(root, "xgrammar", "xgrammar", "spider", n_samples=2, seed=1)
    pd.DataFrame([{"engine": "xgrammar", "config": "xgrammar", "dataset": "spider", "tokenizer": "qwen3",
                   "sample_id": "spider-0000", "step": s, "prefix": "SELECT", "agree_modulo_documented": True,
                   "documented_causes": "", "n_engine": 5, "n_reference": 5, "n_false_allow": 0,
                   "n_false_block": int(s == 1), "agree": s != 1, "false_allow_examples": [],
                   "false_block_examples": ["q"] if s == 1 else []} for s in range(3)]
                 ).to_parquet(old / "audit.parquet")
    return new, old


def test_cell_stats_count_language_and_profile_agreement(tmp_path):
    from gcdbench.experiments.report import cell_stats, cell_summary, collect, details

    new, old = _report_cells(tmp_path)
    c = cell_stats(new)
    assert (c["audit_steps"], c["audit_agree_language"], c["audit_agree_profile"], c["audit_explained_by_profile"],
            c["audit_false_allow_profile"], c["audit_false_block_profile"]) == (4, 1, 2, 1, 2, 1)
    assert c["audit_profile"] == "lexing=longest_match"
    assert "1/4 steps agree exactly with the harness's language, 2/4 with the declared profile " \
           "(lexing=longest_match)" in cell_summary(new)
    o = cell_stats(old)   # audited before profiles: the old count only
    assert o["audit_agree"] == 2 and "audit_agree_language" not in o and "audit_profile" not in o
    assert "2/3 steps agree exactly with the reference (audit stored before declared profiles" in cell_summary(old)
    cols = list(details(collect(tmp_path)).columns)
    assert cols[cols.index("audit_steps"):cols.index("peak_rss_compile_mb")] == [
        "audit_steps", "audit_profile", "audit_agree", "audit_agree_language", "audit_agree_profile",
        "audit_explained_by_profile", "audit_false_allow_profile", "audit_false_block_profile"]
    explained = beyond.profile_explained(collect(tmp_path))   # the old cell has no such count
    assert explained.to_dict("records") == [{"dataset": "spider", "config": "llguidance", "tokenizer": "qwen3",
                                             "profile": "lexing=longest_match", "steps": 1, "of": 4}]
    only_new = details(collect(tmp_path / "spider" / "qwen3" / "llguidance"))
    assert "audit_agree" not in only_new.columns   # the same number as audit_agree_language there
    assert only_new[["audit_agree_language", "audit_agree_profile"]].iloc[0].tolist() == [1, 2]


def test_report_lists_each_disagreement_with_the_declared_profile(tmp_path):
    """The Disagreements section: a summary row per cell, every step that differs from the declared profile with
    its examples, nothing for steps that agree with it; an old-format cell is reported, not a crash."""
    from gcdbench.experiments.report import write_report

    runs = tmp_path / "runs"
    _report_cells(runs)
    out = tmp_path / "report"
    write_report(runs, out)
    readme = (out / "README.md").read_text()
    section = readme[readme.index("## Disagreements"):readme.index("## Engine artifacts")]
    assert "llguidance × spider (qwen3)**: 1/4 steps agree exactly with the harness's language, 2/4 with the " \
           "declared profile (lexing=longest_match); 1 of the differences from the language are the declared " \
           "profile's. Listed: 2." in section
    lines = [ln for ln in section.splitlines() if ln.startswith("- `spider-")]
    assert lines == [
        "- `spider-0000` step 5: after `…SELECT a FROM`, false allows 1 (`<EOS>`); false blocks 0",
        "- `spider-0001` step 2: after `…SELECT \\| ˋxˋ\\n`, false allows 1 (`zz`); false blocks 5 "
        "(`\\xc4`, `b`, `c` …)",
    ]
    assert "step 3" not in section and "step 0" not in section   # explained by the profile / agrees exactly
    table = [ln for ln in section.splitlines() if ln.startswith("| ")]
    row = next(ln for ln in table if ln.startswith("| llguidance"))
    assert [x.strip() for x in row.strip("|").split("|")] == [
        "llguidance", "spider", "qwen3", "lexing=longest_match", "4", "1", "2", "1", "2", "0", ""]
    old = next(ln for ln in table if ln.startswith("| xgrammar"))
    assert "audit stored before declared profiles" in old
    dis = pd.read_csv(out / "disagreements.csv.gz")
    assert list(zip(dis["sample_id"], dis["step"])) == [("spider-0000", 5), ("spider-0001", 2)]
    assert json.loads(dis["false_block"].iloc[1]) == ["\\xc4", "b", "c", "d", "e"]
    cells = pd.read_csv(out / "cells.csv")
    assert "audit_agree" in cells.columns and "audit_agree_language" in cells.columns   # the old cell has no other


def test_disagreements_are_capped_per_cell_in_the_section():
    from gcdbench.experiments.report import DISAGREEMENT_COLUMNS, disagreement_section

    cells = pd.DataFrame([{"config": "c", "dataset": "d", "tokenizer": "t", "path": "p", "audit_steps": 30,
                           "audit_agree_language": 0, "audit_agree_profile": 5, "audit_explained_by_profile": 5,
                           "audit_profile": "language", "audit_agree": 0}])
    dis = pd.DataFrame([{"dataset": "d", "config": "c", "tokenizer": "t", "kind": "audit", "sample_id": f"s{i:02d}",
                         "step": 1, "prefix": "ab", "token": "", "n_false_allow": 0, "false_allow": [],
                         "n_false_block": 1, "false_block": ["q"], "message": "", "profile": "language",
                         "path": "p"} for i in range(25)], columns=DISAGREEMENT_COLUMNS)
    lines = disagreement_section(cells, dis, limit=10)
    listed = [ln for ln in lines if ln.startswith("- ")]
    assert len(listed) == 11 and listed[-1] == "- … and 15 more (`disagreements.csv.gz`)"
    assert listed[0] == "- `s00` step 1: after `…ab`, false allows 0; false blocks 1 (`q`)"
