"""dataset=maskbench end to end on a tiny MaskBench file the tests write: one cell per engine and kind of instance
(every schema's grammar compiled in turn in one worker), then the report's MaskBench section from the cells."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from gcdbench.experiments.config import register
from gcdbench.experiments.runner import run
from test_maskbench_loader import RECORDS

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def root(tmp_path):
    (tmp_path / "data" / "maskbench").mkdir(parents=True)
    with gzip.open(tmp_path / "data" / "maskbench" / "maskbench.jsonl.gz", "wt", encoding="utf-8") as f:
        for r in RECORDS:
            f.write(json.dumps(r) + "\n")
    return tmp_path / "data"


def cell(tmp_path, root, *overrides):
    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            f"out_dir={tmp_path / 'runs'}", "progress=false", "tokenizer=bytes", "samples=all", "audit.per_sample=2",
            f"data_root={root}", "dataset=maskbench", "dataset.count=0", *overrides])
    return run(cfg)


def test_maskbench_cells_and_their_section(tmp_path, root):
    valid = cell(tmp_path, root, "engine=psc")
    assert valid.parts[-3] == "maskbench"
    samples = pd.read_parquet(valid / "samples.parquet")
    got = dict(zip(samples["sample_id"], samples["outcome"]))
    # Github_easy---o3 has no instance (no group); every converted schema's valid instances pass
    assert got == {"BFCL_java_0#v0": "ok", "Github_easy---o1#v0": "ok", "Github_easy---o2#v0": "ok",
                   "Github_easy---o2#v1": "ok", "Kubernetes---kb_1#v0": "ok", "Kubernetes---kb_2#v0": "ok"}
    invalid = cell(tmp_path, root, "engine=psc", "dataset.kind=invalid")
    assert invalid.parts[-3] == "maskbench_invalid"
    got = dict(zip(*pd.read_parquet(invalid / "samples.parquet")[["sample_id", "outcome"]].T.values))
    assert set(got.values()) == {"rejected"}
    native = cell(tmp_path, root, "engine=xgrammar_schema")
    audit = pd.read_parquet(native / "audit.parquet")
    assert len(audit) and audit["agree_language"].all()   # XGrammar's own compiler, audited against the conversion

    from gcdbench.experiments.report.build import write_report

    (tmp_path / "t1").mkdir()
    cell(tmp_path / "t1", root, "engine=reference", "dataset.schema=Kubernetes---kb_2")   # any Table 1 cell
    write_report(tmp_path / "t1" / "runs", tmp_path / "report", tokenizer="bytes", maskbench=tmp_path / "runs")
    table = pd.read_csv(tmp_path / "report" / "maskbench.csv").set_index("engine")
    assert table.loc["psc", "schemas"] == 5 and table.loc["psc", "passing"] == 5
    assert table.loc["psc", "invalid accepted"] == 0 and table.loc["psc", "valid rejected"] == 0
    assert table.loc["xgrammar_schema", "compile errors"] == 0 and "TBM p99.99" in table.columns
    text = (tmp_path / "report" / "README.md").read_text()
    assert "## MaskBench: JSON Schemas" in text and "maskbench_tbm_cdf" in text
    header = next(ln for ln in text.splitlines() if "audited steps" in ln and ln.startswith("|"))
    assert "Every cell at commit `" in text and [c.strip() for c in header.strip("|").split("|")][:5] == [
        "engine", "audited steps", "equal", "looser", "stricter"]

    # seed 003's JSON column from the same cells: the coverage file beside the runs folder leaves out a schema whose
    # converted language is not exact (its 2 valid instances), and the note counts the schemas it does not list
    (tmp_path / "coverage.json").write_text(json.dumps({
        "schemas_columns": ["id", "outcome", "valid_in", "valid_out", "invalid_out", "invalid_in"],
        "schemas": [["Github_easy---o2", "converted", 2, 0, 0, 1], ["BFCL_java_0", "converted", 1, 0, 1, 0]]}))
    write_report(tmp_path / "t1" / "runs", tmp_path / "report3", tokenizer="bytes", maskbench=tmp_path / "runs",
                 seeds=tmp_path / "t1" / "runs")
    t2 = pd.read_csv(tmp_path / "report3" / "seed003_table2.csv").set_index("Method")
    n_invalid = int(((samples_inv := pd.read_parquet(invalid / "samples.parquet"))["sample_id"].str
                     .split("#").str[0] != "Github_easy---o2").sum())
    assert t2.loc["psc", "JSON Schemas"].startswith(f"100.0% ({4 + n_invalid}/{4 + n_invalid}) [")
    notes = (tmp_path / "report3" / "README.md").read_text()
    assert "psc × JSON Schemas (bytes): 1 of 5 schemas left out (converted language not exact)" in notes
    assert "psc × JSON Schemas (bytes): 3 schemas not in the coverage file, kept" in notes
    assert len(samples_inv) > n_invalid

    # re-stored (per-mask rows replaced by a digest): counts, TTFM, avg, max and the tail unchanged
    import numpy as np

    from gcdbench.experiments.report.restore import restore

    masks = {f.parent.name: np.sort(pd.read_parquet(f)["mask_us"].to_numpy())
             for f in (tmp_path / "runs" / "maskbench").rglob("steps.parquet")}   # the valid cells' masks
    restore(tmp_path / "runs")
    assert not list((tmp_path / "runs").rglob("steps.parquet"))
    write_report(tmp_path / "t1" / "runs", tmp_path / "report2", tokenizer="bytes", maskbench=tmp_path / "runs")
    again = pd.read_csv(tmp_path / "report2" / "maskbench.csv").set_index("engine")
    same = [c for c in table.columns if not c.startswith("TBM p")]   # counts, TTFM, TBM avg and max
    pd.testing.assert_frame_equal(again[same], table[same], check_exact=False, rtol=1e-4)
    for config, us in masks.items():   # percentiles: nearest rank, within a 1% bin (exact in the slowest 1%)
        for q in (25, 50, 99, 99.99):
            want = us[int(np.ceil(q / 100 * us.size)) - 1]
            assert abs(again.loc[config, f"TBM p{q:g}"] / want - 1) < 0.011, (config, q)
    assert "re-stored cells" in (tmp_path / "report2" / "README.md").read_text()


def test_times_digest_percentiles():
    """A re-stored cell's digest: mean, max and the slowest 1% exact; lower percentiles within one 1% bin of the
    exact nearest rank; digests of two cells merge."""
    import numpy as np

    from gcdbench.experiments.report.masktimes import Times, mask_digest

    rng = np.random.default_rng(0)
    a, b = rng.lognormal(3, 1.5, 20_000), rng.lognormal(2, 1, 5_000)
    both = Times.from_digest(mask_digest(a)) + Times.from_digest(mask_digest(b))
    exact = np.concatenate([a, b])
    assert both.n == exact.size and not both.exact
    assert np.isclose(both.mean(), exact.mean()) and both.max() == round(exact.max(), 3)
    srt = np.sort(exact)
    for q in (25, 50, 90, 99.9, 99.99):
        want = srt[int(np.ceil(q / 100 * srt.size)) - 1]
        assert abs(both.percentile(q) / want - 1) < 0.011, q
    assert both.cdf()[1][-1] == 1.0


def test_audit_differences_and_provenance_of_the_cells():
    """The section's difference table counts looser and stricter steps with their commonest tokens; cells of two
    commits or machines are named, never reported as one run."""
    from collections import Counter

    from gcdbench.experiments.report.maskbench import audit_differences, difference_rows, provenance_line

    audit = pd.DataFrame({"n_false_allow": [0, 2, 0], "n_false_block": [1, 0, 0],
                          "false_allow_examples": [[], ["a", "b"], []], "false_block_examples": [["x"], [], []]})
    got = audit_differences(audit)
    assert (got["audit_looser"], got["audit_stricter"]) == (1, 1) and got["looser_examples"] == Counter("ab")
    base = {"config": "e", "kind": "valid", "audit_steps": 3, "audit_language": 1, "commit": "a" * 40,
            "machine": "cpu (2 cores, 8 GB)", **got}
    rows = difference_rows([(base, None, None), ({**base, "kind": "invalid"}, None, None)])
    assert rows.to_dict("records") == [{"engine": "e", "audited steps": 6, "equal": 2, "looser": 2, "stricter": 2,
                                        "allowed, language refuses (steps)": "`a` 2, `b` 2",
                                        "blocked, language allows (steps)": "`x` 2"}]
    assert provenance_line([(base, None, None)]) == "Every cell at commit `aaaaaaa` on cpu (2 cores, 8 GB)."
    mixed = provenance_line([(base, None, None), ({**base, "commit": "b" * 40, "kind": "invalid"}, None, None)])
    assert mixed.startswith("**Cells of more than one commit or machine**") and "`bbbbbbb` on cpu" in mixed
    shards = provenance_line([(base, None, None), (base, None, None), ({**base, "machine": "other"}, None, None)])
    assert "`aaaaaaa` on cpu (2 cores, 8 GB): e valid (2 cells);" in shards and shards.endswith("other: e valid.")


def test_category_rows_add_a_sharded_config_together():
    """A config run as shards (one cell each) is one column of the per-category table: its cells' counts added."""
    from gcdbench.experiments.report.maskbench import category_pivot, category_rows

    def schemas(cat, n, errors, ok):
        return pd.DataFrame({"category": [cat] * n, "compile_error": [i < errors for i in range(n)],
                             "instances": [1] * n, "ok": [1] * ok + [0] * (n - ok), "rejected": [0] * n,
                             "no_eos": [0] * n, "crash": [0] * n, "oom": [0] * n, "timeout": [0] * n,
                             "engine_error": [0] * n})

    info = {"config": "e", "kind": "valid"}
    cells = [(info, schemas("A", 2, 0, 2), None), (info, schemas("A", 3, 1, 1), None),
             (info, schemas("B", 1, 0, 1), None), ({**info, "kind": "invalid"}, schemas("A", 4, 0, 0), None)]
    cats = category_rows(cells)
    got = {(r["kind"], r["category"]): (r["schemas"], r["compile errors"], r["ok"]) for r in cats.to_dict("records")}
    assert got == {("valid", "A"): (5, 1, 3), ("valid", "B"): (1, 0, 1), ("invalid", "A"): (4, 0, 0)}
    pivot = category_pivot(cats, pd.DataFrame({"engine": ["e"]}))
    assert pivot.set_index("category")["e"].to_dict() == {"A": "4/5 · 3/5", "B": "1/1 · 1/1"}
