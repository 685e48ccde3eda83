"""Re-stored results (experiments/report/restore.py): the report reads a packed folder with the same numbers as the
cell folders it was made from; what is dropped and what is kept; provenance unchanged; a cell run again wins."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hydra import compose, initialize_config_dir

from gcdbench.experiments import schema
from gcdbench.experiments.config import register
from gcdbench.experiments.report import batch_stats, collect_batch, write_report
from gcdbench.experiments.report.collect import find_runs, mask_summary, read_cell_file, read_run, sample_step_summary
from gcdbench.experiments.report.packed import PACK_DIR
from gcdbench.experiments.report.restore import compact_json, main as restore_main, restore
from gcdbench.experiments.runner import run

REPO = Path(__file__).resolve().parents[1]
GRAMMARS = REPO / "tests" / "grammars"
DATA = ["dataset=custom", f"dataset.grammar={GRAMMARS / 'tiny_sql.lark'}",
        f"dataset.samples={GRAMMARS / 'tiny_sql.txt'}", "audit.per_sample=2"]


def _run(out: Path, *overrides) -> Path:
    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"out_dir={out}", "progress=false", "tokenizer=bytes",
                                                       *DATA, *overrides])
    return run(cfg)


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    """A results folder as the runner leaves it: two single-mode cells, batch cells with every mask kept and with
    per-step summaries only, and a Hydra copy."""
    root = tmp_path_factory.mktemp("stored") / "runs"
    _run(root, "engine=xgrammar")
    _run(root, "engine=llguidance")
    _run(root, "engine=xgrammar", "batch.size=2", "batch.steps=all")
    _run(root, "engine=llguidance", "batch.size=3", "batch.steps=summary")
    (root / ".hydra").mkdir()
    (root / ".hydra" / "multirun.yaml").write_text("hydra: {}\n")
    return root


def _report(root: Path, out: Path) -> dict[str, str]:
    write_report(root, out, batch=(root,))
    def text(p: Path) -> str:
        return (gzip.decompress(p.read_bytes()).decode() if p.suffix == ".gz" else p.read_text())

    return {p.name: text(p).replace(str(out), "OUT") for p in sorted(out.glob("*.*"))}


@pytest.mark.slow
def test_report_from_restored_cells_is_unchanged(stored, tmp_path):
    before = _report(stored, tmp_path / "before")
    copy = tmp_path / "copy" / "runs"
    shutil.copytree(stored, copy)
    done = restore(copy)
    assert done["cells"] == 4 and done["packed"] == 4 and not (copy / ".hydra").exists()
    left = [p for p in copy.rglob("*") if p.name == "run.json" or p.suffix == ".parquet" and PACK_DIR not in p.parts]
    assert not left   # every cell went into the pack
    assert (copy / PACK_DIR / "cells.parquet").exists()
    for table in ("samples", "audit", "batch_steps"):   # a pack's rows: the declared columns and the cell's name
        f = copy / PACK_DIR / f"cells_{table}.parquet"
        assert schema.problems(table, pq.read_schema(f).remove(0)) == [] and pq.read_schema(f).names[0] == "cell"
    for f in (copy / PACK_DIR).glob("*.parquet"):   # every pack file carries the schema version it was written at
        assert schema.file_version(pq.read_schema(f)) == schema.SCHEMA_VERSION, f
    after = _report(copy, tmp_path / "after")
    assert set(before) == set(after) and {"README.md", "cells.csv", "batch.csv", "table1.csv"} <= set(after)
    for name in before:   # the same text, up to the folder the cells are read from
        assert after[name].replace(str(copy), "ROOT") == before[name].replace(str(stored), "ROOT"), name


def test_a_multirun_hydra_folder_holding_its_jobs_is_removed_once(stored, tmp_path):
    """A sweep's ``.hydra`` holds each job's ``.hydra``: the outer one goes, and the inner ones with it (removing
    them again crashed the re-store after the cells had moved into the pack)."""
    copy = tmp_path / "copy" / "runs"
    shutil.copytree(stored, copy)
    (copy / ".hydra" / "multirun_x" / "0" / ".hydra").mkdir(parents=True)
    done = restore(copy)
    assert done["hydra_removed"] == [str(copy / ".hydra")] and not (copy / ".hydra").exists()
    assert (copy / PACK_DIR / "cells.parquet").exists()


def test_keep_masks_packs_every_mask_and_reads_it_back(stored, tmp_path):
    """``--keep-masks``: the single-mode cells' per-mask rows go into the pack (``cells_steps.parquet``) and read
    back as the folders gave them, so the intervals (stats.read_configs) are the same; batch cells keep their
    per-step rows as without it."""
    from gcdbench.experiments.report import stats
    from gcdbench.experiments.report.collect import read_cell_file

    copy = tmp_path / "copy" / "runs"
    shutil.copytree(stored, copy)
    single = [d for d in find_runs(copy) if not (read_run(d).get("identity") or {}).get("batch")]
    assert len(single) == 2
    before = {d.relative_to(copy): read_cell_file(d, "steps.parquet") for d in single}
    configs = stats.read_configs(copy)
    assert restore_main([str(copy), "--keep-masks"]) is None
    assert (copy / PACK_DIR / "cells_steps.parquet").exists() and not (copy / single[0] / "run.json").exists()
    for rel, df in before.items():
        got = read_cell_file(copy / rel, "steps.parquet")
        pd.testing.assert_frame_equal(got.reset_index(drop=True), df.reset_index(drop=True), check_dtype=False)
        assert "steps.parquet" not in read_run(copy / rel)["restored"]["dropped"]
    again = stats.read_configs(copy)
    assert set(again) == set(configs)
    for key, cfg in configs.items():
        assert (again[key].us == cfg.us).all() and again[key].sample_ids == cfg.sample_ids


@pytest.mark.slow
def test_restored_cell_keeps_provenance_and_says_it_was_restored(stored, tmp_path):
    copy = tmp_path / "runs"
    shutil.copytree(stored, copy)
    originals = {d.relative_to(stored).as_posix(): read_run(d) for d in find_runs(stored)}
    restore(copy, stamp={"when": "2026-11-26 12:00:00 +0000", "by": "test", "commit": "c0ffee"})
    cells = find_runs(copy)
    assert sorted(d.relative_to(copy).as_posix() for d in cells) == sorted(originals)
    for d in cells:
        was, now = originals[d.relative_to(copy).as_posix()], read_run(d)
        r = now.pop("restored")
        assert r["when"] == "2026-11-26 12:00:00 +0000" and r["commit"] == "c0ffee" and r["from"] == str(d)
        assert now["sessions"] == was["sessions"] and now["git_commit"] == was["git_commit"]
        assert now["machine"] == was["machine"] and now["provenance"] == was["provenance"]
        assert "sample_ids" not in now["identity"] and now["identity"]["samples_digest"] == \
            was["identity"]["samples_digest"]
        assert r["dropped"] == ["identity.sample_ids"] + (["steps.parquet"] if "mask_summary" in r else [])
        # the mask summary kept equals the one computed from every mask before
        if "mask_summary" in r:
            assert r["mask_summary"] == mask_summary(stored / d.relative_to(copy))
        if now.get("batch"):   # the step statistics at re-store time equal those read from the pack
            kept = {k: v for k, v in batch_stats(d).items() if k in r["batch_step_summary"]}
            assert kept == r["batch_step_summary"]
    single = copy / "custom_tiny_sql" / "bytes" / "xgrammar"
    got = sample_step_summary(single)
    want = sample_step_summary(stored / "custom_tiny_sql" / "bytes" / "xgrammar")
    pd.testing.assert_frame_equal(got, want)


@pytest.mark.slow
def test_summary_mode_batch_cell_rebuilds_its_mask_times(stored):
    """A batch cell that kept only its per-step rows (``batch.steps=summary``) gets the same mask statistics as
    every mask would give: each step gave ``masks`` masks of ``step_us / live``."""
    full = stored / "custom_tiny_sql" / "bytes" / "xgrammar__batch-2"
    steps = pd.read_parquet(full / "steps.parquet")
    bs = pd.read_parquet(full / "batch_steps.parquet")
    want = mask_summary(full)
    assert want["mask_n"] == len(steps)
    tmp = full.parent / "xgrammar__batch-2_summary"
    shutil.copytree(full, tmp)
    try:
        (tmp / "steps.parquet").unlink()
        bs.assign(masks=bs["live"]).to_parquet(tmp / "batch_steps.parquet", index=False)
        got = mask_summary(tmp)
        assert got["mask_n"] == want["mask_n"] and got["mask_max_us"] == want["mask_max_us"]
        assert got == pytest.approx(want)
    finally:
        shutil.rmtree(tmp)
    summary_cell = stored / "custom_tiny_sql" / "bytes" / "llguidance__batch-3"
    assert not (summary_cell / "steps.parquet").exists()
    b = collect_batch([stored]).set_index("path")
    assert b.loc[str(summary_cell), "mask_n"] == pd.read_parquet(summary_cell / "batch_steps.parquet")[
        "masks"].sum() > 0


@pytest.mark.slow
def test_a_cell_run_again_takes_the_packed_cells_place(stored, tmp_path):
    copy = tmp_path / "runs"
    shutil.copytree(stored, copy)
    restore(copy)
    again = _run(copy, "engine=xgrammar", "fresh=true")   # the runner writes a folder cell at the old path
    cells = find_runs(copy)
    assert cells.count(again) == 1 and (again / "steps.parquet").exists()
    assert "restored" not in read_run(again)
    # re-storing again packs the new folder cell in place of the old packed one
    restore(copy)
    assert not again.exists() and find_runs(copy) == cells
    assert "steps.parquet" in read_run(again)["restored"]["dropped"]


@pytest.mark.slow
def test_cells_with_and_without_a_repeat_column_pack_it_as_nullable_integers(stored, tmp_path):
    """A cell stored before rows carried their repeat (schema.ROW_REPEAT) packed with newer cells: the pack's
    column stays int64 as declared, read back as pandas' nullable Int64 (null for the older cell), not float."""
    copy = tmp_path / "runs"
    shutil.copytree(stored, copy)
    old = copy / "custom_tiny_sql" / "bytes" / "xgrammar"
    table = pq.read_table(old / "samples.parquet")
    assert table.column("repeat").to_pylist() == [0] * len(table)   # the runner's rows name their repeat
    table = table.select([c for c in table.column_names if c != "repeat"])   # as stored before the column
    pq.write_table(table.replace_schema_metadata({schema.PARQUET_VERSION_KEY: str(schema.SCHEMA_VERSION).encode()}),
                   old / "samples.parquet")
    restore(copy)
    pack = copy / PACK_DIR / "cells_samples.parquet"
    kept = pq.read_schema(pack)
    assert kept.field("repeat").type == pa.int64() and schema.problems("samples", kept.remove(0)) == []
    rows = pd.read_parquet(pack)
    assert str(rows["repeat"].dtype) == "Int64"
    mine = rows["cell"] == "custom_tiny_sql/bytes/xgrammar"
    assert mine.any() and (~mine).any()
    assert rows.loc[mine, "repeat"].isna().all() and (rows.loc[~mine, "repeat"] == 0).all()
    # what the report reads of each packed cell
    assert str(read_cell_file(old, "samples.parquet")["repeat"].dtype) == "Int64"
    newer = read_cell_file(copy / "custom_tiny_sql" / "bytes" / "llguidance", "samples.parquet")
    assert str(newer["repeat"].dtype) == "Int64" and newer["repeat"].tolist() == [0] * len(newer)


@pytest.mark.slow
def test_a_damaged_pack_skips_its_cells_with_a_warning(stored, tmp_path, capsys):
    from gcdbench.experiments.report import collect

    copy = tmp_path / "runs"
    shutil.copytree(stored, copy)
    restore(copy)
    (copy / PACK_DIR / "cells_samples.parquet").write_bytes(b"not parquet")
    assert collect(copy).empty
    err = capsys.readouterr().err
    assert err.count("cannot read samples.parquet of the re-stored cell") == 4 and "restore _restored/ from git" in err
    (copy / PACK_DIR / "cells.parquet").write_bytes(b"not parquet")
    assert find_runs(copy) == []
    assert f"cannot read {copy / PACK_DIR / 'cells.parquet'}" in capsys.readouterr().err


def test_compact_json_keeps_the_content(tmp_path):
    doc = {"records": [{"a": 1.5, "b": [1, 2, 3], "c": "é"}], "machine": {"cpu": "x"}}
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(doc, indent=1))
    got = compact_json(p)
    assert json.loads(p.read_text()) == doc and got["bytes_after"] < got["bytes_before"]


def test_compact_json_rounds_floats_and_says_so(tmp_path):
    doc = {"records": [{"us": 12.345678, "n": 3, "d": [0.000123456789, 2.0]}], "when": "x"}
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(doc))
    compact_json(p)
    got = json.loads(p.read_text())
    assert got["records"] == [{"us": 12.35, "n": 3, "d": [0.0001235, 2.0]}] and got["when"] == "x"
    assert got["restored"]["float_digits"] == 4 and "commit" in got["restored"]
    again = p.read_text()
    compact_json(p)   # rounding twice changes nothing, and the stamp is not renewed
    assert p.read_text() == again


def test_cli_refuses_what_it_cannot_restore(tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        restore_main([str(tmp_path / "missing")])
    assert err.value.code == 2 and "neither a folder of result cells nor a JSON file" in capsys.readouterr().err


def test_a_damaged_cell_stops_the_restore_and_is_named(tmp_path):
    cell = tmp_path / "runs" / "spider" / "qwen3" / "x"
    cell.mkdir(parents=True)
    (cell / "run.json").write_text("{not json")
    with pytest.raises(SystemExit, match=f"cannot read {cell}/run.json"):
        restore(tmp_path / "runs")
    assert (cell / "run.json").exists() and not (tmp_path / "runs" / PACK_DIR).exists()


def test_gzip_stores_a_bench_file_that_readers_still_find_by_its_name(tmp_path):
    doc = {"schema_version": 1, "records": [{"engine": "valiant", "mask_us": 12.5}], "command": "c"}
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(doc, indent=1))
    restore_main(["--gzip", str(p)])
    assert not p.exists() and (tmp_path / "bench.json.gz").exists()
    assert schema.stored_path(p) == tmp_path / "bench.json.gz"
    assert schema.read_bench(p)["records"] == doc["records"]
    with pytest.raises(FileNotFoundError):
        schema.read_bench(tmp_path / "other.json")
