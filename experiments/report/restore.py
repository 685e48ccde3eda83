"""Re-store result folders in the slim form the repository keeps (at most 10 MB under ``results/``).

    python -m gcdbench.experiments.report.restore results/batch results/suite results/cliffs/runs [--dry-run]

Each folder's cells move into one pack, ``<folder>/_restored/`` (:mod:`.packed`), read by the report as before:

- per-mask rows (``steps.parquet``) are replaced by what the report computes from them: the cell's mask-time
  summary (``restored.mask_summary`` in its run record: count, mean, p50/p99/p99.9/max, computed exactly as
  :func:`.collect.mask_summary` does) and, for single-mode cells, the per-sample counts, means and maxima
  (``sample_steps``: what the suite's growth and the cliffs sections read);
- batch cells keep their per-step summaries (``batch_steps``: one row per ``fill_masks`` call), not every mask;
- ``samples`` and ``audit`` rows are kept whole; ``run.json`` is kept less ``identity.sample_ids`` (its digest
  ``identity.samples_digest`` stays), with a ``restored`` record: when, by which commit of this tool, what was
  dropped. Sessions, commits and machines (the cell's provenance) are not changed;
- Hydra's copies of the configs (``.hydra/``, multirun.yaml, jobs.json) are removed: every cell's run.json
  already records its command and options.

A folder cell run again after re-storing takes the packed cell's place (the report reads the folder). Re-storing a
folder that already holds a pack adds its folder cells to the pack. Do not re-store the folder the figures are
drawn from (``--results``): figures need every mask.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd

from gcdbench.experiments.report import packed
from gcdbench.experiments.report.collect import (Unreadable, batch_step_stats, mask_summary, read_cell_file,
                                                 read_run, summarize_sample_steps)

ROW_NAMES = {"samples.parquet": "samples.parquet", "audit.parquet": "audit.parquet",
             "batch_steps.parquet": "batch_steps.parquet"}


def tool_commit() -> str:
    """The commit of this code (``-dirty`` when tracked files differ from it), or ``unknown``."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def slim_run(meta: dict, run_dir: Path, steps: pd.DataFrame | None, batch_steps: pd.DataFrame | None,
             stamp: dict) -> dict:
    """The run record a packed cell keeps: ``meta`` less the sample id list, plus the ``restored`` record."""
    meta = json.loads(json.dumps(meta))   # a deep copy
    dropped = []
    if "sample_ids" in (meta.get("identity") or {}):
        del meta["identity"]["sample_ids"]
        dropped.append("identity.sample_ids")
    restored = {**stamp, "from": str(run_dir)}
    if steps is not None:
        dropped.append("steps.parquet")
        restored["mask_summary"] = mask_summary(run_dir, steps=steps)
    if batch_steps is not None:
        restored["batch_step_summary"] = batch_step_stats(batch_steps)
    restored["dropped"] = dropped
    meta["restored"] = restored
    return meta


def _folder_cells(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("run.json")
                  if ".hydra" not in p.parts and packed.PACK_DIR not in p.parts)


def restore(root: Path, dry_run: bool = False) -> dict:
    """Pack every folder cell under ``root`` (see the module's docstring); returns what was done."""
    root = Path(root)
    stamp = {"when": time.strftime("%Y-%m-%d %H:%M:%S +0000", time.gmtime()), "by": "gcdbench.experiments.report"
             ".restore", "commit": tool_commit()}
    index, rows = [], {name: [] for name in (*ROW_NAMES, packed.SAMPLE_STEPS)}
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
        index = [r for r in index if r["cell"] != rel]
        for name in rows:
            rows[name] = [f for f in rows[name] if f["cell"].iloc[0] != rel] if rows[name] else []
        index.append({"cell": rel, "files": json.dumps(sorted(files)),
                      "run_json": json.dumps(slim_run(meta, d, steps, frames["batch_steps.parquet"], stamp),
                                             ensure_ascii=False, separators=(",", ":"))})
        for name in rows:
            df = frames.get(name)
            if df is not None and len(df):
                rows[name].append(df.assign(cell=rel))
    hydra = sorted(p for p in root.rglob(".hydra") if p.is_dir())
    done = {"root": str(root), "cells": len(cells), "packed": len(index), "hydra_removed": [str(p) for p in hydra]}
    if dry_run:
        return done
    out = root / packed.PACK_DIR
    tmp = root / (packed.PACK_DIR + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write = dict(compression="zstd", compression_level=19, write_statistics=False, use_byte_stream_split=False)
    pd.DataFrame(index).sort_values("cell").to_parquet(tmp / packed.CELLS, index=False, **write)
    for name, frames in rows.items():
        if frames:
            df = pd.concat(frames, ignore_index=True)
            df[["cell", *[c for c in df.columns if c != "cell"]]].to_parquet(tmp / name, index=False, **write)
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
    ap.add_argument("folders", nargs="+", help="result folders whose cells are re-stored (e.g. results/batch)")
    ap.add_argument("--dry-run", action="store_true", help="say what would be done, change nothing")
    args = ap.parse_args(argv)
    for f in args.folders:
        if not Path(f).is_dir():
            ap.exit(2, f"error: {f}: no such folder; give a folder of result cells\n")
    for f in args.folders:
        print(json.dumps(restore(Path(f), args.dry_run)))


if __name__ == "__main__":
    main()
