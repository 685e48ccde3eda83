"""The result schema (experiments/schema.py): versions, migration, and stored files against the declared columns."""
import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from gcdbench.experiments import schema

RESULTS = Path(__file__).resolve().parents[1] / "results"


def test_run_json_without_version_is_version_0_and_migrates(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"engine": "xgrammar", "config": "xgrammar", "dataset": "spider",
                                                         "tokenizer": "qwen3", "n_rows": 3, "outcomes": {"ok": 3}}))
    rec = schema.read_run(tmp_path)   # a cell folder or the file
    assert rec["schema_version"] == schema.SCHEMA_VERSION
    assert rec["engine"] == "xgrammar" and rec["n_rows"] == 3 and rec["outcomes"] == {"ok": 3}


def test_run_json_of_an_unknown_version_is_one_clear_line(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"schema_version": 99, "engine": "xgrammar"}))
    with pytest.raises(schema.SchemaVersionError) as err:
        schema.read_run(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and "99" in msg and "0, 1" in msg


def test_run_json_without_the_cell_key_is_not_a_run_json(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"engine": "xgrammar"}))
    with pytest.raises(ValueError, match="not a gcdbench run.json .no config, dataset, tokenizer"):
        schema.read_run(tmp_path)


def test_parquet_of_an_unknown_version_is_refused(tmp_path):
    df = pd.DataFrame({"session": [1], "run": [1], "batch_step": [0], "size": [2], "live": [2], "step_us": [3.0],
                       "commit_us": [1.0], "fallback": [0], "masks": [2]})
    table = schema.to_table("batch_steps", df)
    table = table.replace_schema_metadata({schema.PARQUET_VERSION_KEY: b"7"})
    pq.write_table(table, tmp_path / "batch_steps.parquet")
    with pytest.raises(schema.SchemaVersionError, match="schema_version 7"):
        schema.read_rows(tmp_path / "batch_steps.parquet")


def test_new_run_refuses_undeclared_keys():
    assert schema.new_run(engine="x")["schema_version"] == schema.SCHEMA_VERSION
    with pytest.raises(ValueError, match="not declared"):
        schema.new_run(engine="x", speed=3)


def test_to_table_refuses_undeclared_and_missing_columns():
    with pytest.raises(ValueError, match=r"missing \[.*'mask_us'"):
        schema.to_table("steps", pd.DataFrame({"step": [0]}))
    good = {c: [0] for c in schema.columns("batch_steps")}
    with pytest.raises(ValueError, match=r"undeclared \['oops'\]"):
        schema.to_table("batch_steps", pd.DataFrame({**good, "oops": [1]}))


def test_row_layouts_round_trip_by_name():
    lay = schema.WORKER_STEP
    row = lay.pack(step=3, prefix_bytes=7, mask_us=1.5, commit_us=0.25, n_allowed=10, oracle_allowed=True)
    cols = lay.columns([[float(v) for v in row]])
    assert cols == {"step": [3], "prefix_bytes": [7], "mask_us": [1.5], "commit_us": [0.25], "n_allowed": [10],
                    "oracle_allowed": [True]}
    assert type(cols["step"][0]) is int and type(cols["oracle_allowed"][0]) is bool
    with pytest.raises(ValueError, match="not columns of steps"):
        schema.RowLayout("steps", ("step", "nope"))


def test_problems_names_a_wrong_type():
    import pyarrow as pa

    bad = pa.schema([pa.field(c.name, pa.string() if c.name == "live" else c.type)
                     for c in schema.TABLES["batch_steps"]])
    assert schema.problems("batch_steps", bad) == ["column live is string, declared int64"]


@pytest.mark.skipif(not RESULTS.is_dir(), reason="no stored results in this checkout")
def test_stored_results_conform_and_read():
    """Every stored result file (version 0) conforms to the declared schema and reads through it."""
    checked = 0
    for table in schema.TABLES:
        for f in sorted(RESULTS.rglob(f"{table}.parquet")):
            assert schema.problems(table, pq.read_schema(f)) == [], f
            checked += 1
    runs = sorted(RESULTS.rglob("run.json"))
    for f in runs[:50]:
        rec = schema.read_run(f)
        assert set(rec) <= set(schema.RUN_KEYS), (f, set(rec) - set(schema.RUN_KEYS))
    assert checked and runs


def test_result_files_markdown_lists_every_column():
    md = schema.result_files_markdown()
    for table in schema.TABLES:
        for name in schema.columns(table, extra=True):
            assert f"| `{name}` |" in md
    for key in schema.RUN_KEYS:
        assert f"| `{key}` | " in md
    assert "| `schema_version` | this module's SCHEMA_VERSION" in md
