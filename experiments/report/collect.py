"""The report's only reader of stored results: finds the cells under a results folder and turns each into one row
of numbers (``cell_stats``), and every mask into tidy frames (``load_steps``, ``load_cells``). Every section works
from these frames; none opens a cell's files itself. The statistics of mask and batch-step times that need no cell
on disk (the re-stored cell's digest, merged mask times) are in :mod:`.masktimes`.

A cell is a folder with a ``run.json`` (and ``samples``/``steps``/``audit``/``batch_steps`` parquet files), or a
cell kept in a re-stored pack (:mod:`.packed`: per-mask rows replaced by the summaries the report reads, or kept).
A damaged file is one skipped cell with a warning naming it, never a failed report.

A cell whose run is still going (its ``.lock`` held by a live process: ``store.lock_holder``) is *running*: not
reported until its run ends, named in a ``note:`` line and in ``attrs["running"]`` as ``<cell>: running: N samples
so far`` (the rows stored and the parts written). A run that ended without finishing (its lock released; the lock
file may still name the dead process) is *stopped*: its stored rows are reported, and a cell without any says
to run the same command again.
"""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from gcdbench.experiments import schema
from gcdbench.experiments.provenance import cell_not_alone
from gcdbench.experiments.report import packed
from gcdbench.experiments.report.masktimes import batch_step_stats, summarize_sample_steps
from gcdbench.parsers.base import Outcome

DATASET_ORDER = ["spider", "spider_spop", "treebank", "sample", "sample_pos"]
SUITE_ORDER = ["json", "lark", "ambiguous_binary", "ambiguous_ternary", "ambiguous_expr", "ambiguous_concat",
               "ambiguous_right"]
SAMPLED_SUFFIX = "_sampled"
#: outcomes of a negative sample (``dataset.kind=negative``: one outside the language) that count as passed
NEGATIVE_PASS = (Outcome.REJECTED.value, Outcome.NO_EOS.value)
#: what every cell's run.json holds (the schema module checks them; the report reads them without checking again)
RUN_JSON_KEYS = schema.REQUIRED_RUN_KEYS
PROFILE_AUDIT_COLUMNS = ("profile", "agree_language", "agree_profile", "n_false_allow_profile",
                         "n_false_block_profile", "false_allow_examples_profile", "false_block_examples_profile")
STEP_FRAME_COLUMNS = ["engine", "config", "dataset", "tokenizer", "sample_id", "step", "prefix_tokens", "prefix_bytes",
                      "mask_us", "commit_us", "n_allowed", "oracle_allowed", "outcome", "vocab_size", "run_dir"]


def refused(outcome_counts: dict | None) -> int:
    """How many samples of a cell (its ``outcome_counts``) were refused: a negative cell's passed samples."""
    return sum(int((outcome_counts or {}).get(k, 0)) for k in NEGATIVE_PASS)


_WARNED: set[str] = set()


def is_beyond(dataset: str) -> bool:
    """Whether a dataset belongs to the "Beyond Table 1" section: the grammar suite and every sampled variant."""
    return dataset in SUITE_ORDER or dataset.endswith(SAMPLED_SUFFIX)


def warn(message: str) -> None:
    """One ``warning:`` line on stderr per distinct message (the report and the figures read the same cells)."""
    if message not in _WARNED:
        _WARNED.add(message)
        print(f"warning: {message}", file=sys.stderr)


class Unreadable(Exception):
    """A stored file of a cell that cannot be read; ``str()`` names the file and the reason."""


class Running(Unreadable):
    """A cell whose run is still going: ``str()`` is ``<cell>: running: N samples so far``."""


def note(message: str) -> None:
    """One ``note:`` line on stderr per distinct message (what is not wrong but not reported either)."""
    if message not in _WARNED:
        _WARNED.add(message)
        print(f"note: {message}", file=sys.stderr)


def running_line(run_dir: Path) -> str | None:
    """``<cell>: running: N samples so far`` when a live process holds the cell's lock, else None. N counts the
    samples stored in ``samples.parquet`` and those written to ``parts/`` since (each once)."""
    from gcdbench.experiments.store import lock_holder

    run_dir = Path(run_dir)
    if lock_holder(run_dir) is None:
        return None
    ids = {p.name[: -len(".sample.json")] for p in (run_dir / "parts").glob("*.sample.json")}
    try:
        stored = schema.read_rows(run_dir / "samples.parquet") if (run_dir / "samples.parquet").exists() else None
    except Exception:   # noqa: BLE001 - being replaced right now, or damaged: the parts are what counts
        stored = None
    if stored is not None and "sample_id" in stored:
        ids |= set(map(str, stored["sample_id"]))
    return f"{run_dir}: running: {len(ids)} samples so far"


def nothing_reported(results: Path, cells: pd.DataFrame) -> tuple[int, str]:
    """The exit status and the line of a report that found no cell to report under ``results``: 0 when every cell
    there is still running (the report is run too early, nothing is wrong), else 1."""
    running, skipped = cells.attrs.get("running", []), cells.attrs.get("skipped", [])
    if running and len(skipped) == len(running):
        return 0, (f"every cell under {results} is still running ({len(running)} cell(s)); nothing to report "
                   "yet: run the report again when they end")
    if running or skipped:
        return 1, (f"no cell under {results} can be reported yet ({len(running)} still running, "
                   f"{len(skipped) - len(running)} skipped: see the lines above)")
    return 1, f"no run.json under {results}: run `python -m experiments.run ...` first"


# --------------------------------------------------------------------------------------------------------------
# finding and reading cells
# --------------------------------------------------------------------------------------------------------------
def find_runs(root: Path) -> list[Path]:
    """Cells under ``root``: folders with a ``run.json``, and the cells of re-stored packs not superseded by a folder
    of the same path. Folders holding result files without a ``run.json`` are named in a warning (a run killed
    before it wrote its first file, or files copied without it)."""
    root = Path(root)
    runs = sorted(p.parent for p in root.rglob("run.json") if ".hydra" not in p.parts)
    have = set(runs)
    # a run that has just started holds the lock before it writes run.json: a running cell too
    starting = {p.parent for p in root.rglob(".lock") if ".hydra" not in p.parts and p.parent not in have
                and running_line(p.parent) is not None}
    orphans = sorted({p.parent for pat in ("*.parquet", "parts") for p in root.rglob(pat)
                      if ".hydra" not in p.parts and packed.PACK_DIR not in p.parts and p.parent not in have}
                     - starting)
    for d in orphans:
        warn(f"{d} holds result files but no run.json: not reported (re-run the cell, or remove the folder)")
    return sorted(have | starting | {p for p in packed.cells_under(root) if p not in have})


def run_dirs(roots) -> list[Path]:
    """Cells under the given roots (missing roots skipped, each cell once)."""
    seen, out = set(), []
    for root in roots:
        if root is None or not Path(root).exists():
            continue
        for d in find_runs(Path(root)):
            key = d.resolve()
            if key not in seen:
                seen.add(key)
                out.append(d)
    return out


def read_cell_file(run_dir: Path, name: str):
    """A cell's ``run.json`` (its :class:`~gcdbench.experiments.schema.RunRecord`, read and migrated by the schema
    module) or ``<name>.parquet`` (a DataFrame, its version checked there); None when absent; Unreadable when
    damaged, foreign or of a version this code does not read (one line naming the file)."""
    path = Path(run_dir) / name
    if not (Path(run_dir) / "run.json").exists() and packed.holds(run_dir):
        try:
            got = packed.read(run_dir, name)
            return timed_steps(got) if name == "steps.parquet" and got is not None else got
        except schema.SchemaVersionError as err:
            raise Unreadable(str(err)) from None
        except Exception as err:   # noqa: BLE001 - a damaged pack file: this cell skipped, named
            raise Unreadable(f"cannot read {name} of the re-stored cell {run_dir} ({type(err).__name__}: "
                             f"{str(err)[:160]}); restore {packed.PACK_DIR}/ from git") from None
    if not path.exists():
        return None
    try:
        if name == "steps.parquet":
            return timed_steps(schema.read_rows(path))
        return schema.read_run(path) if name == "run.json" else schema.read_rows(path)
    except schema.SchemaVersionError as err:
        raise Unreadable(str(err)) from None
    except Exception as err:   # noqa: BLE001 - json, OS and pyarrow errors all mean "cannot use this file"
        if "is not a gcdbench run.json" in str(err):   # a foreign file: one skipped cell (issue 27)
            raise Unreadable(str(err)) from None
        raise Unreadable(f"cannot read {path} ({type(err).__name__}: {str(err)[:160]})") from None


def timed_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """A cell's step rows without the masks inside whose timer numba loaded or compiled machine code (``jit`` > 0,
    :mod:`gcdbench.experiments.jitwatch`): they measure a compile, not a mask, and stay out of every per-mask
    statistic; how many were left out is ``attrs["jit_masks"]`` (rows stored before the column: none known)."""
    if "jit" not in steps.columns:
        steps.attrs["jit_masks"] = None
        return steps
    jit = steps["jit"].fillna(0).to_numpy() > 0
    out = steps[~jit].reset_index(drop=True) if jit.any() else steps
    out.attrs["jit_masks"] = int(jit.sum())
    return out


def read_run(run_dir: Path) -> dict:
    """A cell's run record (``run.json``); Unreadable when it is missing or damaged."""
    meta = read_cell_file(run_dir, "run.json")
    if meta is None:
        raise Unreadable(f"{run_dir} has no run.json")
    return meta


def mask_summary(run_dir: Path, steps: pd.DataFrame | None = None, meta: dict | None = None) -> dict:
    """Count, mean and p50/p99/p99.9/p99.99/max of a cell's per-mask times ({} when it has none): from ``steps.parquet``;
    else, for a re-stored cell, the summary it keeps in place of those rows; else, for a batch cell that kept
    only its per-step summaries, from ``batch_steps`` (each step gave ``masks`` masks of ``step_us / live``)."""
    if steps is None:
        steps = read_cell_file(run_dir, "steps.parquet")
    if steps is None:
        meta = meta if meta is not None else read_run(run_dir)
        kept = (meta.get("restored") or {}).get("mask_summary")
        if kept is not None:
            return dict(kept)
        bs = read_cell_file(run_dir, "batch_steps.parquet")
        if bs is None or "masks" not in bs:
            return {}
        us = np.repeat((bs["step_us"] / bs["live"]).to_numpy(), bs["masks"].to_numpy())
    else:
        us = steps["mask_us"].to_numpy()
    jit = {"jit_masks": steps.attrs["jit_masks"]} if steps is not None and steps.attrs.get("jit_masks") else {}
    if not us.size:
        return jit
    return dict(**jit, mask_n=int(us.size), mask_mean_us=float(us.mean()), mask_p50_us=float(np.percentile(us, 50)),
                mask_p99_us=float(np.percentile(us, 99)), mask_p999_us=float(np.percentile(us, 99.9)),
                mask_p9999_us=float(np.percentile(us, 99.99)), mask_max_us=float(us.max()))


def sample_step_summary(run_dir: Path) -> pd.DataFrame | None:
    """Per sample of a cell: ``masks``, ``mean_us``, ``max_us`` of its mask times and its ``last_step``; from
    ``steps.parquet``, else the per-sample table a re-stored cell keeps (None when the cell has neither)."""
    steps = read_cell_file(run_dir, "steps.parquet")
    if steps is None:
        return read_cell_file(run_dir, packed.SAMPLE_STEPS)
    return summarize_sample_steps(steps)


@functools.lru_cache(maxsize=None)
def engine_class(name: str):
    """The engine class stored as ``name`` in run.json (a registry name or ``package.module:Class``), or
    None when it does not import here (its table entries then say ``?``). An engine whose own package is not
    installed here still gives its class (what the report reads, e.g. its complexity, is declared on it), so the
    report of stored cells does not depend on which engines this machine has."""
    from gcdbench.parsers.registry import engine_class as lookup

    try:
        return lookup(name, runnable=False)
    except (ValueError, ImportError, AttributeError):
        return None


def run_info(run_dir: Path) -> dict:
    """What the sections need of a cell's run record, read once here (the sections read no run.json key
    themselves): its key (engine, config, dataset, tokenizer), ``git_commit``, ``compile_error``, ``machine``
    (as text), the engine's ``info()`` at its first compile (``engine_info``), ``dataset_meta`` and the sampled
    sequences' ``pieces`` (for the disagreements' context). Raises Unreadable."""
    meta = read_run(run_dir)
    dataset_meta = meta.get("dataset_meta") or {}
    return {"path": str(run_dir), "engine": meta["engine"], "config": meta["config"], "dataset": meta["dataset"],
            "tokenizer": meta["tokenizer"], "git_commit": meta.get("git_commit"),
            "compile_error": meta.get("compile_error") or "", "machine": machine_text(meta),
            "engine_info": first_engine_info(meta), "dataset_meta": dataset_meta,
            "pieces": dataset_meta.get("pieces") or {}}


def run_infos(run_dirs) -> list[dict]:
    """:func:`run_info` of every readable cell of ``run_dirs`` (damaged ones skipped: ``collect`` warns)."""
    out = []
    for d in run_dirs:
        try:
            out.append(run_info(d))
        except Unreadable:
            continue
    return out


# --------------------------------------------------------------------------------------------------------------
# one row per cell
# --------------------------------------------------------------------------------------------------------------
def cell_commits(meta: dict, samples: pd.DataFrame | None) -> tuple[str, ...]:
    """The commits (7 characters) a cell's rows were measured at, from the per-row provenance (else the cell's)."""
    if samples is not None and "git_commit" in samples:
        return tuple(sorted({str(c)[:7] for c in samples["git_commit"].dropna()}))
    c = meta.get("git_commit")
    return (c.removesuffix("-dirty")[:7],) if c else ()


def provenance(meta: dict, samples: pd.DataFrame | None) -> str:
    """"" for a cell whose rows all come from one clean commit, else what is wrong ("dirty tree", "mixed
    commits (a1b2c3d, e4f5a6b)", "commit unknown")."""
    if samples is not None and "git_commit" in samples:
        commits = sorted({c for c in samples["git_commit"].dropna()})
        dirty = bool(samples["git_dirty"].fillna(False).astype(bool).any())
        unknown = bool(samples["git_commit"].isna().any())
    else:   # rows written before per-row provenance: the cell-level commit
        c = meta.get("git_commit")
        commits = [c.removesuffix("-dirty")] if c else []
        dirty, unknown = bool(c and c.endswith("-dirty")), not c
    notes = []
    if len(commits) > 1:
        notes.append(f"mixed commits ({', '.join(x[:7] for x in commits)})")
    if dirty:
        notes.append("dirty tree")
    if unknown:
        notes.append("commit unknown")
    return "; ".join(notes)


def machine_text(meta: dict) -> str:
    """"<cpu> (<n> cores, <m> GB)" of the machine a cell ran on (``?`` for what is unknown)."""
    return "{cpu} ({cpu_count} cores, {memory_gb} GB)".format(
        **{"cpu": "?", "cpu_count": "?", "memory_gb": "?", **(meta.get("machine") or {})})


def first_engine_info(meta: dict) -> dict:
    """The engine's ``info()`` at the cell's first compile (``run.json``'s ``inits[0]``), or ``{}``."""
    return (meta.get("inits") or [{}])[0].get("engine_info") or {}


def audit_depth(meta: dict):
    """``audit.per_sample`` of the cell's sessions (None when unknown; the largest if they differ)."""
    depths = [s.get("audit_per_sample") for s in meta.get("sessions", []) if s.get("audit_per_sample") is not None]
    if depths:
        return max(depths)
    hc = meta.get("hydra_config") or {}
    return (hc.get("audit") or {}).get("per_sample")


def has_profile_columns(audit: pd.DataFrame) -> bool:
    """Whether an ``audit.parquet`` carries the declared-profile comparison (cells audited before it do not)."""
    return all(c in audit.columns for c in PROFILE_AUDIT_COLUMNS)


def audit_counts(audit: pd.DataFrame) -> dict:
    """Counts of a cell's audited steps: ``audit_agree`` (exact agreement as the audit stored it, every format);
    and, for audits that carry the engine's declared profile, ``audit_profile``, agreement with the harness's
    language and with that profile, the steps that differ from the language but agree with the profile
    (explained by it), and the steps with false allows / false blocks against the language and the profile."""
    row = {"audit_steps": int(len(audit)), "audit_agree": int(audit["agree"].astype(bool).sum()),
           "audit_false_allow": int((audit["n_false_allow"] > 0).sum()),
           "audit_false_block": int((audit["n_false_block"] > 0).sum())}
    if "agree_single_mode" in audit:   # batch mode: the batch row equals the sequence's own fill_mask
        row["audit_agree_single_mode"] = int(audit["agree_single_mode"].astype(bool).sum())
    if not has_profile_columns(audit):
        return row   # stored before declared profiles: re-run the cell for the profile columns
    lang, prof = audit["agree_language"].astype(bool), audit["agree_profile"].astype(bool)
    row.update(audit_profile="; ".join(sorted(set(audit["profile"].astype(str)))),
               audit_agree_language=int(lang.sum()), audit_agree_profile=int(prof.sum()),
               audit_explained_by_profile=int((~lang & prof).sum()),
               audit_false_allow_profile=int((audit["n_false_allow_profile"] > 0).sum()),
               audit_false_block_profile=int((audit["n_false_block_profile"] > 0).sum()))
    return row


def jit_stats(meta: dict) -> dict:
    """The first compile's import seconds and numba's compile seconds in init and in the warm-up sample (None where
    the cell was run before they were recorded)."""
    first = (meta.get("inits") or [{}])[0]
    return {"import_s": first.get("import_s"),
            "jit_init_s": (first.get("jit_compile") or {}).get("jit_s"),
            "jit_warmup_s": (first.get("jit_warmup") or {}).get("jit_s")}


def cell_stats(run_dir: Path) -> dict:
    """One cell's numbers, computed from its stored files (raises Unreadable for a damaged file, Running for a cell
    whose run is still going)."""
    running = running_line(run_dir)
    if running is not None:
        raise Running(running)
    meta = read_run(run_dir)
    samples = read_cell_file(run_dir, "samples.parquet")
    audit = read_cell_file(run_dir, "audit.parquet")
    if samples is None:   # the identity is written before any row, and no live process holds the lock
        raise Unreadable(f"{run_dir} holds no rows yet (a run stopped before it stored its first samples; run the "
                         "same command again to resume it)")
    if meta.get("n_rows") is not None and meta["n_rows"] != len(samples):
        warn(f"{run_dir}: run.json describes {meta['n_rows']} samples, samples.parquet holds {len(samples)} "
             "(a run stopped while merging; re-run the cell to repair it)")
    pending = len(list((Path(run_dir) / "parts").glob("*.sample.json")))
    if pending:   # no live process holds the lock: a run stopped after these samples, before merging them
        warn(f"{run_dir}: a run stopped with {pending} finished samples not yet merged (not in this report); run "
             "the same command again to resume it")
    machine = meta.get("machine") or {}
    row = {
        "engine": meta["engine"], "config": meta["config"], "dataset": meta["dataset"], "tokenizer": meta["tokenizer"],
        "requested": meta.get("n_samples"), "init_s": meta.get("init_s"), "compile_error": meta.get("compile_error"),
        "aborted": meta.get("aborted"), "machine": machine_text(meta),
        "gpu": machine.get("gpu"), "peak_rss_compile_mb": meta.get("peak_rss_compile_mb"),
        "peak_rss_samples_mb": meta.get("peak_rss_samples_mb"), "path": str(run_dir),
        "init_cache_hit": bool(first_engine_info(meta).get("cache_hit")), "ttfm_s": meta.get("ttfm_s"),
        "compile_error_kind": meta.get("compile_error_kind"), "audit_per_sample": audit_depth(meta),
        "audit_error": meta.get("audit_error"), "provenance": provenance(meta, samples),
        "not_alone": cell_not_alone(meta.get("sessions")),   # issue 66: other processes busy during the cell
        "commit": "+".join(cell_commits(meta, samples)),
        "outcome_counts": meta.get("outcomes") or {},
        "ambiguous": bool((meta.get("dataset_meta") or {}).get("ambiguous", False)),
        "sample_kind": (meta.get("dataset_meta") or {}).get("kind") or "positive",
        "batch_size": ((meta.get("identity") or {}).get("batch") or {}).get("size"),
        "cold": bool((meta.get("identity") or {}).get("cold", False)),
        "repeat": (meta.get("identity") or {}).get("repeat"),   # repeats=R: which run of the cell (None: one run)
        **jit_stats(meta),
    }
    counts = samples["outcome"].value_counts()
    attempted = samples[samples["outcome"].map(lambda o: Outcome(o).attempted)]
    row["samples"] = int(len(attempted))
    row["passed"] = int(counts.get(Outcome.OK.value, 0))
    row["pass_rate"] = row["passed"] / len(attempted) if len(attempted) else np.nan
    row["outcomes"] = ", ".join(f"{k}: {v}" for k, v in counts.items())
    row["outcome_counts"] = {str(k): int(v) for k, v in counts.items()}
    failed = attempted[attempted["outcome"] != Outcome.OK.value]
    row["first_failure"] = (f"{failed['sample_id'].iloc[0]} {failed['outcome'].iloc[0]}: {failed['message'].iloc[0]}"
                            if len(failed) and "message" in failed else "")
    row.update(mask_summary(run_dir, meta=meta))
    if audit is not None and len(audit):
        row.update(audit_counts(audit))
    return row


def collect(root: Path) -> pd.DataFrame:
    """One row per readable cell under ``root`` (``cell_stats``); damaged cells are skipped with a warning and
    listed in ``attrs["skipped"]``; running cells are named in a note and listed in ``attrs["running"]`` (and in
    ``attrs["skipped"]``, for the report's "Not reported" section)."""
    rows, skipped, running, first = [], [], [], {}
    for r in find_runs(root):
        try:
            row = cell_stats(r)
        except Running as err:   # not reported until its run ends; named under "Not reported" too
            note(f"{err} (reported once its run ends)")
            running.append(str(err))
            skipped.append(f"{err} (reported once its run ends)")
            continue
        except Unreadable as err:
            msg = f"{err}: cell {r} skipped"
            warn(msg)
            skipped.append(msg)
            continue
        key = (json.dumps(read_run(r).get("identity") or str(r), sort_keys=True, default=str), row["commit"],
               row["machine"])
        if key in first:   # a copy of a cell (same identity, commit and machine): its rows once, the copy named
            msg = (f"{r} is a copy of the cell {first[key]} (same identity, commit and machine): reported once, "
                   "from the first; remove one of the two folders")
            warn(msg)
            skipped.append(msg)
            continue
        first[key] = r
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs["skipped"] = skipped
    df.attrs["running"] = running
    return df


def is_batch(cells: pd.DataFrame) -> pd.Series:
    """True for batch-mode cells (their identity has a batch size)."""
    if cells.empty or "batch_size" not in cells:
        return pd.Series(False, index=cells.index)
    return cells["batch_size"].notna()


def is_cold(cells: pd.DataFrame) -> pd.Series:
    """True for cells run with ``cold=true`` (empty caches in every worker): the cold-start section's."""
    if cells.empty or "cold" not in cells:
        return pd.Series(False, index=cells.index)
    return cells["cold"].fillna(False).astype(bool)


def single_mode(cells: pd.DataFrame) -> pd.DataFrame:
    """The single-mode cells of ``collect``'s frame (Table 1 and the other single-mode tables and figures); cells
    run with ``cold=true`` are the cold-start section's, beside their cached twins, and not in these."""
    out = cells[~is_batch(cells) & ~is_cold(cells)]
    out.attrs.update(cells.attrs)
    return out


# --------------------------------------------------------------------------------------------------------------
# batch mode
# --------------------------------------------------------------------------------------------------------------
def batch_stats(run_dir: Path) -> dict:
    """A batch-mode cell's numbers: ``cell_stats`` plus the batch size B, the threads its engine used, and
    :func:`.masktimes.batch_step_stats` of its ``batch_steps`` rows (kept by re-stored cells too)."""
    row = cell_stats(run_dir)
    meta = read_run(run_dir)
    b = meta.get("batch") or {}
    row.update(B=int(row["batch_size"]), threads=b.get("threads"), threads_option=b.get("threads_option"))
    row.update(batch_step_stats(read_cell_file(run_dir, "batch_steps.parquet")))
    return row


def collect_batch(roots) -> pd.DataFrame:
    """One row per readable batch-mode cell under ``roots`` (``batch_stats``); damaged cells are skipped with a
    warning (as in ``collect``)."""
    rows = []
    for root in roots:
        for r in find_runs(Path(root)):
            try:
                meta = read_run(r)
                if not (meta.get("identity") or {}).get("batch"):
                    continue
                rows.append(batch_stats(r))
            except Running as err:
                note(f"{err} (reported once its run ends)")
            except Unreadable as err:
                warn(f"{err}: cell {r} skipped")
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.drop_duplicates("path").sort_values(["dataset", "tokenizer", "config", "B"]).reset_index(drop=True)
    return df


# --------------------------------------------------------------------------------------------------------------
# tidy frames for figures and notebooks
# --------------------------------------------------------------------------------------------------------------
def option_columns(frame: pd.DataFrame, options: list[dict]) -> pd.DataFrame:
    """``frame`` with one column per engine option found in ``options`` (one dict per row), named as the option,
    except where the frame already has a column of that name; a cell without the option gets None."""
    names = sorted({k for o in options for k in o} - set(frame.columns))
    if not names:
        return frame
    extra = pd.DataFrame([{k: o.get(k) for k in names} for o in options], index=frame.index, dtype=object)
    return pd.concat([frame, extra], axis=1)


def load_steps(root: Path | str) -> pd.DataFrame:
    """Every mask of every cell under ``root`` as one tidy frame.

    Columns: those of ``steps.parquet`` (engine, config, dataset, tokenizer, sample_id, step, prefix_tokens,
    prefix_bytes, mask_us, ...) plus ``vocab_size``, ``run_dir`` and one column per engine option of the cells
    (e.g. ``workers``, ``threads``). Re-stored cells add their per-mask rows only if packed with ``--keep-masks``.
    """
    frames = []
    for run_dir in find_runs(Path(root)):
        try:
            meta = read_run(run_dir)
            df = read_cell_file(run_dir, "steps.parquet")
        except Unreadable:
            continue   # collect() warns about it and skips the cell
        if df is None:
            continue
        df["vocab_size"] = meta.get("vocab_size")
        df["run_dir"] = str(run_dir)
        for k, v in sorted((meta.get("engine_options") or {}).items()):
            if k not in df.columns:
                df[k] = [v] * len(df)
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=STEP_FRAME_COLUMNS)
    return pd.concat(frames, ignore_index=True)


def load_cells(root: Path | str) -> pd.DataFrame:
    """One row per cell (``collect``) plus ``vocab_size``, ``engine_options`` (JSON), one column per engine option
    (named as the option: ``workers``, ``threads``, ...) and ``status`` (None for a complete cell, else a short
    reason: :func:`cell_status`)."""
    cells = collect(Path(root))
    if cells.empty:
        return cells
    extra, options = [], []
    for path in cells["path"]:
        meta = read_run(Path(path))
        opts = meta.get("engine_options") or {}
        options.append(opts)
        extra.append({"vocab_size": meta.get("vocab_size"), "engine_options": json.dumps(opts, sort_keys=True)})
    attrs = dict(cells.attrs)
    cells = pd.concat([cells.reset_index(drop=True), pd.DataFrame(extra)], axis=1)
    cells = option_columns(cells, options)
    cells.attrs.update(attrs)
    cells["status"] = pd.Series([cell_status(r) for _, r in cells.iterrows()], dtype=object, index=cells.index)
    return cells


def _value(x):
    return None if x is None or (isinstance(x, float) and np.isnan(x)) else x


def cell_status(cell) -> str | None:
    """None for a complete cell: every requested sample ended ``ok``. Otherwise a short reason:
    ``compile error`` / ``compile timeout`` / ``compile OOM`` (no masks at all), ``failed: <outcome> n/N, ...``
    (no sample passed) or ``partial: <outcome> n/N, ...`` (some did); outcomes as in :class:`Outcome`."""
    err = cell.get("compile_error")
    counts = cell.get("outcome_counts")
    counts = counts if isinstance(counts, dict) else {}
    n_ok = int(counts.get(Outcome.OK.value, 0))
    if isinstance(err, str) and err and not n_ok and not _value(cell.get("mask_n")):
        kind = cell.get("compile_error_kind")
        if kind == "timeout" or "compile_timeout_s" in err:
            return "compile timeout"
        if kind == "oom" or "memory limit" in err:
            return "compile OOM"
        return "compile error"
    total = sum(int(v) for v in counts.values())
    requested = int(_value(cell.get("requested")) or total)
    bad = [f"{o.value} {counts[o.value]}/{requested}" for o in Outcome if o is not Outcome.OK and counts.get(o.value)]
    if requested > total:
        bad.append(f"not run {requested - total}/{requested}")
    if isinstance(cell.get("aborted"), str) and cell["aborted"] and not counts.get(Outcome.SKIPPED.value):
        bad.insert(0, "run time limit")
    if not bad:
        return None
    return ("failed: " if n_ok == 0 else "partial: ") + ", ".join(bad)
