"""The "MaskBench" report section (issue 28), from stored cells of ``dataset=maskbench`` only.

A MaskBench cell is one engine over a selection of schemas (a dataset of many grammars: sample ids are
``<schema id>#<n>``), of one kind of instance (``dataset.kind=valid`` or ``invalid``). Per engine config the
section gives MaskBench's figures: TBM (time between masks: every mask of the valid instances) avg and
p25/p50/p75/p90/p95/p99/p99.9/p99.99/max; TTFM per schema (its compile, ``inits[].init_s`` of its group, plus its
first sample's first mask); schemas passing (compiled, no crash, OOM, timeout or engine error, no valid instance
rejected, no invalid instance accepted), compile errors, crashes, OOM, timeouts (an instance's limit, or the cell's
run limit reached before it), engine errors (an error state the engine reports, e.g. a work limit); valid
instances rejected (a token or the final EOS refused) and invalid instances accepted (the engine allows every token
and EOS, outcome ``ok``); and what the harness adds: audited steps agreeing with the schema's language (the
harness's JSON Schema -> Lark conversion) and with the engine's declared profile. Rows per category too, a TBM
and a TTFM CDF per engine, and the published MaskBench figures beside ours.

``python -m experiments.report ... --maskbench results/maskbench/runs`` adds it.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from gcdbench.datasets.maskbench import PUBLISHED, category
from gcdbench.experiments.report.collect import (Unreadable, machine_text, read_cell_file, read_run, run_dirs,
                                                 sample_step_summary, warn)
from gcdbench.experiments.report.masktimes import Times, summarize_sample_steps
from gcdbench.experiments.report.plot import emphasis, legend_right, save_figure, styles
from gcdbench.experiments.report.section import Context, Section
from gcdbench.experiments.report.text import figure_link, markdown, md_code

PREFIX = "maskbench"
TBM_PCTS = (25, 50, 75, 90, 95, 99, 99.9, 99.99)


def schema_of(sample_id: str) -> str:
    return sample_id.split("#", 1)[0]


def category_of(schema_id: str) -> str:
    return category(schema_id)


def is_maskbench(dataset: str) -> bool:
    return dataset == PREFIX or dataset.startswith(PREFIX + "_")


# --------------------------------------------------------------------------------------------------------------
# one cell
# --------------------------------------------------------------------------------------------------------------
def cell_schemas(run_dir: Path) -> tuple[dict, pd.DataFrame, Times]:
    """(cell info, one row per schema, its mask times in µs) of a MaskBench cell: every mask from
    ``steps.parquet``, or a re-stored cell's digest (``restored.mask_digest``) and per-sample first masks."""
    meta = read_run(run_dir)
    samples = read_cell_file(run_dir, "samples.parquet")
    if samples is None:
        raise Unreadable(f"{run_dir} holds no rows yet")
    steps = read_cell_file(run_dir, "steps.parquet")
    audit = read_cell_file(run_dir, "audit.parquet")
    options = (meta.get("identity") or {}).get("dataset_options") or {}
    info = {"config": meta["config"], "engine": meta["engine"], "tokenizer": meta["tokenizer"],
            "kind": options.get("kind", "valid"), "serialize": options.get("serialize", "compact"),
            "path": str(run_dir), "commit": meta.get("git_commit"), "machine": machine_text(meta),
            "audit_steps": 0 if audit is None else int(len(audit)),
            "audit_language": 0 if audit is None else int(audit["agree_language"].astype(bool).sum()),
            "audit_profile": 0 if audit is None else int(audit["agree_profile"].astype(bool).sum()),
            **audit_differences(audit)}
    init_s, failures, cold = {}, {}, {}
    for session in meta.get("sessions") or []:
        for init in session.get("inits") or []:
            if init.get("group") is not None:
                init_s[init["group"]] = init.get("init_s")
                if init.get("warmup_failed"):
                    cold[init["group"]] = str(init["warmup_failed"])
        failures.update(session.get("group_failures") or {})
    samples = samples.assign(schema=samples["sample_id"].map(schema_of))
    first_mask, n_masks, sum_us = {}, {}, {}
    per_sample = summarize_sample_steps(steps) if steps is not None else sample_step_summary(run_dir)
    if per_sample is not None and len(per_sample):
        per_sample = per_sample.assign(schema=per_sample["sample_id"].map(schema_of),
                                       sum_us=per_sample["masks"] * per_sample["mean_us"])
        by_schema = per_sample.groupby("schema")
        n_masks, sum_us = by_schema["masks"].sum().to_dict(), by_schema["sum_us"].sum().to_dict()
        if "first_us" in per_sample:
            first = (per_sample.dropna(subset=["first_us"]).sort_values("sample_id").groupby("schema")["first_us"]
                     .first())
            first_mask = first.to_dict()
    rows = []
    for schema, grp in samples.groupby("schema", sort=True):
        counts = grp["outcome"].value_counts().to_dict()
        fail = failures.get(schema) or {}
        compiled = counts.get("compile_error", 0) == 0
        ttfm = (init_s[schema] + first_mask[schema] / 1e6
                if compiled and init_s.get(schema) is not None and schema in first_mask else np.nan)
        rows.append({"schema": schema, "category": category_of(schema), "instances": int(len(grp)),
                     "compile_error": not compiled, "compile_kind": fail.get("kind") if not compiled else None,
                     "crash": int(counts.get("crash", 0)), "oom": int(counts.get("oom", 0)),
                     "timeout": int(counts.get("timeout", 0) + counts.get("skipped", 0)),
                     "engine_error": int(counts.get("engine_error", 0)), "ok": int(counts.get("ok", 0)),
                     "rejected": int(counts.get("rejected", 0)), "no_eos": int(counts.get("no_eos", 0)),
                     "masks": int(n_masks.get(schema, 0)), "mask_sum_us": float(sum_us.get(schema, 0.0)),
                     "init_s": init_s.get(schema), "ttfm_s": ttfm})
    digest = (meta.get("restored") or {}).get("mask_digest")
    if steps is not None and len(steps):
        masks = Times(steps["mask_us"].to_numpy())
    elif digest is not None:
        masks = Times.from_digest(digest)
    else:
        masks = Times()
    info["exact_times"] = masks.exact
    info["warmup_failed"] = cold
    return info, pd.DataFrame(rows), masks


def audit_differences(audit: pd.DataFrame | None) -> dict:
    """How a cell's audited steps differ from the schema's language: steps where the engine allows tokens the
    language refuses (looser) or blocks tokens it allows (stricter), and how often each example token (the
    audit's first few per step) appears among them."""
    looser, stricter = Counter(), Counter()
    if audit is None or not len(audit):
        return {"audit_looser": 0, "audit_stricter": 0, "looser_examples": looser, "stricter_examples": stricter}
    for col, counter in (("false_allow_examples", looser), ("false_block_examples", stricter)):
        if col in audit:
            for ex in audit[col]:
                counter.update(set(ex if ex is not None else ()))
    return {"audit_looser": int((audit["n_false_allow"] > 0).sum()) if "n_false_allow" in audit else 0,
            "audit_stricter": int((audit["n_false_block"] > 0).sum()) if "n_false_block" in audit else 0,
            "looser_examples": looser, "stricter_examples": stricter}


def difference_rows(cells, shown: int = 6) -> pd.DataFrame:
    """Per engine config (valid and invalid cells together): audited steps, steps equal to the language, steps
    looser and stricter than it, and the example tokens most often involved (with the number of steps)."""
    by: dict = {}
    for info, _, _ in cells:
        slot = by.setdefault(info["config"], {"steps": 0, "agree": 0, "looser": 0, "stricter": 0,
                                              "lx": Counter(), "sx": Counter()})
        slot["steps"] += info["audit_steps"]
        slot["agree"] += info["audit_language"]
        slot["looser"] += info["audit_looser"]
        slot["stricter"] += info["audit_stricter"]
        slot["lx"].update(info["looser_examples"])
        slot["sx"].update(info["stricter_examples"])

    def top(counter: Counter) -> str:
        ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:shown]   # ties in a fixed order
        return ", ".join(f"`{md_code(k)}` {n}" for k, n in ranked)

    return pd.DataFrame([{"engine": config, "audited steps": v["steps"], "equal": v["agree"],
                          "looser": v["looser"], "stricter": v["stricter"],
                          "allowed, language refuses (steps)": top(v["lx"]),
                          "blocked, language allows (steps)": top(v["sx"])}
                         for config, v in sorted(by.items()) if v["steps"]])


def collect_maskbench(roots) -> list[tuple[dict, pd.DataFrame, Times]]:
    out = []
    for d in run_dirs(roots):
        try:
            meta = read_run(d)
            if not is_maskbench(str(meta.get("dataset", ""))):
                continue
            out.append(cell_schemas(d))
        except Unreadable as err:
            warn(f"{err}: MaskBench cell {d} skipped")
    return out


# --------------------------------------------------------------------------------------------------------------
# the tables
# --------------------------------------------------------------------------------------------------------------
def engine_rows(cells) -> tuple[pd.DataFrame, dict, dict]:
    """One row per engine config (its valid and invalid cells together), the TBM arrays and TTFM arrays."""
    by_config: dict = {}
    for info, schemas, masks in cells:
        slot = by_config.setdefault((info["config"], info["tokenizer"]), {"valid": [], "invalid": []})
        slot[info["kind"]].append((info, schemas, masks))
    rows, tbm, ttfm = [], {}, {}
    for (config, tok), kinds in sorted(by_config.items()):
        valid = pd.concat([s for _, s, _ in kinds["valid"]]) if kinds["valid"] else pd.DataFrame()
        invalid = pd.concat([s for _, s, _ in kinds["invalid"]]) if kinds["invalid"] else pd.DataFrame()
        masks = sum((m for _, _, m in kinds["valid"]), Times())
        allv = pd.concat([valid, invalid]) if len(invalid) else valid
        if allv.empty:
            continue
        per = allv.groupby("schema").agg(compile_error=("compile_error", "max"), crash=("crash", "sum"),
                                         oom=("oom", "sum"), timeout=("timeout", "sum"),
                                         engine_error=("engine_error", "sum"))
        # a valid instance is rejected when a token or EOS at its end is refused
        bad_valid = ((valid["rejected"] + valid["no_eos"]).groupby(valid["schema"]).sum() if len(valid)
                     else pd.Series(dtype=int))
        accepted = invalid.groupby("schema")["ok"].sum() if len(invalid) else pd.Series(dtype=int)
        per["valid_rejected"] = bad_valid.reindex(per.index).fillna(0)
        per["invalid_accepted"] = accepted.reindex(per.index).fillna(0)
        passing = ~per["compile_error"] & (per[["crash", "oom", "timeout", "engine_error", "valid_rejected",
                                                "invalid_accepted"]]
                                           .sum(axis=1) == 0)
        infos = [i for k in ("valid", "invalid") for i, _, _ in kinds[k]]
        row = {"engine": config, "tokenizer": tok, "schemas": int(len(per)), "passing": int(passing.sum()),
               "compile errors": int(per["compile_error"].sum()), "crashes": int((per["crash"] > 0).sum()),
               "OOM": int((per["oom"] > 0).sum()), "timeouts": int((per["timeout"] > 0).sum()),
               "engine errors": int((per["engine_error"] > 0).sum()),
               "valid rejected": int(per["valid_rejected"].sum()) if len(valid) else None,
               "invalid accepted": int(per["invalid_accepted"].sum()) if len(invalid) else None,
               "audit": f"{sum(i['audit_language'] for i in infos)}/{sum(i['audit_steps'] for i in infos)}",
               "audit (profile)": f"{sum(i['audit_profile'] for i in infos)}/{sum(i['audit_steps'] for i in infos)}",
               "commits": "+".join(sorted({str(i['commit'])[:7] for i in infos}))}
        if masks.n:
            row.update({"masks": masks.n, "TBM avg": masks.mean(),
                        **{f"TBM p{p:g}": masks.percentile(p) for p in TBM_PCTS}, "TBM max": masks.max()})
            tbm[config] = masks
        t = valid["ttfm_s"].dropna().to_numpy() * 1e6 if len(valid) else np.array([])
        if t.size:
            row.update({"TTFM p50": np.percentile(t, 50), "TTFM p90": np.percentile(t, 90), "TTFM max": t.max()})
            ttfm[config] = Times(t)
        rows.append(row)
    return pd.DataFrame(rows), tbm, ttfm


def category_pivot(cats: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Per category and engine config: schemas compiled / schemas, valid instances passed / valid instances (the
    README's compact view of ``maskbench_categories.csv``)."""
    valid = cats[cats["kind"] == "valid"]
    if valid.empty:
        return pd.DataFrame()
    cell = valid.assign(text=lambda d: [f"{s - e}/{s} · {o}/{n}" for s, e, o, n in
                                        zip(d["schemas"], d["compile errors"], d["ok"], d["instances"])])
    out = cell.pivot_table(index="category", columns="engine", values="text", aggfunc="first")
    return out.reindex(columns=[e for e in table["engine"] if e in out.columns]).reset_index()


def category_rows(cells) -> pd.DataFrame:
    """Per engine config, kind and category: the counts of its cells added together (a config run as shards,
    ``dataset.shard=i/N``, is one config)."""
    rows = []
    for info, schemas, _ in cells:
        if schemas.empty:
            continue
        for cat, grp in schemas.groupby("category"):
            rows.append({"engine": info["config"], "kind": info["kind"], "category": cat, "schemas": int(len(grp)),
                         "compile errors": int(grp["compile_error"].sum()),
                         "instances": int(grp["instances"].sum()), "ok": int(grp["ok"].sum()),
                         "rejected": int((grp["rejected"] + grp["no_eos"]).sum()),   # a token or the final EOS
                         "crash/oom/timeout/error": int(grp[["crash", "oom", "timeout", "engine_error"]]
                                                        .to_numpy().sum())})
    if not rows:
        return pd.DataFrame(rows)
    return pd.DataFrame(rows).groupby(["engine", "kind", "category"], sort=False, as_index=False).sum()


def _cdf_figure(arrays: dict, out: Path, stem: str, xlabel: str) -> list[str]:
    if not arrays:
        return []
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.4, 4.2), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    st = styles(list(arrays))   # one colour per engine, as in every figure
    for name, times in sorted(arrays.items()):
        ax.plot(*times.cdf(), label=name, color=st[name][0], **emphasis(name))
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction")
    ax.grid(True, which="both", alpha=0.3)
    legend_right(ax)
    save_figure(fig, out / "figures", stem)
    return [figure_link(stem)]


def provenance_line(cells) -> str:
    """Which commits and machines the cells ran at: one of each is one run; more are named, never mixed silently."""
    commits = sorted({str(i["commit"])[:7] for i, _, _ in cells})
    machines = sorted({str(i["machine"]) for i, _, _ in cells})
    if len(commits) == 1 and len(machines) == 1:
        return f"Every cell at commit `{commits[0]}` on {machines[0]}."
    by: dict = {}
    for i, _, _ in cells:
        by.setdefault((str(i["commit"])[:7], str(i["machine"])), Counter())[f"{i['config']} {i['kind']}"] += 1
    return ("**Cells of more than one commit or machine** (compare rows only within one; a config run as shards "
            "counts its cells): " + "; ".join(f"`{c}` on {m}: " + ", ".join(k if n == 1 else f"{k} ({n} cells)"
                                                                       for k, n in sorted(v.items()))
                                      for (c, m), v in sorted(by.items())) + ".")


def section_lines(ctx: Context) -> list[str]:
    if ctx.maskbench is None:
        return []
    cells = collect_maskbench([ctx.maskbench])
    if not cells:
        return []
    table, tbm, ttfm = engine_rows(cells)
    cats = category_rows(cells)
    table.to_csv(ctx.out / "maskbench.csv", index=False)
    cats.to_csv(ctx.out / "maskbench_categories.csv", index=False)
    us_cols = [c for c in table.columns if c.startswith(("TBM", "TTFM"))]
    shown = table.copy()
    if "masks" in shown:
        shown["masks"] = shown["masks"].map(lambda x: "" if pd.isna(x) else f"{int(x):,}")
    for c in ("valid rejected", "invalid accepted"):   # None: that kind's cell is not among the cells
        if c in shown:
            shown[c] = shown[c].map(lambda x: "not run" if x is None or pd.isna(x) else f"{int(x)}")
    for c in us_cols:
        shown[c] = shown[c].map(lambda x: "" if pd.isna(x) else f"{x:,.0f}")
    published = pd.DataFrame([{"engine": k, "TBM p50": v[0], "TBM p99": v[1], "TBM p99.9": v[2], "TTFM p50": v[3],
                               "invalid accepted": v[4]} for k, v in PUBLISHED.items()])
    lines = ["## MaskBench: JSON Schemas", "",
             f"{len(cells)} cells from `{ctx.maskbench}`; times in µs (TTFM: compile + first mask, per schema). An "
             "engine passes a schema when it compiles it, rejects none of its valid instances and accepts none of "
             "its invalid ones, without a crash, OOM, timeout or engine error (an error state it reports, e.g. a work "
             "limit). *valid rejected*: a token or the final EOS refused. *audit*: audited steps equal to the schema's "
             "language (the harness's JSON Schema -> Lark conversion, README \"JSON Schema converter\"); "
             "*(profile)*: equal to the engine's declared profile.", "",
             provenance_line(cells), "",
             markdown(shown, parse_numbers=False), "",
             *([] if all(i["exact_times"] for i, _, _ in cells if i["kind"] == "valid") else [
                 "TBM of re-stored cells (their per-mask rows replaced by a digest, `restored.mask_digest`): p99 and "
                 "above, max and avg exact; p25-p95 nearest rank within 1% (1%-wide log bins).", ""]),
             "Per category, valid instances: schemas compiled / schemas · instances passed / instances (every "
             "kind and count in `maskbench_categories.csv`):", "",
             markdown(category_pivot(cats, table), parse_numbers=False), "",
             "How each engine's audited steps differ from the schema's language: *looser* steps allow a token "
             "the language refuses, *stricter* ones block a token it allows (a step can be both). The tokens most "
             "often involved, with the number of steps: where an engine's schema semantics differ from the "
             "converter's definition (the converter over-approximates some keywords, README \"JSON Schema "
             "converter\", so a stricter step is not always the engine's error).", "",
             markdown(difference_rows(cells), parse_numbers=False), "",
             "Published MaskBench figures (guidance-ai/jsonschemabench, run of 2025-03-27, other versions and another "
             "machine, one thread per sequence; all 11,305 schemas): not comparable cell by cell with the sample "
             "above, shown for scale.", "", markdown(published, parse_numbers=False), ""]
    cold = [f"{i['config']} {i['kind']}: {', '.join(f'{g} ({why})' for g, why in sorted(i['warmup_failed'].items()))}"
            for i, _, _ in cells if i.get("warmup_failed")]
    if cold:
        lines += ["Warm-ups that failed (the runner then timed that schema's first sample cold: its first masks may "
                  "hold one-time costs such as a JIT compile on an empty cache, and they are in the TBM above): "
                  + "; ".join(cold) + ".", ""]
    lines += _cdf_figure(tbm, ctx.out, "maskbench_tbm_cdf", "time between masks (µs)")
    lines += _cdf_figure(ttfm, ctx.out, "maskbench_ttfm_cdf", "time to first mask (µs)")
    return lines + [""]


SECTION = Section("maskbench", section_lines, "MaskBench's table over the JSON Schema cells of --maskbench")
