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
    row = lay.pack(step=3, prefix_bytes=7, mask_us=1.5, commit_us=0.25, n_allowed=10, oracle_allowed=True, jit=2)
    cols = lay.columns([[float(v) for v in row]])
    assert cols == {"step": [3], "prefix_bytes": [7], "mask_us": [1.5], "commit_us": [0.25], "n_allowed": [10],
                    "oracle_allowed": [True], "jit": [2]}
    assert type(cols["step"][0]) is int and type(cols["oracle_allowed"][0]) is bool
    with pytest.raises(ValueError, match="not columns of steps"):
        schema.check_layout(schema.RowLayout("steps", {"step": int, "nope": int}))
    with pytest.raises(ValueError, match=r"types of \['mask_us'\] differ"):
        schema.check_layout(schema.RowLayout("steps", {"step": int, "mask_us": int}))


def test_the_worker_does_not_load_pyarrow():
    """The worker child imports its modules inside the compile's time limit: pyarrow and pandas stay out."""
    import subprocess
    import sys

    code = ("import sys, gcdbench.experiments.worker, gcdbench.experiments.worker_batch; "
            "print(sorted(m for m in ('pyarrow', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


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


# -- every writer's output against the declared schema --------------------------------------------------------
def _cfg(out, *overrides):
    from hydra import compose, initialize_config_dir

    from gcdbench.experiments.config import register

    register()
    with initialize_config_dir(config_dir=str(RESULTS.parent / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=[f"out_dir={out}", "progress=false", "tokenizer=bytes",
                                                        *overrides])


def _check_cell(cell: Path, tables: set[str]) -> dict:
    """Every parquet file of ``cell`` conforms and is stamped with the version; run.json holds declared keys."""
    have = {p.stem for p in cell.glob("*.parquet")}
    assert have == tables, have
    for t in have:
        got = pq.read_schema(cell / f"{t}.parquet")
        assert schema.problems(t, got) == [], (t, schema.problems(t, got))
        assert schema.file_version(got) == schema.SCHEMA_VERSION
        assert [f.name for f in got] == schema.columns(t, extra={c.name for c in schema.EXTRAS[t]} & set(got.names))
        assert got.field(0).metadata[b"doc"]   # each column carries its meaning
    raw = json.loads((cell / "run.json").read_text())
    assert raw["schema_version"] == schema.SCHEMA_VERSION
    assert set(raw) <= set(schema.RUN_KEYS), set(raw) - set(schema.RUN_KEYS)
    assert set(raw["identity"]) <= set(schema.Identity.__annotations__)
    for s in raw["sessions"]:
        assert set(s) <= set(schema.Session.__annotations__), set(s) - set(schema.Session.__annotations__)
    for i in raw["inits"]:
        assert set(i) <= set(schema.Init.__annotations__), set(i) - set(schema.Init.__annotations__)
    return schema.read_run(cell)


def test_every_writer_conforms_single_mode(tmp_path):
    """Single mode with an audit: steps, samples, audit and run.json as declared; prefix_tokens is the step."""
    words = tmp_path / "w.lark"
    words.write_text('start: WORD (" " WORD)*\nWORD: /[a-z]+/\n')
    texts = tmp_path / "w.txt"
    texts.write_text("abc de\nxy\n")
    from gcdbench.experiments.runner import run

    cell = run(_cfg(tmp_path, "engine=reference", "dataset=custom", f"dataset.grammar={words}",
                    f"dataset.samples={texts}", "samples=all", "audit.per_sample=2"))
    meta = _check_cell(cell, {"steps", "samples", "audit"})
    steps = schema.read_rows(cell / "steps.parquet")
    assert (steps["prefix_tokens"] == steps["step"]).all() and len(steps) == 7 + 3   # bytes and EOS
    assert meta["outcomes"] == {"ok": 2}


@pytest.mark.parametrize("steps", ["summary", "all"])
def test_every_writer_conforms_batch_mode(tmp_path, steps):
    words = tmp_path / "w.lark"
    words.write_text('start: WORD (" " WORD)*\nWORD: /[a-z]+/\n')
    texts = tmp_path / "w.txt"
    texts.write_text("abc de\nxy\nq\n")
    from gcdbench.experiments.runner import run

    cell = run(_cfg(tmp_path, "engine=reference", "dataset=custom", f"dataset.grammar={words}",
                    f"dataset.samples={texts}", "samples=all", "audit.per_sample=1", "batch.size=2",
                    f"batch.steps={steps}"))
    tables = {"samples", "audit", "batch_steps"} | ({"steps"} if steps == "all" else set())
    meta = _check_cell(cell, tables)
    assert meta["batch"]["steps_kept"] == steps
    bs = schema.read_rows(cell / "batch_steps.parquet")
    assert bs["masks"].sum() == schema.read_rows(cell / "samples.parquet")["n_steps"].sum() == 7 + 3 + 2


def test_a_bad_batch_steps_value_is_one_clear_error(tmp_path):
    from gcdbench.experiments.config import ConfigError
    from gcdbench.experiments.runner import run

    with pytest.raises(ConfigError, match="batch.steps='every': must be one of summary, all"):
        run(_cfg(tmp_path, "engine=reference", "dataset=sample", "batch.size=2", "batch.steps=every"))


def test_a_cell_of_an_unknown_version_is_refused_on_resume(tmp_path):
    """The runner reads a stored cell through the schema: another version stops the run with the one line."""
    from gcdbench.experiments.runner import run
    from gcdbench.experiments.store import CellDamaged

    words = tmp_path / "w.lark"
    words.write_text('start: WORD (" " WORD)*\nWORD: /[a-z]+/\n')
    texts = tmp_path / "w.txt"
    texts.write_text("abc\n")
    args = ("engine=reference", "dataset=custom", f"dataset.grammar={words}", f"dataset.samples={texts}",
            "audit.per_sample=0")
    cell = run(_cfg(tmp_path, *args))
    meta = json.loads((cell / "run.json").read_text())
    (cell / "run.json").write_text(json.dumps({**meta, "schema_version": 2}))
    with pytest.raises(CellDamaged, match=r"schema_version 2 is not one this gcdbench reads \(supported: 0, 1\)"):
        run(_cfg(tmp_path, *args))


def test_row_builds_declared_columns_only():
    cols = {n: 0 for n in schema.columns("audit") if n not in schema.KEY_COLUMNS}
    assert list(schema.row("audit", **cols)) == list(cols)
    assert list(schema.row("audit", **cols, agree_single_mode=True))[-1] == "agree_single_mode"
    with pytest.raises(ValueError, match=r"missing \['prefix'\], undeclared \['speed'\]"):
        schema.row("audit", **{k: v for k, v in cols.items() if k != "prefix"}, speed=1)


def test_version_0_batch_steps_get_masks_where_they_are_known(tmp_path):
    """A batch_steps file stored before ``masks``: every live sequence got its mask, except on a step where a fill
    failed (fallback 1), where how many did is not stored: null, never a guess."""
    old = pd.DataFrame({"session": [1, 1], "run": [1, 1], "batch_step": [0, 1], "size": [2, 2], "live": [2, 2],
                        "step_us": [4.0, 6.0], "commit_us": [1.0, 1.0], "fallback": [0, 1]})
    old.to_parquet(tmp_path / "batch_steps.parquet", index=False)
    got = schema.read_rows(tmp_path / "batch_steps.parquet")
    assert got["masks"].iloc[0] == 2 and pd.isna(got["masks"].iloc[1])
    back = schema.to_table("batch_steps", got)
    assert back.column("masks").to_pylist() == [2, None] and back.schema.field("masks").type == "int64"
    assert schema.summary_mask_us(got) is None   # not rebuilt where a count is unknown
    assert list(schema.summary_mask_us(got.iloc[:1])) == [2.0, 2.0]


def test_docs_result_files_section_is_generated_from_the_schema(tmp_path):
    """The site's Result files page (docs/reference/result-files.md, in mkdocs.yml's nav) holds the schema
    module's columns (regenerate: python -m gcdbench.experiments.schema --readme, whose default target it is)."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    from gcdbench.experiments import schema

    repo = Path(__file__).resolve().parents[1]
    page = repo / schema.DOCS_PAGE
    assert "reference/result-files.md" in (repo / "mkdocs.yml").read_text(), f"{schema.DOCS_PAGE} is not in the nav"
    text = page.read_text()
    m = re.search(r"<!-- result-schema:begin -->\n(.*?)<!-- result-schema:end -->", text, re.S)
    assert m, f"{schema.DOCS_PAGE} has no result-schema section"
    assert m.group(1) == schema.result_files_markdown(), f"{schema.DOCS_PAGE}'s result files differ from experiments/schema.py"
    # the command rewrites only the section, and its help names that page as the default target
    stale = tmp_path / "page.md"
    stale.write_text("a\n<!-- result-schema:begin -->\nold\n<!-- result-schema:end -->\nb\n")
    subprocess.run([sys.executable, "-m", "gcdbench.experiments.schema", "--readme", str(stale)], check=True)
    assert stale.read_text() == ("a\n<!-- result-schema:begin -->\n" + schema.result_files_markdown()
                                 + "<!-- result-schema:end -->\nb\n")
    helptext = subprocess.run([sys.executable, "-m", "gcdbench.experiments.schema", "--help"], check=True,
                              capture_output=True, text=True).stdout
    assert schema.DOCS_PAGE in " ".join(helptext.split())


def test_bench_files_are_written_and_read_through_the_schema(tmp_path):
    """A bench file carries schema_version and only declared keys; one stored before the schema (no version) reads
    as it is; another version is refused in one line naming the file."""
    import json

    import pytest

    from gcdbench.experiments import schema
    from gcdbench.experiments.benchfile import write_bench

    path = write_bench(tmp_path / "b.json", [{"x": 1}], toolchain={"nvvm": "test"})
    doc = schema.read_bench(path)
    assert doc["schema_version"] == schema.SCHEMA_VERSION and doc["records"] == [{"x": 1}]
    assert set(doc) <= set(schema.BENCH_KEYS) and doc["toolchain"] == {"nvvm": "test"}
    with pytest.raises(ValueError, match="not declared"):
        write_bench(tmp_path / "c.json", [], colour="red")
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"command": "python x", "records": [{"y": 2}]}))
    assert schema.read_bench(old)["records"] == [{"y": 2}]
    old.write_text(json.dumps({"schema_version": 99, "records": []}))
    with pytest.raises(schema.SchemaVersionError, match="old.json: schema_version 99"):
        schema.read_bench(old)
