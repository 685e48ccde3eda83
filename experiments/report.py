"""Tables from stored results only: every folder under the results root that has a ``run.json``.

``python -m experiments.report [--results results/runs] [--out results] [--also DIR ...]`` writes Table 1
(seed 000's layout) as Markdown, CSV and LaTeX, a per-cell detail table (``cells.csv``), every disagreement of
an engine with its declared profile (``disagreements.csv``, and a "Disagreements" section), and ``README.md``
with them all, and prints Table 1. Each ``--also`` folder (a run outside the Table 1 sweep, e.g. all 300 TreeBank samples) gets its own
section: its cells, and the mask-time tail at every prefix length (``prefix_tails_<name>.csv``, a figure).
Batch-mode cells (``batch.size`` >= 1, found under ``--results`` or in the ``--batch`` folders) are kept out of
those tables and get their own section: step latency and per-sequence cost against the batch size B
(``batch.csv``, a table and a figure).

A damaged cell (a file that cannot be read) is skipped with one warning line naming the file; a folder with
result files but no ``run.json`` is reported with a warning; every healthy cell is still built.
"""
from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from gcdbench.parsers.base import Outcome

DATASET_ORDER = ["spider", "spider_spop", "treebank", "sample", "sample_pos"]
PROFILE_AUDIT_COLUMNS = ("profile", "agree_language", "agree_profile", "n_false_allow_profile",
                         "n_false_block_profile", "false_allow_examples_profile", "false_block_examples_profile")
# the audit columns of the per-cell table (``audit_agree`` only where a cell has no ``audit_agree_language``)
AUDIT_DETAIL_COLUMNS = ["audit_steps", "audit_profile", "audit_agree", "audit_agree_language", "audit_agree_profile",
                        "audit_explained_by_profile", "audit_false_allow_profile", "audit_false_block_profile"]


@functools.lru_cache(maxsize=None)
def _engine_class(name: str):
    """The engine class stored as ``name`` in run.json (a registry name or ``package.module:Class``), or
    None when it does not import here (its table entries then say ``?``)."""
    from gcdbench.parsers.registry import engine_class

    try:
        return engine_class(name)
    except (ValueError, ImportError, AttributeError):
        return None


def complexity(engine: str, ambiguous: bool) -> str:
    """Table 1's "Cmplx." entry: what the engine class declares for a grammar that is (not) highly ambiguous."""
    cls = _engine_class(engine)
    return cls.complexity(bool(ambiguous)) if cls is not None else "?"


_WARNED: set[str] = set()


def warn(message: str) -> None:
    """One ``warning:`` line on stderr per distinct message (the report and the figures read the same cells)."""
    if message not in _WARNED:
        _WARNED.add(message)
        print(f"warning: {message}", file=sys.stderr)


#: what every cell's run.json holds (the report reads them without checking again)
RUN_JSON_KEYS = ("engine", "config", "dataset", "tokenizer")


class Unreadable(Exception):
    """A stored file of a cell that cannot be read; ``str()`` names the file and the reason."""


def find_runs(root: Path) -> list[Path]:
    """Cell folders (those with a ``run.json``) under ``root``; folders holding result files without one are
    named in a warning (a run killed before it wrote its first file, or files copied without it)."""
    root = Path(root)
    runs = sorted(p.parent for p in root.rglob("run.json") if ".hydra" not in p.parts)
    have = set(runs)
    orphans = sorted({p.parent for pat in ("*.parquet", "parts") for p in root.rglob(pat)
                      if ".hydra" not in p.parts and p.parent not in have})
    for d in orphans:
        warn(f"{d} holds result files but no run.json: not reported (re-run the cell, or remove the folder)")
    return runs


def read_cell_file(run_dir: Path, name: str):
    """A cell's ``run.json`` (dict) or ``<name>.parquet`` (DataFrame); None when absent; Unreadable if damaged."""
    path = Path(run_dir) / name
    if not path.exists():
        return None
    try:
        got = json.loads(path.read_text()) if name.endswith(".json") else pd.read_parquet(path)
    except Exception as err:   # noqa: BLE001 - json, OS and pyarrow errors all mean "cannot use this file"
        raise Unreadable(f"cannot read {path} ({type(err).__name__}: {str(err)[:160]})") from None
    if name == "run.json":   # a foreign or truncated file is one skipped cell, never a failed report (issue 27)
        missing = [k for k in RUN_JSON_KEYS if not isinstance(got, dict) or k not in got]
        if missing:
            raise Unreadable(f"{path} is not a gcdbench run.json (no {', '.join(missing)})")
    return got


def cell_commits(meta: dict, samples: pd.DataFrame | None) -> tuple[str, ...]:
    """The commits (7 characters) a cell's rows were measured at, from the per-row provenance (else the cell's)."""
    if samples is not None and "git_commit" in samples:
        return tuple(sorted({str(c)[:7] for c in samples["git_commit"].dropna()}))
    c = meta.get("git_commit")
    return (c.removesuffix("-dirty")[:7],) if c else ()


def measured_at(cells: pd.DataFrame) -> str:
    """One sentence naming the commit(s) and machine(s) the cells of one table were measured at; when they come
    from several commits or machines, how many cells each group has (and which, for every group but the largest
    unless it is small), so a table never mixes commits or machines silently."""
    if cells.empty:
        return ""
    groups: dict[tuple, list[str]] = {}
    for _, c in cells.iterrows():
        commit, machine = c.get("commit"), c.get("machine")
        key = (tuple(commit.split("+")) if isinstance(commit, str) and commit else (),
               machine if isinstance(machine, str) else "")
        groups.setdefault(key, []).append(
            f"{c['config']} × {c['dataset']}" + (f" B={int(c['B'])}" if "B" in c and pd.notna(c.get("B")) else ""))

    def label(commits: tuple, machine: str) -> str:
        return ("+".join(f"`{x}`" for x in commits) or "an unknown commit") + (f" on {machine}" if machine else "")

    if len(groups) == 1:
        ((commits, machine), names), = groups.items()
        what = (f"commit `{commits[0]}`" if len(commits) == 1 else
                "commits " + ", ".join(f"`{x}`" for x in commits) + " (cells of mixed commits)" if commits
                else "an unknown commit")
        on = f" on {machine}" if machine else ""
        return f"Measured at {what}{on}: " + ("the one cell." if len(names) == 1 else f"all {len(names)} cells.")
    n_commits = len({commits for commits, _ in groups})
    n_machines = len({machine for _, machine in groups})
    head = (f"**Cells of {n_commits} commits in this table**" if n_commits > 1 else
            f"**Cells of {n_machines} machines in this table** (compare timings only within one machine)")
    parts = []
    for i, ((commits, machine), names) in enumerate(sorted(groups.items(), key=lambda kv: -len(kv[1]))):
        named = len(names) <= 12 or i > 0   # every group but the largest names its cells
        parts.append(f"{label(commits, machine)}: {len(names)} cell{'s' if len(names) > 1 else ''}"
                     + (f" ({', '.join(names)})" if named else ""))
    return head + ": " + "; ".join(parts) + "."


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


def first_engine_info(meta: dict) -> dict:
    """The engine's ``info()`` at the cell's first compile (``run.json``'s ``inits[0]``), or ``{}``."""
    return (meta.get("inits") or [{}])[0].get("engine_info") or {}


def cell_stats(run_dir: Path) -> dict:
    """One cell's numbers, computed from its stored files (raises Unreadable for a damaged file)."""
    meta = read_cell_file(run_dir, "run.json")
    samples = read_cell_file(run_dir, "samples.parquet")
    steps = read_cell_file(run_dir, "steps.parquet")
    audit = read_cell_file(run_dir, "audit.parquet")
    if samples is None:   # the identity is written before any row: a run stopped (or still running) before its first
        raise Unreadable(f"{run_dir} holds no rows yet (a run stopped before it stored its first samples; run the "
                         "same command again to resume it)")
    if meta.get("n_rows") is not None and meta["n_rows"] != len(samples):
        warn(f"{run_dir}: run.json describes {meta['n_rows']} samples, samples.parquet holds {len(samples)} "
             "(a run stopped while merging; re-run the cell to repair it)")
    row = {
        "engine": meta["engine"], "config": meta["config"], "dataset": meta["dataset"], "tokenizer": meta["tokenizer"],
        "requested": meta.get("n_samples"), "init_s": meta.get("init_s"), "compile_error": meta.get("compile_error"),
        "aborted": meta.get("aborted"),
        "machine": "{cpu} ({cpu_count} cores, {memory_gb} GB)".format(**{"cpu": "?", "cpu_count": "?", "memory_gb": "?",
                                                                        **(meta.get("machine") or {})}),
        "gpu": (meta.get("machine") or {}).get("gpu"), "peak_rss_compile_mb": meta.get("peak_rss_compile_mb"),
        "peak_rss_samples_mb": meta.get("peak_rss_samples_mb"), "path": str(run_dir),
        "init_cache_hit": bool(first_engine_info(meta).get("cache_hit")), "ttfm_s": meta.get("ttfm_s"),
        "compile_error_kind": meta.get("compile_error_kind"), "audit_per_sample": _audit_depth(meta),
        "audit_error": meta.get("audit_error"), "provenance": provenance(meta, samples),
        "commit": "+".join(cell_commits(meta, samples)),
        "outcome_counts": meta.get("outcomes") or {},
        "ambiguous": bool((meta.get("dataset_meta") or {}).get("ambiguous", False)),
        "batch_size": ((meta.get("identity") or {}).get("batch") or {}).get("size"),
    }
    if samples is not None:
        counts = samples["outcome"].value_counts()
        attempted = samples[samples["outcome"].map(lambda o: Outcome(o).attempted)]
        row["samples"] = int(len(attempted))
        row["passed"] = int(counts.get(Outcome.OK.value, 0))
        row["pass_rate"] = row["passed"] / len(attempted) if len(attempted) else np.nan
        row["outcomes"] = ", ".join(f"{k}: {v}" for k, v in counts.items())
        row["outcome_counts"] = {str(k): int(v) for k, v in counts.items()}
    if steps is not None and len(steps):
        us = steps["mask_us"].to_numpy()
        row.update(mask_n=int(us.size), mask_mean_us=float(us.mean()), mask_p50_us=float(np.percentile(us, 50)),
                   mask_p99_us=float(np.percentile(us, 99)), mask_p999_us=float(np.percentile(us, 99.9)),
                   mask_max_us=float(us.max()))
    if audit is not None and len(audit):
        row.update(audit_counts(audit))
    return row


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


def has_profile_columns(audit: pd.DataFrame) -> bool:
    """Whether an ``audit.parquet`` carries the declared-profile comparison (cells audited before it do not)."""
    return all(c in audit.columns for c in PROFILE_AUDIT_COLUMNS)


def _audit_depth(meta: dict):
    """``audit.per_sample`` of the cell's sessions (None when unknown; the largest if they differ)."""
    depths = [s.get("audit_per_sample") for s in meta.get("sessions", []) if s.get("audit_per_sample") is not None]
    if depths:
        return max(depths)
    hc = meta.get("hydra_config") or {}
    return (hc.get("audit") or {}).get("per_sample")


def collect(root: Path) -> pd.DataFrame:
    """One row per readable cell under ``root`` (``cell_stats``); damaged cells are skipped with a warning and
    listed in ``attrs["skipped"]``."""
    rows, skipped = [], []
    for r in find_runs(root):
        try:
            rows.append(cell_stats(r))
        except Unreadable as err:
            msg = f"{err}: cell {r} skipped"
            warn(msg)
            skipped.append(msg)
    df = pd.DataFrame(rows)
    df.attrs["skipped"] = skipped
    return df


def _get(c, key):
    """A cell value, with pandas' NaN for a missing value read as None."""
    v = c.get(key)
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else v


def _fmt_us(x) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "–"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def _fmt_s(x) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "–"
    return f"{x:.2f}s" if x < 100 else f"{x:.0f}s"


def table1(cells: pd.DataFrame, tokenizer: str = "qwen3") -> tuple[pd.DataFrame, list[str]]:
    """Rows = engine configs, per dataset: complexity, init, per-mask mean (µs), p50/p99/max, pass rate."""
    cells = cells[cells["tokenizer"] == tokenizer]
    notes: list[str] = []
    datasets = [d for d in DATASET_ORDER if d in set(cells["dataset"])] + sorted(
        set(cells["dataset"]) - set(DATASET_ORDER))
    out = []
    for config, grp in cells.groupby("config", sort=False):
        row = {"Method": config}
        for ds in datasets:
            c = grp[grp["dataset"] == ds]
            if c.empty:
                for col in ("Cmplx.", "Init", "Per-mask µs", "p50/p99/max µs", "Pass"):
                    row[f"{ds} {col}"] = ""
                continue
            c = c.iloc[0]
            row[f"{ds} Cmplx."] = complexity(c["engine"], bool(_get(c, "ambiguous")))
            if isinstance(c.get("compile_error"), str) and c["compile_error"]:
                notes.append(f"{config} × {ds}: not run: {c['compile_error'].splitlines()[0][:200]}")
                row[f"{ds} Init"] = "×"
                row[f"{ds} Per-mask µs"] = f"× [{len(notes)}]"
                row[f"{ds} p50/p99/max µs"] = "×"
                row[f"{ds} Pass"] = "×"
                continue
            mark = ""
            n_ok_cells = int(_get(c, "samples") or 0)
            passed, requested, aborted = int(_get(c, "passed") or 0), _get(c, "requested"), _get(c, "aborted")
            if aborted or (requested and passed < requested):
                notes.append(
                    f"{config} × {ds}: estimated from {int(_get(c, 'mask_n') or 0)} masks of {n_ok_cells} samples "
                    f"({_get(c, 'outcomes') or ''})" + (f"; {aborted}" if aborted else ""))
                mark = f" [{len(notes)}]"
            if _get(c, "provenance"):
                notes.append(f"{config} × {ds}: not from one clean commit: {c['provenance']}")
                mark += f" [{len(notes)}]"
            row[f"{ds} Init"] = _fmt_s(c.get("init_s"))
            if _get(c, "init_cache_hit"):
                notes.append(f"{config} × {ds}: init read from the engine's on-disk cache, not a cold compile")
                row[f"{ds} Init"] += f" [{len(notes)}]"
            row[f"{ds} Per-mask µs"] = _fmt_us(c.get("mask_mean_us")) + mark
            row[f"{ds} p50/p99/max µs"] = "/".join(_fmt_us(c.get(k)) for k in ("mask_p50_us", "mask_p99_us", "mask_max_us"))
            pr = c.get("pass_rate")
            row[f"{ds} Pass"] = "–" if pr is None or pd.isna(pr) else f"{passed}/{n_ok_cells}"
        out.append(row)
    return pd.DataFrame(out), notes


def details(cells: pd.DataFrame) -> pd.DataFrame:
    """Every cell: outcomes, init and TTFM, mask-time percentiles (p99.9 included), audit agreement, peak memory
    per phase, the commit(s) its rows were measured at, provenance."""
    audit_cols = list(AUDIT_DETAIL_COLUMNS)
    lang = cells["audit_agree_language"] if "audit_agree_language" in cells else pd.Series(np.nan, cells.index)
    if "audit_agree" not in cells or not (cells["audit_agree"].notna() & lang.isna()).any():
        audit_cols.remove("audit_agree")   # no cell audited before profiles: it equals audit_agree_language
    cols = ["engine", "config", "dataset", "tokenizer", "samples", "passed", "outcomes", "init_s", "init_cache_hit",
            "ttfm_s", "mask_n", "mask_mean_us", "mask_p50_us", "mask_p99_us", "mask_p999_us", "mask_max_us",
            *audit_cols, "peak_rss_compile_mb", "peak_rss_samples_mb", "commit", "provenance", "machine", "gpu"]
    d = cells.reindex(columns=cols)
    for col in ("samples", "passed", "mask_n", *(c for c in audit_cols if c != "audit_profile")):
        d[col] = d[col].astype("Int64")
    return d.sort_values(["dataset", "tokenizer", "config"]).reset_index(drop=True)


def _markdown(df: pd.DataFrame, parse_numbers: bool = True) -> str:
    """``df`` as a Markdown table (pandas' ``to_markdown``): missing values empty, floats as ``1,234.5``;
    ``parse_numbers=False`` prints string cells exactly as they are (Table 1's formatted entries)."""
    cells = df.astype(object).where(df.notna(), None)
    return cells.to_markdown(index=False, floatfmt=",.1f", missingval="", disable_numparse=not parse_numbers)


def artifacts(root: Path) -> dict[str, pd.DataFrame]:
    """Per engine that declares ``artifact_keys``: one row per dataset with the sizes its compile reported
    (first init of the cell, from ``run.json``), e.g. the CNF counts seed 000 reports for Valiant."""
    rows: dict[str, list] = {}
    for run_dir in find_runs(root):
        try:
            meta = read_cell_file(run_dir, "run.json")
        except Unreadable:
            continue   # collect() warns about it
        cls = _engine_class(meta["engine"])
        keys = cls.artifact_keys if cls is not None else {}
        info = first_engine_info(meta)
        if not keys or not info:
            continue
        row = {"dataset": meta["dataset"], "tokenizer": meta["tokenizer"]}
        for col, path in keys.items():
            v = info
            for k in path:
                v = v.get(k) if isinstance(v, dict) else None
            row[col] = v
        rows.setdefault(meta["engine"], []).append(row)
    return {eng: pd.DataFrame(r).drop_duplicates(["dataset", "tokenizer"]).sort_values(["dataset", "tokenizer"])
            .reset_index(drop=True) for eng, r in sorted(rows.items())}


def audit_agreement(c: dict) -> str:
    """"N/M steps agree exactly with the harness's language, K/M with the declared profile (<profile>)" for a
    cell's ``cell_stats`` (an audit stored before declared profiles says so); "" when the cell has no audit."""
    steps = _get(c, "audit_steps")
    if not steps:
        return ""
    steps = int(steps)
    if _get(c, "audit_agree_language") is None:
        return (f"{int(_get(c, 'audit_agree') or 0)}/{steps} steps agree exactly with the reference (audit stored "
                "before declared profiles; re-run the cell for the comparison with its profile)")
    return (f"{int(c['audit_agree_language'])}/{steps} steps agree exactly with the harness's language, "
            f"{int(c['audit_agree_profile'])}/{steps} with the declared profile ({c['audit_profile']})")


def _audit_text(c: dict) -> str:
    if _get(c, "audit_steps"):
        return "audit: " + audit_agreement(c)
    if c.get("audit_error"):
        return f"not audited: {c['audit_error'].splitlines()[0][:200]}"
    if c.get("audit_per_sample") == 0:
        return "not audited (audit.per_sample=0)"
    return "not audited"


# --------------------------------------------------------------------------------------------------------------
# disagreements with the declared profile
# --------------------------------------------------------------------------------------------------------------
DISAGREEMENT_COLUMNS = ["dataset", "config", "tokenizer", "kind", "sample_id", "step", "prefix", "token",
                        "n_false_allow", "false_allow", "n_false_block", "false_block", "message", "profile", "path"]
REFUSALS = (Outcome.REJECTED.value, Outcome.NO_EOS.value)
MAX_LISTED = 10   # disagreements listed per cell in the report (all go to the CSV)
SHOWN_EXAMPLES = 3   # false allows / blocks shown per listed step


def disagreements(run_dirs, keep=None) -> pd.DataFrame:
    """Every audited step whose mask differs from the engine's declared profile, and every refused sample
    (``rejected`` / ``no_eos``) whose refused step is not shown to agree with that profile, of the cells in
    ``run_dirs`` (``keep(dataset)`` picks cells by dataset; damaged files are skipped, ``collect`` warns).

    One row each (``DISAGREEMENT_COLUMNS``): ``kind`` is ``audit`` or the refusal's outcome; ``n_false_allow``,
    ``n_false_block`` count the tokens against the profile and ``false_allow``, ``false_block`` list the audit's
    examples (token bytes as Python writes them; None and [] for a refusal without a profile audit row). The
    runner audits every refused step, so a refusal the profile explains (its audit row agrees with the profile)
    is left out, and an unexplained one carries its audit row's examples. Audits stored before declared profiles
    give no audit rows (their refusals are listed without examples)."""
    rows = []
    for d in run_dirs:
        try:
            meta = read_cell_file(d, "run.json")
            ds = meta.get("dataset", "")
            if keep is not None and not keep(ds):
                continue
            audit = read_cell_file(d, "audit.parquet")
            samples = read_cell_file(d, "samples.parquet")
        except Unreadable:
            continue
        prefixes = {} if audit is None else {(a["sample_id"], int(a["step"])): str(a["prefix"])
                                             for a in audit[["sample_id", "step", "prefix"]].to_dict("records")}
        audit = audit if audit is not None and has_profile_columns(audit) else None
        key = {"dataset": ds, "config": meta.get("config"), "tokenizer": meta.get("tokenizer")}
        pieces = (meta.get("dataset_meta") or {}).get("pieces") or {}
        by_step = {} if audit is None else {(a["sample_id"], int(a["step"])): a for a in audit.to_dict("records")}
        profile = "" if audit is None or not len(audit) else "; ".join(sorted(set(audit["profile"].astype(str))))
        used = set()
        refused = samples[samples["outcome"].isin(REFUSALS)] if samples is not None else ()
        for s in (refused.to_dict("records") if len(refused) else ()):
            message = s.get("message") if isinstance(s.get("message"), str) else ""
            m = re.search(r"step (\d+)", message)
            n_steps = s.get("n_steps")
            step = int(m.group(1)) if m else (int(n_steps) - 1 if pd.notna(n_steps) and n_steps else None)
            a = by_step.get((s["sample_id"], step))
            if a is not None:
                used.add((s["sample_id"], step))
                if bool(a["agree_profile"]):
                    continue   # the declared profile explains the refusal
            prefix, token = _pieces_context(pieces, s["sample_id"], step)
            rows.append({**key, "kind": s["outcome"], "sample_id": s["sample_id"], "step": step,
                         "prefix": prefix or prefixes.get((s["sample_id"], step), ""), "token": token,
                         **_profile_diff(a), "message": message[:300], "profile": profile,
                         "path": str(d)})
        for (sid, step), a in by_step.items():
            if (sid, step) in used or bool(a["agree_profile"]):
                continue
            rows.append({**key, "kind": "audit", "sample_id": sid, "step": step, "prefix": str(a["prefix"]),
                         "token": "", **_profile_diff(a), "message": "", "profile": profile, "path": str(d)})
    return pd.DataFrame(rows, columns=DISAGREEMENT_COLUMNS)


def _pieces_context(pieces: dict, sample_id: str, step) -> tuple[str, str]:
    """(prefix, token at ``step``) of a sampled sequence from its stored pieces; ('', '') when unknown."""
    p = pieces.get(sample_id)
    if not p or step is None:
        return "", ""
    return "".join(p[:step])[-200:], (p[step] if step < len(p) else "<EOS>")


def _profile_diff(a) -> dict:
    """An audit row's false allows and false blocks against the declared profile: counts and examples."""
    if a is None:
        return {"n_false_allow": None, "false_allow": [], "n_false_block": None, "false_block": []}
    return {"n_false_allow": int(a["n_false_allow_profile"]), "false_allow": list(a["false_allow_examples_profile"]),
            "n_false_block": int(a["n_false_block_profile"]), "false_block": list(a["false_block_examples_profile"])}


def write_disagreements(dis: pd.DataFrame, path: Path) -> None:
    """:func:`disagreements` as CSV, each list of examples as a JSON array."""
    dis.assign(**{c: dis[c].map(lambda v: json.dumps(list(v), ensure_ascii=False))
                  for c in ("false_allow", "false_block")}).to_csv(path, index=False)


def md_code(s) -> str:
    """``s`` made safe inside Markdown inline code in a table or list (no backticks, pipes or raw newlines)."""
    return str(s).replace("`", "ˋ").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t").replace("|", "\\|")


def _examples(n, examples, k: int = SHOWN_EXAMPLES) -> str:
    """"count (`a`, `b`, `c` …)": the count and the first ``k`` examples, each in inline code."""
    ex = list(examples)[:k]
    more = " …" if n > len(ex) else ""
    return f"{n}" + (" (" + ", ".join(f"`{md_code(e)}`" for e in ex) + more + ")" if ex else "")


def disagreement_line(r: dict, width: int = 60) -> str:
    """One Markdown list item for a row of :func:`disagreements`."""
    head = f"`{md_code(r['sample_id'])}` step {r['step']}"
    prefix = r["prefix"] if isinstance(r["prefix"], str) else ""
    tail = f"after `…{md_code(prefix[-width:])}`" if prefix else ("at the start" if r["step"] == 0 else "")
    fa, fb = (_examples(int(r[f"n_{k}"]), r[k]) if pd.notna(r[f"n_{k}"]) else None
              for k in ("false_allow", "false_block"))
    if r["kind"] == "audit":
        return f"- {head}: {tail + ', ' if tail else ''}false allows {fa}; false blocks {fb}"
    what = f"refused `{md_code(r['token'])}`" if r["token"] else f"refused: {md_code(r['message'])}"
    diff = (f"; its mask there: false allows {fa}, false blocks {fb}" if fa is not None else
            "; not audited against the declared profile")
    return f"- {head} ({r['kind']}): {tail + ' ' if tail else ''}the engine {what}{diff}"


def disagreement_section(cells: pd.DataFrame, dis: pd.DataFrame, csv_name: str = "disagreements.csv",
                         limit: int = MAX_LISTED) -> list[str]:
    """README lines of the "Disagreements" section: per cell, agreement with the language and with the declared
    profile, the differences the profile explains, and every disagreement with it (``limit`` listed per cell,
    all in ``csv_name``)."""
    lines = ["## Disagreements", "",
             "Per cell: audited steps whose whole-vocabulary mask equals the reference's under the harness's "
             "language and under the engine's declared profile (`Engine.profile()`, executed exactly by the "
             "reference); *explained* = steps that differ from the language but agree with the profile; "
             "*disagree* = audited steps that differ from the profile; *refusals* = samples whose oracle token (or "
             "final EOS) the engine refused where its audit row does not agree with the profile. Each disagreement "
             f"is listed below with examples (at most {limit} per cell; all in `{csv_name}`). Examples are token "
             "bytes as Python writes them; `<EOS>` is the end-of-sequence token.", ""]
    refusal = dis[dis["kind"] != "audit"].groupby("path").size() if len(dis) else pd.Series(dtype=int)
    roots = "root" in cells and cells["root"].nunique() > 1   # cells of several folders: say which
    summary = []
    for _, c in cells.sort_values(["dataset", "tokenizer", "config"]).iterrows():
        c = c.to_dict()
        audited = _get(c, "audit_steps")
        profiled = audited and _get(c, "audit_agree_language") is not None
        if profiled:
            note = ""
        elif audited:
            note = "audit stored before declared profiles (re-run the cell)"
        elif _get(c, "compile_error") and not _get(c, "mask_n"):
            note = "not run (compile error)"
        else:
            note = _audit_text(c)
        summary.append({
            "config": c["config"], "dataset": c["dataset"], "tokenizer": c["tokenizer"],
            **({"results": c["root"]} if roots else {}),
            "declared profile": c.get("audit_profile") if profiled else "",
            "audited": int(audited or 0),
            "agree (language)": int(c["audit_agree_language"]) if profiled else None,
            "agree (profile)": int(c["audit_agree_profile"]) if profiled else None,
            "explained": int(c["audit_explained_by_profile"]) if profiled else None,
            "disagree": int(audited) - int(c["audit_agree_profile"]) if profiled else None,
            "refusals": int(refusal.get(c["path"], 0)),
            "note": note,
        })
    table = pd.DataFrame(summary)
    for col in ("agree (language)", "agree (profile)", "explained", "disagree"):
        table[col] = table[col].astype("Int64")
    lines += [_markdown(table), ""]
    for path, rows in (dis.groupby("path", sort=False) if len(dis) else ()):
        c = cells[cells["path"] == path]
        c = c.iloc[0].to_dict() if len(c) else {}
        r0 = rows.iloc[0]
        agreement = audit_agreement(c)
        explained = _get(c, "audit_explained_by_profile")
        lines.append(f"**{r0['config']} × {r0['dataset']} ({r0['tokenizer']})**"
                     + (f" in `{c['root']}`" if roots and c else "")
                     + (f": {agreement}" if agreement else "")
                     + (f"; {int(explained)} of the differences from the language are the declared profile's"
                        if explained is not None else "")
                     + f". Listed: {len(rows)}.")
        lines.append("")
        lines += [disagreement_line(r) for r in rows.head(limit).to_dict("records")]
        if len(rows) > limit:
            lines.append(f"- … and {len(rows) - limit} more (`{csv_name}`)")
        lines.append("")
    if not len(dis):
        lines += ["No audited step differs from its engine's declared profile, and no refusal is unexplained.", ""]
    return lines


def cell_summary(run_dir: Path) -> str:
    """The line the runner prints when a cell ends: outcomes, init, TTFM, mask-time percentiles, audit,
    provenance warnings; a compile error in full (first 2,000 characters)."""
    c = cell_stats(Path(run_dir))
    head = f"{c['config']} on {c['dataset']} ({c['tokenizer']})" + (f" batch {c['batch_size']}" if c.get("batch_size")
                                                                    else "")
    if c.get("compile_error") and not c.get("mask_n"):
        kind = f" [{c['compile_error_kind']}]" if c.get("compile_error_kind") else ""
        return f"{head}: compile error{kind}: {c['compile_error']}"
    prov = f"; WARNING: {c['provenance']}" if c.get("provenance") else ""
    return (f"{head}: pass {c.get('passed', 0)}/{c.get('samples', 0)}, init {_fmt_s(c.get('init_s'))}, "
            f"TTFM {_fmt_s(c.get('ttfm_s'))}, per-mask mean {_fmt_us(c.get('mask_mean_us'))} µs "
            f"(p50 {_fmt_us(c.get('mask_p50_us'))}, p99 {_fmt_us(c.get('mask_p99_us'))}, "
            f"p99.9 {_fmt_us(c.get('mask_p999_us'))}, max {_fmt_us(c.get('mask_max_us'))}; {c.get('mask_n', 0)} masks); "
            f"{_audit_text(c)}  [{c.get('outcomes', '')}]{prov}{_batch_text(Path(run_dir), c)}")


def _batch_text(run_dir: Path, c: dict) -> str:
    """A batch cell's part of its summary line: B, threads, steps, step latency and per-sequence cost."""
    if not c.get("batch_size"):
        return ""
    b = batch_stats(run_dir)
    if not b.get("batch_steps"):
        return "; no batch step"
    return (f"; {b.get('threads')} thread(s), {b['batch_steps']} batch steps ({b['full_steps']} full), "
            f"step p50 {_fmt_us(b['step_p50_us'])} µs, per sequence {_fmt_us(b['per_seq_us'])} µs")


def write_report(results: Path, out: Path, tokenizer: str = "qwen3", also: tuple = (), batch: tuple = (),
                 before: tuple = (), cliffs: Path | None = None) -> str:
    """Tables, README.md and figures under ``out`` from the run folders under ``results`` (Table 1), ``also``
    (further runs, each with its per-prefix-length tails), ``batch`` (batch mode), ``before`` (per-prefix tail
    CSVs of earlier commits, drawn beside the further runs' tails in the growth figure) and ``cliffs`` (a folder
    with ``bench.json``, ``runs/`` and ``reproducers.json`` of the fuzzed grammars)."""
    cells = collect(results)
    batch_roots = ([results] if is_batch(cells).any() else []) + [Path(b) for b in batch]
    cells = single_mode(cells)
    if cells.empty:
        raise SystemExit(f"no run.json under {results}: run `python -m experiments.run ...` first")
    out.mkdir(parents=True, exist_ok=True)
    for old in (out / "figures").glob("*"):   # the report owns <out>/figures: no figure of an earlier report stays
        if old.suffix in (".png", ".pdf"):
            old.unlink()
    t1, notes = table1(cells, tokenizer)
    t1.to_csv(out / "table1.csv", index=False)
    (out / "table1.tex").write_text(t1.to_latex(index=False, escape=True))
    note_lines = [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
    md_t1 = _markdown(t1, parse_numbers=False) + ("\n\n" + "\n".join(f"- {n}" for n in note_lines) if notes else "")
    (out / "table1.md").write_text(md_t1 + "\n")
    det = details(cells)
    det.to_csv(out / "cells.csv", index=False)
    from gcdbench.experiments.beyond import is_beyond   # suite and sampled cells: listed in their own section

    main_cells = pd.concat([cells.assign(root=str(results)), *(collect(Path(a)).assign(root=str(a)) for a in also)],
                           ignore_index=True)
    main_cells = main_cells[~main_cells["dataset"].map(is_beyond)]
    dis = disagreements([Path(p) for p in main_cells["path"]])
    write_disagreements(dis, out / "disagreements.csv")
    machines = sorted({str(m) for m in cells["machine"].dropna()})
    readme = [
        "# Results", "",
        f"Generated by `python -m experiments.report --results {results} --out {out}"
        + (" --also " + " ".join(map(str, also)) if also else "")
        + (" --batch " + " ".join(map(str, batch)) if batch else "")
        + (" --before " + " ".join(map(str, before)) if before else "") + "` from the stored run folders; "
        "do not edit by hand.", "",
        f"## Table 1 ({tokenizer} vocabulary)", "",
        "Init = engine compile time for the grammar and vocabulary. Per-mask = mean time of one next-token mask "
        "(µs), p50/p99/max over every mask of the cell. Pass = samples whose every oracle token and final EOS "
        "were allowed. × = the engine could not run the cell (reason in the notes).", "",
        md_t1, "",
        measured_at(cells[cells["tokenizer"] == tokenizer]), "",
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
        _markdown(det.drop(columns=["machine", "gpu"])), "",
        measured_at(cells), "",
        *disagreement_section(main_cells, dis),
        *(["## Not reported", "", *[f"- {m}" for m in cells.attrs.get("skipped", [])], ""]
          if cells.attrs.get("skipped") else []),
        "## Engine artifacts", "",
        "Sizes each engine's compile reported (its `info()` in `run.json`), per dataset and vocabulary.", "",
        *[line for eng, df in artifacts(results).items()
          for line in (f"**{eng}**", "", _markdown(df.astype(object)), "")],
        "## Machines", "",
        *[f"- {m}" for m in machines],
        *[f"- GPU: {g}" for g in sorted({g for g in cells["gpu"].dropna() if g})],
    ]
    for root in also:
        readme += further_runs(Path(root), out, before=before)
    from gcdbench.experiments.beyond import beyond_section   # suite and sampled cells (also in <results>/../suite)
    readme += beyond_section([results, *map(Path, also), Path(results).parent / "suite"], out, tokenizer)
    if batch_roots:
        readme += batch_section(batch_roots, out, cells)
    if cliffs is not None:
        from gcdbench.experiments.cliffs_report import cliffs_section

        cliffs = Path(cliffs)
        readme += cliffs_section(cliffs / "bench.json", cliffs / "runs", out, cliffs / "reproducers.json")
    (out / "README.md").write_text("\n".join(readme) + "\n")
    _add_figures(results, out)
    return md_t1


def prefix_tails(steps: pd.DataFrame) -> pd.DataFrame:
    """Masks, p50, p99 and max of ``mask_us`` at every prefix length (tokens), per cell."""
    keys = ["config", "dataset", "tokenizer", "prefix_tokens"]
    g = steps.groupby(keys)["mask_us"]
    return g.agg(masks="size", p50_us="median", p99_us=lambda x: float(np.percentile(x, 99)),
                 max_us="max").reset_index()


def read_before(path) -> tuple[str, pd.DataFrame]:
    """(label, table) of a per-prefix-length tail CSV kept from an earlier run (``prefix_tails_<name>.csv``, columns
    config, dataset, tokenizer, prefix_tokens, p50_us, p99_us, ...); the label is the file stem's last ``_`` part
    (name such files ``..._<commit>.csv``)."""
    path = Path(path)
    try:
        t = pd.read_csv(path)
    except (OSError, ValueError) as err:
        raise SystemExit(f"--before {path}: cannot read it as a prefix-tail CSV ({err}); give a prefix_tails_*.csv "
                         "an earlier report wrote") from None
    missing = {"config", "dataset", "tokenizer", "prefix_tokens", "p50_us", "p99_us"} - set(t.columns)
    if missing:
        raise SystemExit(f"--before {path}: columns {sorted(missing)} missing; give a prefix_tails_*.csv an earlier "
                         "report wrote")
    return f"before ({path.stem.rsplit('_', 1)[-1]})", t


def growth_lines(tails: pd.DataFrame, root: Path, before: tuple, out: Path, name: str,
                 limit_us: float) -> list[str]:
    """The growth figure (per-length p50/p99, earlier runs beside this one) and one line per earlier run with the
    matching cell's numbers, for every (config, dataset, tokenizer) that an earlier CSV also holds."""
    from gcdbench.experiments.figures import _save, fig_growth

    lines = []
    commits = sorted({str(json.loads(p.read_text()).get("git_commit") or "?")[:7]
                      for p in Path(root).rglob("run.json") if ".hydra" not in p.parts})
    now = f"this run ({', '.join(commits) or 'commit unknown'})"
    for path in before:
        label, old = read_before(path)
        for (config, ds, tok), t in tails.groupby(["config", "dataset", "tokenizer"]):
            o = old[(old["config"] == config) & (old["dataset"] == ds) & (old["tokenizer"] == tok)]
            if o.empty:
                continue
            fig = fig_growth({label: o, now: t}, limit_us)
            stem = f"growth_{name}_{config}_{tok}"
            _save(fig, out / "figures", stem)
            lines += [f"**Growth, {config} on {ds} ({tok})**, {label} → {now}: highest per-length p99 "
                      f"{_fmt_us(o['p99_us'].max())} → {_fmt_us(t['p99_us'].max())} µs; lengths over "
                      f"{_fmt_us(limit_us)} µs: {int((o['p99_us'] > limit_us).sum())} of {len(o)} → "
                      f"{int((t['p99_us'] > limit_us).sum())} of {len(t)}; median of the per-length p50 "
                      f"{_fmt_us(o['p50_us'].median())} → {_fmt_us(t['p50_us'].median())} µs (`{path}`).", "",
                      f"![{stem}](figures/{stem}.png) ([PDF](figures/{stem}.pdf))", ""]
    return lines


def further_runs(root: Path, out: Path, limit_us: float = 1000.0, before: tuple = ()) -> list[str]:
    """README lines for a run folder outside the Table 1 sweep, and its per-prefix-length tail files (and the
    growth figure against ``before``: per-prefix tail CSVs of earlier runs)."""
    from gcdbench.experiments.figures import _save, fig_mask_vs_prefix, load_cells, load_steps

    cells = single_mode(collect(root))
    if cells.empty:
        return [f"## Further runs: `{root}`", "", "No run.json found.", ""]
    name = Path(root).name
    lines = [f"## Further runs: `{root}`", "", _markdown(details(cells).drop(columns=["machine", "gpu"])), "",
             measured_at(cells), ""]
    steps = load_steps(root)
    if steps.empty:
        return lines
    tails = prefix_tails(steps)
    tails.to_csv(out / f"prefix_tails_{name}.csv", index=False)
    for (config, ds, tok), t in tails.groupby(["config", "dataset", "tokenizer"]):
        worst = t.loc[t["p99_us"].idxmax()]
        over = t[t["p99_us"] > limit_us]
        lines += [
            f"**{config} on {ds} ({tok})**: {int(t['masks'].sum()):,} masks over prefix lengths 0–"
            f"{int(t['prefix_tokens'].max())} tokens. Highest per-length p99: {_fmt_us(worst['p99_us'])} µs at "
            f"length {int(worst['prefix_tokens'])} ({int(worst['masks'])} masks). Lengths whose p99 exceeds "
            f"{_fmt_us(limit_us)} µs: {len(over)} of {len(t)}"
            + (f" ({', '.join(str(int(x)) for x in over['prefix_tokens'][:20])}"
               + (", ..." if len(over) > 20 else "") + ")" if len(over) else "") + ".", ""]
    lines += [f"Every length: `prefix_tails_{name}.csv` (masks, p50, p99, max per prefix length).", ""]
    figs = out / "figures"
    figs.mkdir(parents=True, exist_ok=True)
    lines += growth_lines(tails, root, before, out, name, limit_us)
    fcells = load_cells(root)
    for tok in sorted(set(fcells["tokenizer"])):
        fig = fig_mask_vs_prefix(steps, fcells, tok, width=1)
        if fig is not None:
            stem = f"mask_vs_prefix_{name}_{tok}"
            _save(fig, figs, stem)
            lines += [f"![{stem}](figures/{stem}.png) ([PDF](figures/{stem}.pdf))", ""]
    return lines


def _add_figures(results: Path, out: Path) -> None:
    """Draw the figures into ``<out>/figures/`` and append a "Figures" section that links them to README.md."""
    from gcdbench.experiments.figures import CAPTIONS, draw_all

    pngs = [p for p in draw_all(results, out / "figures") if p.suffix == ".png"
            and not p.stem.startswith("batch_")]   # the batch section shows its own figure
    lines = ["", "## Figures", "",
             f"Drawn by `python -m experiments.figures --results {results} --out {out / 'figures'}` (PNG and PDF). "
             "Hatched bars and × entries are cells that produced no masks (compile error, time-out, out-of-memory); "
             "\"partial\" marks cells cut short by a limit.", ""]
    for p in pngs:
        caption = next((c for k, c in CAPTIONS.items() if p.stem.startswith(k)), p.stem)
        lines += [f"### {p.stem}", "", caption, "", f"![{p.stem}](figures/{p.name}) ([PDF](figures/{p.stem}.pdf))", ""]
    with open(out / "README.md", "a") as f:
        f.write("\n".join(lines))


# --------------------------------------------------------------------------------------------------------------
# batch mode
# --------------------------------------------------------------------------------------------------------------
def is_batch(cells: pd.DataFrame) -> pd.Series:
    """True for batch-mode cells (their identity has a batch size)."""
    if cells.empty or "batch_size" not in cells:
        return pd.Series(False, index=cells.index)
    return cells["batch_size"].notna()


def single_mode(cells: pd.DataFrame) -> pd.DataFrame:
    """The single-mode cells of ``collect``'s frame (Table 1 and the other single-mode tables and figures)."""
    out = cells[~is_batch(cells)]
    out.attrs.update(cells.attrs)
    return out


def batch_stats(run_dir: Path) -> dict:
    """A batch-mode cell's numbers from its stored files: ``cell_stats`` plus the batch size B, the threads its
    engine used, and the step latency (one ``fill_masks`` call) and per-sequence cost (step time / live
    sequences) over its *full* steps (all B slots live); a cell without a full step (fewer samples than B, or
    cut short by a limit) uses every step and says so (``step_basis``)."""
    row = cell_stats(run_dir)
    meta = read_cell_file(run_dir, "run.json")
    b = meta.get("batch") or {}
    row.update(B=int(row["batch_size"]), threads=b.get("threads"), threads_option=b.get("threads_option"))
    bs = read_cell_file(run_dir, "batch_steps.parquet")
    if bs is None or bs.empty:
        row.update(batch_steps=0, full_steps=0, step_basis=None)
        return row
    full = bs[bs["live"] == bs["size"]]
    use = full if len(full) else bs
    us = use["step_us"].to_numpy()
    row.update(batch_steps=int(len(bs)), full_steps=int(len(full)), step_basis="full" if len(full) else "all",
               live_mean=float(bs["live"].mean()), fallback_steps=int((bs["fallback"] > 0).sum()),
               batch_path_errors=int((bs["fallback"] == 2).sum()),
               step_mean_us=float(us.mean()), step_p50_us=float(np.percentile(us, 50)),
               step_p99_us=float(np.percentile(us, 99)), step_max_us=float(us.max()),
               per_seq_us=float((use["step_us"] / use["live"]).mean()),
               commit_per_seq_us=float((use["commit_us"] / use["live"]).mean()))
    return row


def collect_batch(roots) -> pd.DataFrame:
    """One row per readable batch-mode cell under ``roots`` (``batch_stats``); damaged cells are skipped with a
    warning (as in ``collect``)."""
    rows = []
    for root in roots:
        for r in find_runs(Path(root)):
            try:
                meta = read_cell_file(r, "run.json")
                if not (meta.get("identity") or {}).get("batch"):
                    continue
                rows.append(batch_stats(r))
            except Unreadable as err:
                warn(f"{err}: cell {r} skipped")
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.drop_duplicates("path").sort_values(["dataset", "tokenizer", "config", "B"]).reset_index(drop=True)
    return df


def batch_table(bcells: pd.DataFrame) -> pd.DataFrame:
    """The batch section's table: per dataset, engine config (its threads) and B: steps, step latency p50/p99,
    per-sequence cost and its gain over B=1 of the same config, outcomes, audit agreement."""
    rows = []
    for _, c in bcells.iterrows():
        base = bcells[(bcells["config"] == c["config"]) & (bcells["dataset"] == c["dataset"])
                      & (bcells["tokenizer"] == c["tokenizer"]) & (bcells["B"] == 1)]
        b1 = _get(base.iloc[0], "per_seq_us") if len(base) else None
        per = _get(c, "per_seq_us")
        audit = ""
        if _get(c, "audit_steps"):
            agree = _get(c, "audit_agree_profile")
            audit = f"{int(agree if agree is not None else _get(c, 'audit_agree') or 0)}/{int(c['audit_steps'])}"
            if _get(c, "audit_agree_single_mode") is not None:
                audit += f", single {int(c['audit_agree_single_mode'])}/{int(c['audit_steps'])}"
        err = _get(c, "compile_error")
        rows.append({
            "dataset": c["dataset"], "config": c["config"], "threads": _get(c, "threads"), "B": int(c["B"]),
            "steps (full)": f"{int(_get(c, 'batch_steps') or 0)} ({int(_get(c, 'full_steps') or 0)})",
            "step p50 µs": _fmt_us(_get(c, "step_p50_us")) + ("*" if c.get("step_basis") == "all" else ""),
            "step p99 µs": _fmt_us(_get(c, "step_p99_us")),
            "per-seq µs": _fmt_us(per),
            "gain vs B=1": f"{b1 / per:.2f}×" if b1 and per else "–",
            "outcomes": (f"× {err.splitlines()[0][:80]}" if err and not _get(c, "batch_steps") else
                         (c.get("outcomes") or "")) + (f"; batch call failed where every sequence's own fill_mask "
                                                      f"worked: {int(c['batch_path_errors'])} steps"
                                                      if _get(c, "batch_path_errors") else ""),
            "audit (agree, batch = single)": audit,
        })
    return pd.DataFrame(rows)


def batch_overview(bcells: pd.DataFrame) -> pd.DataFrame:
    """One row per dataset and engine config (its threads), one column per B: the per-sequence cost (µs) and, in
    brackets, its gain over B=1 (the detailed table's numbers, side by side); × = no batch step (compile error)."""
    rows = {}
    for _, r in batch_table(bcells).iterrows():
        key = (r["dataset"], r["config"], r["threads"])
        row = rows.setdefault(key, {"dataset": key[0], "config": key[1], "threads": key[2]})
        per, gain = r["per-seq µs"], r["gain vs B=1"]
        row[f"B={r['B']}"] = "×" if per == "–" and str(r["outcomes"]).startswith("×") else (
            per if gain == "–" or int(r["B"]) == 1 else f"{per} ({gain})")
    df = pd.DataFrame(list(rows.values()))
    bs = sorted({int(c[2:]) for c in df.columns if c.startswith("B=")})
    return df[["dataset", "config", "threads", *[f"B={b}" for b in bs]]]


def batch_section(roots, out: Path, single: pd.DataFrame | None = None) -> list[str]:
    """README lines of the batch section (table, ``batch.csv``, figure) for the batch-mode cells under ``roots``.
    An engine whose single-mode cell (``single``, e.g. Table 1's) on a dataset of the batch runs is a compile
    error, and that has no batch cell there, is listed with that reason."""
    from gcdbench.experiments.figures import _save, fig_batch

    bcells = collect_batch(roots)
    names = ", ".join(f"`{r}`" for r in roots)
    if bcells.empty:
        return ["## Batch decoding", "", f"No batch-mode cell under {names}.", ""]
    bcells.drop(columns=["outcome_counts"], errors="ignore").to_csv(out / "batch.csv", index=False)
    lines = [
        "## Batch decoding", "",
        f"From {names} (`python -m experiments.run -m experiment=batch_sweep`). B sequences are teacher-forced in "
        "lock-step; one step is one `fill_masks` call over every live sequence (a finished sequence's slot takes "
        "the next sample at once, as in continuous batching), timed as one. Step p50/p99 = latency of that call "
        "over the cell's full steps (all B slots live; * = no full step, every step used). Per-seq = step time / "
        "live sequences (mean); gain = per-seq at B=1 / per-seq at B, same config. Threads = the engine's thread "
        "option (`threads`, `max_threads`; engines without one run their batch path on one thread). Audit = "
        "audited steps agreeing with the reference (modulo documented differences), and steps whose batch row "
        "equals the sequence's own `fill_mask`. " + measured_at(bcells), "",
        "Per-sequence cost (µs) against B, with the gain over B=1 in brackets:", "",
        _markdown(batch_overview(bcells).fillna(""), parse_numbers=False), "",
        "Every cell (step latency, outcomes, audit):", "",
        _markdown(batch_table(bcells), parse_numbers=False), "",
        "Every cell's numbers: `batch.csv`.", ""]
    if single is not None and not single.empty and "compile_error" in single:
        have = set(zip(bcells["engine"], bcells["dataset"]))
        refused = single[single["dataset"].isin(set(bcells["dataset"])) & single["compile_error"].notna()]
        notes = sorted({(c["config"], c["dataset"], str(c["compile_error"]).splitlines()[0][:200])
                        for _, c in refused.iterrows() if (c["engine"], c["dataset"]) not in have})
        if notes:
            lines += ["Not run in batch mode (the engine does not compile the grammar in single mode):", "",
                      *[f"- {cfg} × {ds}: {why}" for cfg, ds, why in notes], ""]
    figs = out / "figures"
    figs.mkdir(parents=True, exist_ok=True)
    for tok in sorted(set(bcells["tokenizer"])):
        fig = fig_batch(bcells, tok)
        if fig is not None:
            stem = f"batch_{tok}"
            _save(fig, figs, stem)
            lines += [f"![{stem}](figures/{stem}.png) ([PDF](figures/{stem}.pdf))", ""]
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="results/runs", help="folder searched for run.json files")
    ap.add_argument("--out", default="results", help="where the tables and README.md go")
    ap.add_argument("--tokenizer", default="qwen3")
    ap.add_argument("--also", nargs="*", default=[], help="further run folders, each reported in its own section")
    ap.add_argument("--batch", nargs="*", default=[], help="folders of batch-mode runs (experiment=batch_sweep)")
    ap.add_argument("--before", nargs="*", default=[],
                    help="per-prefix tail CSVs of earlier runs (prefix_tails_<name>_<commit>.csv): a growth figure "
                         "draws them beside the --also runs' tails")
    ap.add_argument("--cliffs", default=None,
                    help="folder of the fuzzed-grammar results (bench.json, runs/, reproducers.json): a Cliffs section")
    args = ap.parse_args(argv)
    from gcdbench.experiments.config import folder_problem

    results, out = Path(args.results), Path(args.out)
    if not results.is_dir():
        ap.exit(2, f"error: --results {results}: " + (f"{results} is a file, not a folder" if results.exists()
                                                      else "no such folder") + "; give a folder of runs\n")
    problem = folder_problem(out)
    if problem:
        ap.exit(2, f"error: --out {out}: {problem}; give a folder (or a path to create)"
                   + (" you can write to" if problem.endswith("writable by this user") else "") + "\n")
    print(write_report(Path(args.results), Path(args.out), args.tokenizer, tuple(args.also), tuple(args.batch),
                       tuple(args.before), Path(args.cliffs) if args.cliffs else None))


if __name__ == "__main__":
    main()
