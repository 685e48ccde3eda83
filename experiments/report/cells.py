"""Every cell of the --results folder: its numbers (``cells.csv``), the one-line summary the runner prints when a
cell ends, the sizes each engine's compile reported, the cells that could not be read, and the machines."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gcdbench.experiments.report.collect import batch_stats, cell_stats, engine_class, find_runs, refused, run_infos
from gcdbench.experiments.report.section import Context, Section
from gcdbench.experiments.report.text import fmt_s, fmt_us, get, markdown, measured_at

# the audit columns of the per-cell table (``audit_agree`` only where a cell has no ``audit_agree_language``)
AUDIT_DETAIL_COLUMNS = ["audit_steps", "audit_profile", "audit_agree", "audit_agree_language", "audit_agree_profile",
                        "audit_explained_by_profile", "audit_false_allow_profile", "audit_false_block_profile"]


def details(cells: pd.DataFrame) -> pd.DataFrame:
    """Every cell: outcomes, init and TTFM, mask-time percentiles (p99.9 and p99.99 included), audit agreement, peak memory
    per phase, the commit(s) its rows were measured at, provenance."""
    audit_cols = list(AUDIT_DETAIL_COLUMNS)
    lang = cells["audit_agree_language"] if "audit_agree_language" in cells else pd.Series(np.nan, cells.index)
    if "audit_agree" not in cells or not (cells["audit_agree"].notna() & lang.isna()).any():
        audit_cols.remove("audit_agree")   # no cell audited before profiles: it equals audit_agree_language
    cols = ["engine", "config", "dataset", "tokenizer", "samples", "passed", "outcomes", "init_s", "init_cache_hit",
            "ttfm_s", "mask_n", "mask_mean_us", "mask_p50_us", "mask_p99_us", "mask_p999_us", "mask_p9999_us",
            "mask_max_us", *audit_cols, "peak_rss_compile_mb", "peak_rss_samples_mb", "commit", "provenance", "machine", "gpu"]
    d = cells.reindex(columns=cols)
    for col in ("samples", "passed", "mask_n", *(c for c in audit_cols if c != "audit_profile")):
        d[col] = d[col].astype("Int64")
    return d.sort_values(["dataset", "tokenizer", "config"]).reset_index(drop=True)


def artifacts(root: Path) -> dict[str, pd.DataFrame]:
    """Per engine that declares ``artifact_keys``: one row per dataset with the sizes its compile reported
    (first init of the cell, from ``run.json``), e.g. the CNF counts seed 000 reports for Valiant."""
    rows: dict[str, list] = {}
    for run in run_infos(find_runs(root)):
        cls = engine_class(run["engine"])
        keys = cls.artifact_keys if cls is not None else {}
        info = run["engine_info"]
        if not keys or not info:
            continue
        row = {"dataset": run["dataset"], "tokenizer": run["tokenizer"]}
        for col, path in keys.items():
            v = info
            for k in path:
                v = v.get(k) if isinstance(v, dict) else None
            row[col] = v
        rows.setdefault(run["engine"], []).append(row)
    return {eng: pd.DataFrame(r).drop_duplicates(["dataset", "tokenizer"]).sort_values(["dataset", "tokenizer"])
            .reset_index(drop=True) for eng, r in sorted(rows.items())}


def audit_agreement(c: dict) -> str:
    """"N/M steps agree exactly with the harness's language, K/M with the declared profile (<profile>)" for a
    cell's ``cell_stats`` (an audit stored before declared profiles says so); "" when the cell has no audit."""
    steps = get(c, "audit_steps")
    if not steps:
        return ""
    steps = int(steps)
    if get(c, "audit_agree_language") is None:
        return (f"{int(get(c, 'audit_agree') or 0)}/{steps} steps agree exactly with the reference (audit stored "
                "before declared profiles; re-run the cell for the comparison with its profile)")
    return (f"{int(c['audit_agree_language'])}/{steps} steps agree exactly with the harness's language, "
            f"{int(c['audit_agree_profile'])}/{steps} with the declared profile ({c['audit_profile']})")


def audit_text(c: dict) -> str:
    """"audit: ..." (:func:`audit_agreement`) or why the cell was not audited."""
    if get(c, "audit_steps"):
        return "audit: " + audit_agreement(c)
    if get(c, "audit_error"):   # NaN where other cells of the frame have an error and this one none
        return f"not audited: {c['audit_error'].splitlines()[0][:200]}"
    if get(c, "audit_per_sample") == 0:
        return "not audited (audit.per_sample=0)"
    return "not audited"


def cell_summary(run_dir: Path) -> str:
    """The line the runner prints when a cell ends: outcomes, init, TTFM, mask-time percentiles, audit,
    provenance warnings; a compile error in full (first 2,000 characters)."""
    c = cell_stats(Path(run_dir))
    head = (f"{c['config']} on {c['dataset']} ({c['tokenizer']})"
            + (f" batch {c['batch_size']}" if c.get("batch_size") else "")
            + (f" repeat {c['repeat']}" if get(c, "repeat") is not None else ""))
    if c.get("compile_error") and not c.get("mask_n"):
        kind = f" [{c['compile_error_kind']}]" if c.get("compile_error_kind") else ""
        return f"{head}: compile error{kind}: {c['compile_error']}"
    prov = f"; WARNING: {c['provenance']}" if c.get("provenance") else ""
    prov += f"; {c['not_alone']}" if c.get("not_alone") else ""   # provenance.cell_not_alone
    if c.get("sample_kind") == "negative":      # a sample outside the language passes when it is refused
        passed = f"refused {refused(c.get('outcome_counts'))}/{c.get('samples', 0)} (negative samples)"
    else:
        passed = f"pass {c.get('passed', 0)}/{c.get('samples', 0)}"
    return (f"{head}: {passed}, init {fmt_s(c.get('init_s'))}, "
            f"TTFM {fmt_s(c.get('ttfm_s'))}, per-mask mean {fmt_us(c.get('mask_mean_us'))} µs "
            f"(p50 {fmt_us(c.get('mask_p50_us'))}, p99 {fmt_us(c.get('mask_p99_us'))}, "
            f"p99.9 {fmt_us(c.get('mask_p999_us'))}, p99.99 {fmt_us(c.get('mask_p9999_us'))}, "
            f"max {fmt_us(c.get('mask_max_us'))}; {c.get('mask_n', 0)} masks{_jit_text(c)}); "
            f"{audit_text(c)}  [{c.get('outcomes', '')}]{_first_failure(c)}{prov}{_batch_text(Path(run_dir), c)}")


def _first_failure(c: dict) -> str:
    """The first sample that did not pass and why (for a refusal: the byte it stopped at), on positive samples."""
    first = c.get("first_failure")
    return f"; first not passed: {first[:300]}" if first and c.get("sample_kind") != "negative" else ""


def _jit_text(c: dict) -> str:
    """The masks left out of the figures because numba loaded or compiled machine code inside their timer."""
    n = get(c, "jit_masks")
    return f"; {int(n)} more compiled inside the timer, left out" if n else ""


def _batch_text(run_dir: Path, c: dict) -> str:
    """A batch cell's part of its summary line: B, threads, steps, step latency and per-sequence cost."""
    if not c.get("batch_size"):
        return ""
    b = batch_stats(run_dir)
    if not b.get("batch_steps"):
        return "; no batch step"
    return (f"; {b.get('threads')} thread(s), {b['batch_steps']} batch steps ({b['full_steps']} full), "
            f"step p50 {fmt_us(b['step_p50_us'])} µs, per sequence {fmt_us(b['per_seq_us'])} µs")


def lines(ctx: Context) -> list[str]:
    """The "Every cell" section; writes ``cells.csv``."""
    det = details(ctx.cells)
    det.to_csv(ctx.out / "cells.csv", index=False)
    return [
        "## Every cell", "",
        "Init = compile only. TTFM (time to first mask) = init plus the first mask of the untimed warm-up sample "
        "in the fresh worker (cold, at the empty prefix); the warm-up sample's other masks are not timed either. "
        "Mask percentiles (p50, p99, p99.9, max) are over every timed mask of the cell. Audit: `audit_steps` "
        "steps had their full-vocabulary mask compared exactly with the reference checker's; "
        "`audit_agree_language` of them agree with the harness's language, `audit_agree_profile` with the "
        "engine's declared profile (`audit_profile`, executed exactly by the reference), "
        "`audit_explained_by_profile` differ from the language but agree with the profile, and "
        "`audit_false_allow_profile` / `audit_false_block_profile` have false allows / false blocks against the "
        "profile (root README, \"Lexing differences: engine profiles\"); `audit_agree` appears only for cells "
        "audited before declared profiles. Memory = peak resident set of "
        "the worker process (MB) while compiling and while running the samples (measured apart). Provenance "
        "names cells whose rows do not all come from one clean commit.", "",
        markdown(det.drop(columns=["machine", "gpu"])), "",
        measured_at(ctx.cells), ""]


def not_reported_lines(ctx: Context) -> list[str]:
    """The "Not reported" section: cells skipped as unreadable (none: no section)."""
    skipped = ctx.cells.attrs.get("skipped", [])
    return ["## Not reported", "", *[f"- {m}" for m in skipped], ""] if skipped else []


def artifact_lines(ctx: Context) -> list[str]:
    """The "Engine artifacts" section."""
    return ["## Engine artifacts", "",
            "Sizes each engine's compile reported (its `info()` in `run.json`), per dataset and vocabulary.", "",
            *[line for eng, df in artifacts(ctx.results).items()
              for line in (f"**{eng}**", "", markdown(df.astype(object)), "")]]


def machine_lines(ctx: Context) -> list[str]:
    """The "Machines" section: every machine (and GPU) the --results cells ran on."""
    return ["## Machines", "",
            *[f"- {m}" for m in sorted({str(m) for m in ctx.cells["machine"].dropna()})],
            *[f"- GPU: {g}" for g in sorted({g for g in ctx.cells["gpu"].dropna() if g})]]


SECTION = Section("cells", lines, "every --results cell (cells.csv)")
NOT_REPORTED = Section("not_reported", not_reported_lines, "cells that could not be read")
ARTIFACTS = Section("artifacts", artifact_lines, "engine artifact sizes")
MACHINES = Section("machines", machine_lines, "the machines")
