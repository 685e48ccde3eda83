"""Re-store result folders in the slim form the repository keeps (at most 10 MB under ``results/``).

    python -m gcdbench.experiments.report.restore results/batch results/suite results/cliffs/runs \
        results/cliffs/bench.json
    python -m gcdbench.experiments.report.restore --keep-cells results/runs   # only Hydra's copies go
    python -m gcdbench.experiments.report.restore --gzip results/cliffs/bench.json   # then stored as bench.json.gz

Each folder's cells move into one pack, ``<folder>/_restored/`` (:mod:`.packed`), read by the report as before:

- per-mask rows (``steps.parquet``) are replaced by what the report computes from them: the cell's mask-time
  summary (``restored.mask_summary`` in its run record: count, mean, p50/p99/p99.9/max, computed exactly as
  :func:`.collect.mask_summary` does), a digest for any other percentile and the CDFs (``restored.mask_digest``,
  :func:`.masktimes.mask_digest`: the slowest 1% exactly, the rest in 1%-wide log bins; what the MaskBench section
  reads) and, for single-mode cells, the per-sample counts, means, maxima and first masks (``sample_steps``: what
  the suite's growth, the cliffs and the MaskBench sections read);
- batch cells keep their per-step summaries (``batch_steps``: one row per ``fill_masks`` call), not every mask;
- ``samples`` and ``audit`` rows are kept whole; ``run.json`` is kept less ``identity.sample_ids`` (its digest
  ``identity.samples_digest`` stays), with a ``restored`` record: when, by which commit of this tool, what was
  dropped. Sessions, commits and machines (the cell's provenance) are not changed;
- Hydra's copies of the configs (``.hydra/``, multirun.yaml, jobs.json) are removed: every cell's run.json
  already records its command and options.

A JSON file given (a bench file) is rewritten without indentation, each float to 4 significant digits (the
machine's run-to-run spread is 20-30%; the file records ``restored.float_digits``), the rest unchanged.
``--keep-cells`` removes only Hydra's copies, for folders whose every mask is still read (``results/runs``: the
figures and the notebook draw from it). ``--keep-masks`` packs the cells and keeps their per-mask rows too, in one
``cells_steps.parquet`` (a few bytes a mask where a cell folder's files cost about 60 KB a cell): the figures, the
intervals of repeated cells and ``gcdbench-compare`` read them as from the folders. A folder cell run again after re-storing takes the packed cell's place
(the report reads the folder). Re-storing a folder that already holds a pack adds its folder cells to the pack.
Re-store the folder the figures are drawn from (``--results``) only with ``--keep-masks``: figures need every
mask.
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
import time
from pathlib import Path

import pandas as pd

from gcdbench.experiments import schema
from gcdbench.experiments.provenance import git_commit
from gcdbench.experiments.report import packed
from gcdbench.experiments.report.collect import Unreadable, mask_summary, read_cell_file, read_run
from gcdbench.experiments.report.masktimes import batch_step_stats, mask_digest, summarize_sample_steps

ROW_NAMES = {"samples.parquet": "samples.parquet", "audit.parquet": "audit.parquet",
             "batch_steps.parquet": "batch_steps.parquet"}

#: optional integer columns that a pack's cells may hold or not (rows stored before the column have none): after the
#: cells' rows are put together they are pandas' nullable Int64 (null where a cell had no such column), so that the
#: pack file's column stays int64 as the schema declares it (a plain concat makes it float64 with NaN, or object)
NULLABLE_INT = (schema.ROW_REPEAT.name,)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The cells' rows of one file in one frame, :data:`NULLABLE_INT` columns as nullable Int64."""
    df = pd.concat(frames, ignore_index=True)
    for c in NULLABLE_INT:
        if c in df.columns:
            df[c] = df[c].astype("Int64")
    return df


def tool_commit() -> str:
    """The commit of this code (``-dirty`` when tracked files differ from it), or ``unknown`` (no git, or
    installed from a wheel: :func:`gcdbench.experiments.provenance.git_commit`)."""
    return git_commit() or "unknown"


def slim_run(meta: dict, run_dir: Path, steps: pd.DataFrame | None, batch_steps: pd.DataFrame | None,
             stamp: dict, keep_masks: bool = False) -> dict:
    """The run record a packed cell keeps: ``meta`` less the sample id list, plus the ``restored`` record."""
    meta = json.loads(json.dumps(meta))   # a deep copy
    dropped = []
    if "sample_ids" in (meta.get("identity") or {}):
        del meta["identity"]["sample_ids"]
        dropped.append("identity.sample_ids")
    restored = {**stamp, "from": str(run_dir)}
    if steps is not None:
        if not keep_masks:
            dropped.append("steps.parquet")
        restored["mask_summary"] = mask_summary(run_dir, steps=steps)
        if len(steps):
            restored["mask_digest"] = mask_digest(steps["mask_us"].to_numpy())
    if batch_steps is not None:   # kept whole; its statistics at re-store time, to check a later reading against
        restored["batch_step_summary"] = batch_step_stats(batch_steps)
    restored["dropped"] = dropped
    meta["restored"] = restored
    return meta


def _write(df: pd.DataFrame, path: Path) -> None:
    """A pack file: zstd, no statistics, dictionary encoding for text columns only (timings compress better
    plain), stamped with the schema version as every result file is (``schema.PARQUET_VERSION_KEY``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    text = [c for c in df.columns if df[c].dtype == object or pd.api.types.is_string_dtype(df[c])]
    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           schema.PARQUET_VERSION_KEY: str(schema.SCHEMA_VERSION).encode()})
    pq.write_table(table, path, compression="zstd", compression_level=19, write_statistics=False,
                   use_dictionary=text or False)


#: significant digits a re-stored JSON file keeps of each float (timings: run-to-run spread is 20-30% here)
FLOAT_DIGITS = 4


def round_floats(doc, digits: int = FLOAT_DIGITS):
    """``doc`` with every float rounded to ``digits`` significant digits (ints, strings, booleans unchanged)."""
    if isinstance(doc, float):
        return float(f"{doc:.{digits}g}")
    if isinstance(doc, list):
        return [round_floats(v, digits) for v in doc]
    if isinstance(doc, dict):
        return {k: round_floats(v, digits) for k, v in doc.items()}
    return doc


def compact_json(path: Path, digits: int | None = FLOAT_DIGITS, stamp: dict | None = None) -> dict:
    """Rewrite a JSON file without indentation, every float to ``digits`` significant digits (``None``: as it
    is); the rest of its content is unchanged. A rounded dict document records it under ``restored`` (the
    stamp, the digits), so a reader knows the last digits are gone."""
    before = path.read_text()
    doc = json.loads(before)
    out = doc if digits is None else round_floats(doc, digits)
    if digits is not None and isinstance(out, dict) and out != doc:
        out["restored"] = {**(stamp or new_stamp()), "float_digits": digits}
    after = json.dumps(out, ensure_ascii=False, separators=(",", ":"))
    assert json.loads(after) == out
    path.write_text(after + "\n")
    return {"file": str(path), "bytes_before": len(before.encode()), "bytes_after": len(after.encode()) + 1}


def gzip_file(path: Path) -> dict:
    """Replace ``path`` by ``path.gz`` (the same bytes, gzipped; the name says how to read it)."""
    gz = path.with_name(path.name + ".gz")
    data = path.read_bytes()
    gz.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    path.unlink()
    return {"gzipped": str(gz), "bytes_gzipped": gz.stat().st_size}


def remove_hydra(root: Path, dry_run: bool = False) -> dict:
    """Remove Hydra's copies of the configs (``.hydra`` folders) under ``root``; every cell keeps its run.json."""
    hydra = _outermost(sorted(p for p in Path(root).rglob(".hydra") if p.is_dir()))
    if not dry_run:
        for p in hydra:
            shutil.rmtree(p)
    return {"root": str(root), "hydra_removed": [str(p) for p in hydra]}


def _outermost(paths: list[Path]) -> list[Path]:
    """``paths`` less those inside another of them (a multirun's ``.hydra`` holds its jobs' ``.hydra`` folders:
    removing the outer one removes them)."""
    return [p for p in paths if not any(q in p.parents for q in paths)]


def _folder_cells(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("run.json")
                  if ".hydra" not in p.parts and packed.PACK_DIR not in p.parts)


def new_stamp() -> dict:
    """What each re-stored cell records of its re-storing: when (UTC), by what, at which commit of this code."""
    return {"when": time.strftime("%Y-%m-%d %H:%M:%S +0000", time.gmtime()),
            "by": "gcdbench.experiments.report.restore", "commit": tool_commit()}


def restore(root: Path, dry_run: bool = False, stamp: dict | None = None, keep_masks: bool = False) -> dict:
    """Pack every folder cell under ``root`` (see the module's docstring); returns what was done. ``keep_masks``:
    single-mode cells keep their per-mask rows (``steps.parquet``, every row as stored, ``jit`` ones included)."""
    root = Path(root)
    stamp = stamp or new_stamp()
    index, rows = [], {name: [] for name in (*ROW_NAMES, packed.SAMPLE_STEPS, packed.STEPS)}
    old = packed.pack_at(root)
    if old is not None:   # cells packed before: kept as they are, unless a folder cell replaces them
        for cell, run in old.runs.items():
            index.append({"cell": cell, "run_json": run, "files": json.dumps(sorted(old.files[cell]))})
            for name in rows:
                got = old.read(cell, name) if name in old.files[cell] else None
                if got is not None:
                    rows[name].append(got.assign(cell=cell))
    cells = _folder_cells(root)
    for d in cells:
        rel = d.relative_to(root).as_posix()
        try:
            meta = read_run(d)
            frames = {name: read_cell_file(d, name) for name in ROW_NAMES}
            steps = read_cell_file(d, "steps.parquet")
        except Unreadable as err:
            raise SystemExit(f"restore: {err}; repair or remove the cell, then re-store {root}") from None
        is_batch = bool((meta.get("identity") or {}).get("batch"))
        files = [name for name, df in frames.items() if df is not None]
        if steps is not None and not is_batch:
            frames[packed.SAMPLE_STEPS] = summarize_sample_steps(steps)
            files.append(packed.SAMPLE_STEPS)
            if keep_masks:   # as stored: the reader leaves out the masks numba compiled in, as for a folder
                frames[packed.STEPS] = schema.read_rows(d / packed.STEPS)
                files.append(packed.STEPS)
        index = [r for r in index if r["cell"] != rel]
        for name in rows:
            rows[name] = [f for f in rows[name] if f["cell"].iloc[0] != rel] if rows[name] else []
        index.append({"cell": rel, "files": json.dumps(sorted(files)),
                      "run_json": json.dumps(slim_run(meta, d, steps, frames["batch_steps.parquet"], stamp,
                                                      keep_masks and not is_batch),
                                             ensure_ascii=False, separators=(",", ":"))})
        for name in rows:
            df = frames.get(name)
            if df is not None and len(df):
                rows[name].append(df.assign(cell=rel))
    hydra = _outermost(sorted(p for p in root.rglob(".hydra") if p.is_dir()))
    done = {"root": str(root), "cells": len(cells), "packed": len(index), "hydra_removed": [str(p) for p in hydra]}
    if dry_run or not cells:
        return done
    out = root / packed.PACK_DIR
    tmp = root / (packed.PACK_DIR + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _write(pd.DataFrame(index).sort_values("cell"), tmp / packed.CELLS)
    for name, frames in rows.items():
        if frames:
            df = _concat(frames)
            _write(df[["cell", *[c for c in df.columns if c != "cell"]]], tmp / packed.pack_file(name))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    for d in cells:
        shutil.rmtree(d)
    for p in hydra:
        shutil.rmtree(p)
    for p in sorted(root.rglob("*"), reverse=True):   # folders the cells left empty
        if p.is_dir() and not any(p.iterdir()):
            p.rmdir()
    packed._pack.cache_clear()
    return done


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="result folders whose cells are re-stored (e.g. results/batch), or "
                                             "JSON files rewritten without indentation (results/cliffs/bench.json)")
    ap.add_argument("--keep-cells", action="store_true", help="only remove Hydra's copies from the folders")
    ap.add_argument("--keep-masks", action="store_true",
                    help="pack the cells but keep every per-mask row (figures, intervals, compare read them)")
    ap.add_argument("--dry-run", action="store_true", help="say what would be done, change nothing")
    ap.add_argument("--gzip", action="store_true", help="store each JSON file given as <file>.gz in its place "
                                                        "(bench readers take x.json from x.json.gz)")
    args = ap.parse_args(argv)
    for f in map(Path, args.paths):
        if not (f.is_dir() or (f.is_file() and f.suffix == ".json")):
            ap.exit(2, f"error: {f}: neither a folder of result cells nor a JSON file\n")
    stamp = new_stamp()   # before any change: the commit is clean or not by the code alone
    for f in map(Path, args.paths):
        if f.is_file():
            done = compact_json(f, stamp=stamp) if not args.dry_run else {"file": str(f)}
            if args.gzip and not args.dry_run:
                done.update(gzip_file(f))
            print(json.dumps(done))
        elif args.keep_cells:
            print(json.dumps(remove_hydra(f, args.dry_run)))
        else:
            print(json.dumps(restore(f, args.dry_run, stamp, keep_masks=args.keep_masks)))


if __name__ == "__main__":
    main()
