"""``run.json`` of a cell, built from what its files hold (:func:`build_meta`): the identity, every session and
summaries of the stored rows, as the typed :class:`~gcdbench.experiments.schema.RunRecord`."""
from __future__ import annotations

import pandas as pd

from gcdbench.experiments.schema import RunRecord, new_run
from gcdbench.parsers.base import Outcome


def build_meta(identity: dict, dataset, tokenizer, sessions: list[dict], samples: pd.DataFrame | None,
               audit: pd.DataFrame | None, batch_steps: pd.DataFrame | None = None) -> RunRecord:
    """run.json: the identity, every session, and summaries computed from the stored rows only; every key is one
    of :class:`~gcdbench.experiments.schema.RunRecord`'s, and the record carries ``schema_version``."""
    meta = {"identity": identity, **{k: identity[k] for k in ("engine", "config", "engine_options", "dataset",
                                                               "tokenizer", "grammar_key", "seed", "n_samples")},
            "grammar": dataset.grammar.name, "dataset_meta": dataset.meta, "vocab_size": tokenizer.vocab_size,
            "sessions": sessions}
    if identity.get("batch"):
        threads = [s["batch"].get("threads") for s in sessions if s.get("batch")]
        meta["batch"] = {**identity["batch"], "threads": threads[-1] if threads else None,
                         "threads_option": next((s["batch"].get("threads_option") for s in reversed(sessions)
                                                 if s.get("batch")), None),
                         "steps": 0 if batch_steps is None else int(len(batch_steps)),
                         "full_steps": 0 if batch_steps is None else
                         int((batch_steps["live"] == batch_steps["size"]).sum()),
                         # which sessions kept every mask's row (all) or the batch steps only (summary)
                         "steps_kept": "+".join(sorted({s["batch"].get("steps", "all") for s in sessions
                                                        if s.get("batch") and s.get("samples_run")})) or None}
    inits = [i for s in sessions for i in s.get("inits", [])]
    meta["inits"] = inits
    if inits:
        meta["init_s"] = inits[0]["init_s"]
        meta["ttfm_s"] = inits[0].get("ttfm_s")
        meta["peak_rss_compile_mb"] = max(i.get("peak_rss_compile_mb") or 0 for i in inits)
    latest = sessions[-1] if sessions else {}
    for k in ("limits", "versions", "machine"):
        if k in latest:
            meta[k] = latest[k]
    audit_errors = [s["audit_error"] for s in sessions if s.get("audit_error")]
    if audit_errors:
        meta["audit_error"] = audit_errors[-1]
    skipped = {k: v for s in sessions for k, v in (s.get("audit_skipped") or {}).items()}
    if skipped:   # samples whose audit exceeded the cell's limits: {sample id: reason}
        meta["audit_skipped"] = skipped
    if samples is None or samples.empty:
        meta.update(n_rows=0, outcomes={})
        return new_run(**meta)
    meta["n_rows"] = int(len(samples))
    meta["outcomes"] = {str(k): int(v) for k, v in samples["outcome"].value_counts().items()}
    ce = samples[samples["outcome"] == Outcome.COMPILE_ERROR.value]
    if len(ce):
        last = ce.loc[ce["session"].fillna(-1).idxmax()]
        meta["compile_error"] = last["message"]
        fail = next((s.get("compile_failure") for s in sessions if s["id"] == last["session"]), None) or {}
        meta["compile_error_kind"] = fail.get("kind")
    n_skipped = int((samples["outcome"] == Outcome.SKIPPED.value).sum())
    if n_skipped:
        meta["aborted"] = f"run time limit reached ({n_skipped} samples skipped)"
    peaks = pd.to_numeric(samples["peak_rss_mb"], errors="coerce")
    if peaks.notna().any():
        meta["peak_rss_samples_mb"] = float(peaks.max())
    methods = {s.get("peak_rss_method") for s in sessions if s.get("peak_rss_method")}
    if methods:
        meta["peak_rss_method"] = ", ".join(sorted(methods))
    commits = sorted({c for c in samples["git_commit"].dropna()})
    hosts = sorted({h for h in samples["host"].dropna()})
    dirty = bool(samples["git_dirty"].fillna(False).astype(bool).any())
    meta["provenance"] = {"commits": commits, "dirty": dirty, "hosts": hosts}
    meta["git_commit"] = (commits[0] + ("-dirty" if dirty else "")) if len(commits) == 1 else None
    if audit is not None and len(audit):
        meta["audit"] = {"steps": int(len(audit)),
                         **{c: int(audit[c].sum()) for c in audit.columns if c.startswith("agree")
                            and audit[c].dtype == bool}}
    return new_run(**meta)
