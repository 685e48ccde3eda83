"""The "Beyond Table 1" report section, from stored result folders only: the grammar suite and sampled decoding.

``python -m experiments.beyond --results results/suite --also results/runs --out results`` (or
``python -m gcdbench.experiments.report.beyond ...``) writes
``beyond.md`` (the section), ``beyond_cells.csv`` (one row per suite or sampled cell),
``beyond_growth.csv`` (per-sample mean mask time against sentence length, the ambiguity family),
``beyond_disagreements.csv.gz`` (every refused sample and every audited step that differs from the engine's
declared profile, with examples: :func:`..disagreements.disagreements`), ``beyond_profile_explained.csv``
(per cell, the audited steps that differ from the harness's language but agree with the declared profile)
and ``figures/ambiguity_growth.{png,pdf}``.
``experiments.report`` adds the same section to its README (:data:`SECTION`).

Cells are recognised by dataset name: the suite (:data:`gcdbench.datasets.suite.SUITE`) and every
``<source>_sampled`` dataset. A sampled cell is shown beside the gold cell of its source (same engine config and
tokenizer) when one is found in any of the folders searched.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from gcdbench.experiments.fit import loglog_slope
from gcdbench.experiments.report import disagreements as dis_mod
from gcdbench.experiments.report.collect import (SAMPLED_SUFFIX, SUITE_ORDER, cell_stats, is_beyond, read_cell_file,
                                                 run_dirs, run_infos, sample_step_summary)
from gcdbench.experiments.report.plot import emphasis, legend_below, save_figure, styles
from gcdbench.experiments.report.section import Context, Section
from gcdbench.experiments.report.text import figure_link, fmt_s, fmt_us, get, markdown, measured_at

AMBIGUITY = [d for d in SUITE_ORDER if d.startswith("ambiguous_")]
MAX_EXAMPLES = 12   # disagreement examples shown in the section (all go to the CSV)


def _dataset_order(values) -> list[str]:
    vals = set(values)
    gold = [d for d in SUITE_ORDER if d in vals]
    sampled = sorted(v for v in vals if v.endswith(SAMPLED_SUFFIX))
    return gold + sorted(vals - set(gold) - set(sampled)) + sampled


# --------------------------------------------------------------------------------------------------------------
# reading cells
# --------------------------------------------------------------------------------------------------------------
def collect_cells(roots) -> pd.DataFrame:
    """``cell_stats`` of every suite or sampled cell under ``roots`` and of the gold cells of the sampled
    datasets' sources (other cells are skipped unread), plus ``dataset_meta`` (from run.json)."""
    runs = run_infos(run_dirs(roots))
    beyond_sets = {r["dataset"] for r in runs if is_beyond(r["dataset"])}
    wanted = beyond_sets | {ds[: -len(SAMPLED_SUFFIX)] for ds in beyond_sets if ds.endswith(SAMPLED_SUFFIX)}
    rows = []
    for run in runs:
        if run["dataset"] not in wanted:
            continue
        row = cell_stats(Path(run["path"]))
        row["dataset_meta"] = run["dataset_meta"]
        row["status"] = _status(row)
        rows.append(row)
    return pd.DataFrame(rows)


def _status(row) -> str:
    err = row.get("compile_error")
    if isinstance(err, str) and err:
        return "not run: " + _short_reason(err)
    out = []
    if isinstance(row.get("aborted"), str) and row["aborted"]:
        out.append(row["aborted"])
    return "; ".join(out)


def _short_reason(err: str) -> str:
    first = err.strip().splitlines()[0] if err.strip() else err
    return first[:160] + ("…" if len(first) > 160 else "")


# --------------------------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------------------------
def cells_table(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, engine config, tokenizer): init, per-mask mean and p50/p99/max (µs), pass, audit."""
    out = []
    for ds in _dataset_order(cells["dataset"]):
        for _, c in cells[cells["dataset"] == ds].sort_values(["tokenizer", "config"]).iterrows():
            row = {"dataset": ds, "config": c["config"], "tokenizer": c["tokenizer"]}
            if c["status"].startswith("not run"):
                row.update({"init": "×", "mean µs": "×", "p50/p99/max µs": "×", "pass": "×", "audit": "×",
                            "note": c["status"]})
                out.append(row)
                continue
            init = get(c, "init_s")
            row.update({
                "init": fmt_s(init),
                "mean µs": fmt_us(get(c, "mask_mean_us")),
                "p50/p99/max µs": "/".join(fmt_us(get(c, k)) for k in ("mask_p50_us", "mask_p99_us", "mask_max_us")),
                "pass": f"{int(get(c, 'passed') or 0)}/{int(get(c, 'samples') or 0)}",
                "audit": _audit_entry(c),
                "note": "; ".join(x for x in (c["status"], _outcome_note(c)) if x),
            })
            out.append(row)
    return pd.DataFrame(out, columns=["dataset", "config", "tokenizer", "init", "mean µs", "p50/p99/max µs", "pass",
                                      "audit", "note"])


def _outcome_note(c) -> str:
    outcomes = get(c, "outcomes") or ""
    parts = [p for p in outcomes.split(", ") if p and not p.startswith("ok:")]
    return ", ".join(parts)


def gold_vs_sampled(cells: pd.DataFrame) -> pd.DataFrame:
    """Per sampled cell, pass and audit agreement beside the gold cell of its source (same config, tokenizer)."""
    rows = []
    for _, c in cells[cells["dataset"].str.endswith(SAMPLED_SUFFIX)].iterrows():
        source = c["dataset"][: -len(SAMPLED_SUFFIX)]
        g = cells[(cells["dataset"] == source) & (cells["config"] == c["config"])
                  & (cells["tokenizer"] == c["tokenizer"])]
        g = g.iloc[0] if len(g) else None

        def cell_pass(x):
            if x is None:
                return "(no gold cell)"
            if x["status"].startswith("not run"):
                return "×"
            return f"{int(get(x, 'passed') or 0)}/{int(get(x, 'samples') or 0)}"

        def cell_audit(x):
            if x is None or not get(x, "audit_steps"):
                return "–"
            if get(x, "audit_agree_profile") is None:
                return "? (audit stored before declared profiles)"
            return f"{int(x['audit_agree_profile'])}/{int(x['audit_steps'])}"

        rows.append({"source": source, "config": c["config"], "tokenizer": c["tokenizer"],
                     "gold pass": cell_pass(g), "sampled pass": cell_pass(c),
                     "gold audit (declared profile)": cell_audit(g),
                     "sampled audit (declared profile)": cell_audit(c)})
    return pd.DataFrame(rows, columns=["source", "config", "tokenizer", "gold pass", "sampled pass",
                                       "gold audit (declared profile)", "sampled audit (declared profile)"])


# --------------------------------------------------------------------------------------------------------------
# disagreements with the declared profile
# --------------------------------------------------------------------------------------------------------------
def disagreements(roots) -> pd.DataFrame:
    """:func:`..disagreements.disagreements` of the suite and sampled cells under ``roots``: every refused
    sample and every audited step that the engine's declared profile does not explain, with examples."""
    return dis_mod.disagreements(run_dirs(roots), keep=is_beyond)


def profile_explained(cells: pd.DataFrame) -> pd.DataFrame:
    """Per cell (and its declared profile): audited steps that differ from the harness's language but agree with
    the profile, of all its audited steps (cells with at least one such step)."""
    if "audit_explained_by_profile" not in cells:
        return pd.DataFrame(columns=["dataset", "config", "tokenizer", "profile", "steps", "of"])
    c = cells[cells["audit_explained_by_profile"].fillna(0) > 0]
    return pd.DataFrame({"dataset": c["dataset"], "config": c["config"], "tokenizer": c["tokenizer"],
                         "profile": c["audit_profile"], "steps": c["audit_explained_by_profile"].astype(int),
                         "of": c["audit_steps"].astype(int)}).sort_values(["dataset", "config", "tokenizer"]
                                                                          ).reset_index(drop=True)


def _audit_entry(c) -> str:
    """The cells table's audit entry: steps agreeing exactly with the language, and with the declared profile."""
    steps = int(get(c, "audit_steps") or 0)
    if not steps:
        return "–"
    if get(c, "audit_agree_language") is None:
        return f"{int(get(c, 'audit_agree') or 0)}/{steps} exact (audit stored before declared profiles)"
    return (f"{int(c['audit_agree_language'])}/{steps} language, {int(c['audit_agree_profile'])}/{steps} "
            f"profile ({c['audit_profile']})")


# --------------------------------------------------------------------------------------------------------------
# growth with sentence length (the ambiguity family)
# --------------------------------------------------------------------------------------------------------------
def growth(roots) -> pd.DataFrame:
    """Per (ambiguity dataset, config, tokenizer, sample): sentence length, masks, mean and max mask time, and
    whether the sample finished (``complete``); a sample cut short by a limit counts the masks it finished."""
    frames = []
    for run in run_infos(run_dirs(roots)):
        d = Path(run["path"])
        if run["dataset"] not in AMBIGUITY:
            continue
        g = sample_step_summary(d)
        if g is None or not len(g):
            continue
        samples = read_cell_file(d, "samples.parquet")
        # length: the sentence's terminals from its id (n<terminals>; one Qwen3 token each), else its steps
        g["length"] = g["sample_id"].str.extract(r"^n(\d+)$", expand=False).astype(float).fillna(g["last_step"])
        outcome = g["sample_id"].map(samples.set_index("sample_id")["outcome"]) if samples is not None else None
        g["complete"] = (outcome == "ok") if outcome is not None else False
        g["dataset"], g["config"], g["tokenizer"] = run["dataset"], run["config"], run["tokenizer"]
        frames.append(g)
    if not frames:
        return pd.DataFrame(columns=["dataset", "config", "tokenizer", "sample_id", "length", "masks", "mean_us",
                                     "max_us", "complete"])
    out = pd.concat(frames, ignore_index=True)
    return out[["dataset", "config", "tokenizer", "sample_id", "length", "masks", "mean_us", "max_us",
                "complete"]].sort_values(["dataset", "config", "length"]).reset_index(drop=True)


def fig_growth(g: pd.DataFrame, tokenizer: str = "qwen3"):
    """Mean mask time per token against sentence length, log-log, one panel per ambiguity grammar, one line per
    engine config (slope of the longer half in the legend); hollow markers: samples cut short."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import ScalarFormatter

    g = g[g["tokenizer"] == tokenizer]
    if g.empty:
        return None
    datasets = [d for d in AMBIGUITY if d in set(g["dataset"])]
    configs = sorted(set(g["config"]))
    st = styles(configs)   # one colour and marker per engine, as in every figure
    cols = min(len(datasets), 3)
    rows = math.ceil(len(datasets) / cols)
    fig = Figure(figsize=(max(6.5, 5.2 * cols), 6.4 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[len(datasets):]:
        ax.set_visible(False)
    for ax, ds in zip(axes, datasets):
        sub = g[g["dataset"] == ds]
        for i, (config, s) in enumerate(sorted(sub.groupby("config"), key=lambda kv: kv[0])):
            s = s.sort_values("length")
            slope = loglog_slope(s["length"], s["mean_us"])
            label = config + ("" if np.isnan(slope) else f" (slope {slope:.1f})")
            color, m = st[config]
            ax.plot(s["length"], s["mean_us"], "-", color=color, label=label, **emphasis(config))
            full = s[s["complete"]]
            cut = s[~s["complete"]]
            ax.plot(full["length"], full["mean_us"], m, color=color, ms=4, ls="none")
            ax.plot(cut["length"], cut["mean_us"], m, color=color, ms=4, ls="none", mfc="none")
        lo, hi = sub["length"].min(), sub["length"].max()
        if lo > 0 and hi > lo:   # guides: cost growing like n and like n^2, through the panel's median start
            base = float(np.median(sub[sub["length"] == lo]["mean_us"])) or 1.0
            xs = np.array([lo, hi], float)
            ax.plot(xs, base * (xs / lo), ":", color="grey", lw=0.8)
            ax.plot(xs, base * (xs / lo) ** 2, "--", color="grey", lw=0.8)
            ax.text(hi, base * (hi / lo), " ∝n", color="grey", fontsize=7, va="center")
            ax.text(hi, base * (hi / lo) ** 2, " ∝n²", color="grey", fontsize=7, va="center")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(ScalarFormatter())
        ax.tick_params(axis="x", which="minor", labelsize=7)
        ax.set_title(ds, fontsize=10)
        ax.set_xlabel("sentence length (terminals; one Qwen3 token each)")
        ax.set_ylabel("mean mask time per token (µs)")
        ax.grid(True, which="both", alpha=0.25)
        legend_below(ax)
    fig.suptitle(f"Per-token mask cost vs sentence length, ambiguity grammars ({tokenizer})", fontsize=10)
    return fig


# --------------------------------------------------------------------------------------------------------------
# the section
# --------------------------------------------------------------------------------------------------------------
def beyond_section(roots, out: Path, tokenizer: str = "qwen3") -> list[str]:
    """README lines of the "Beyond Table 1" section (empty when no suite or sampled cell is found), and its
    files under ``out`` (CSV tables, ``beyond.md``, ``figures/ambiguity_growth.*``)."""
    out = Path(out)
    roots = [Path(r) for r in roots if r is not None]
    all_cells = collect_cells(roots)
    if all_cells.empty:
        return []
    cells = all_cells[all_cells["dataset"].map(is_beyond)]
    if cells.empty:
        return []
    out.mkdir(parents=True, exist_ok=True)
    table = cells_table(cells)
    table.to_csv(out / "beyond_cells.csv", index=False)
    lines = [
        "## Beyond Table 1: a grammar suite and sampled decoding", "",
        "Cells read from " + ", ".join(f"`{r}`" for r in roots if r.exists()) + ". Suite datasets: `json` "
        "(RFC 8259; documents shipped in installed packages), `lark` (Lark's grammar language; real `.lark` "
        "files), and the ambiguity grammars `ambiguous_*` (sentences of 10 to 200 tokens; `ambiguous_concat` is "
        "the family of arXiv 2603.05540's Ω(t²)-per-token bound, `ambiguous_right` the same language written "
        "unambiguously). `<source>_sampled`: 30 off-gold token sequences per source drawn from the reference's "
        "masks (`datasets/sampled.py`), replayed by every engine. Audit = audited steps whose whole-vocabulary "
        "mask equals exactly the reference's under the harness's language, and under the engine's declared "
        "profile (named in brackets). × = not run (typed reason in the note).", "",
        markdown(table), "",
        measured_at(cells), "",
    ]
    gvs = gold_vs_sampled(all_cells)   # gold cells of Table 1's sources may sit in another folder
    if len(gvs):
        gvs.to_csv(out / "beyond_gold_vs_sampled.csv", index=False)
        lines += ["### Gold against sampled (off-gold) sequences", "",
                  "Pass = sequences whose every token and the final EOS the engine allowed; audit = audited steps "
                  "that agree exactly with the reference under the engine's declared profile.", "",
                  markdown(gvs), ""]
    g = growth(roots)
    if len(g):
        g.to_csv(out / "beyond_growth.csv", index=False)
        slopes = (g[g["tokenizer"] == tokenizer].groupby(["dataset", "config"])
                  .apply(lambda s: loglog_slope(s["length"], s["mean_us"]), include_groups=False)
                  .rename("slope").reset_index())
        fig = fig_growth(g, tokenizer)
        lines += ["### Per-token cost against sentence length (ambiguity grammars)", "",
                  "Mean mask time per token of each sentence against its length, log-log; the slope is a "
                  "least-squares fit over the longer half of the lengths (1: linear growth per token, 2: the "
                  "quadratic growth the lower bound allows parse-preserving engines on `ambiguous_concat`). "
                  "Hollow markers: sentences cut short by a limit (their finished masks).", ""]
        if len(slopes):
            piv = slopes.pivot(index="config", columns="dataset", values="slope")
            piv = piv[[d for d in AMBIGUITY if d in piv.columns]].map(lambda v: "–" if pd.isna(v) else f"{v:.2f}")
            lines += [markdown(piv.reset_index()), ""]
        if fig is not None:
            save_figure(fig, out / "figures", "ambiguity_growth")
            lines += [figure_link("ambiguity_growth"), ""]
    dis = disagreements(roots)
    dis_mod.write_disagreements(dis, out / "beyond_disagreements.csv.gz")
    explained = profile_explained(cells)
    explained.to_csv(out / "beyond_profile_explained.csv", index=False)
    lines += ["### Where engines disagree with their declared profile", "",
              f"{len(dis)} refusals or audited steps that the engine's declared profile does not explain "
              "(`beyond_disagreements.csv.gz` lists them all, with examples). Refusals: the engine did not allow a "
              "token of the sequence (or EOS at its end), which the reference allows (every sequence is in the "
              "language); the runner audits each refused step, so a refusal whose mask agrees with the declared "
              "profile is counted with the differences the profile explains below instead. Audit rows: the "
              "engine's mask differs from the declared profile's at an audited step.", ""]
    if len(dis):
        counts = dis.groupby(["dataset", "config", "kind"]).size().rename("n").reset_index()
        lines += [markdown(counts), "", "Examples:", ""]
        for r in dis.groupby(["dataset", "config", "kind"]).head(2).head(MAX_EXAMPLES).to_dict("records"):
            lines.append(f"- {r['config']} × {r['dataset']}, " + dis_mod.disagreement_line(r)[2:])
        lines.append("")
    if len(explained):
        lines += ["Differences from the harness's language that the declared profile explains (audited steps "
                  "whose mask differs from the language's and equals the profile's; README, \"Lexing differences: "
                  "engine profiles\"):", "", markdown(explained), ""]
    (out / "beyond.md").write_text("\n".join(lines) + "\n")
    return lines


def lines(ctx: Context) -> list[str]:
    """The section over the suite and sampled cells under --results, --also and ``<results>/../suite``."""
    return beyond_section([ctx.results, *map(Path, ctx.also), Path(ctx.results).parent / "suite"], ctx.out,
                          ctx.tokenizer)


SECTION = Section("beyond", lines, "the grammar suite and sampled decoding (beyond_*.csv, ambiguity figure)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="results/suite", help="folder searched for suite and sampled cells")
    ap.add_argument("--also", nargs="*", default=["results/runs"],
                    help="further folders searched (gold cells of the sampled sources, e.g. Table 1's)")
    ap.add_argument("--out", default="results", help="where beyond.md, the CSV files and figures/ go")
    ap.add_argument("--tokenizer", default="qwen3")
    args = ap.parse_args(argv)
    lines = beyond_section([Path(args.results), *map(Path, args.also)], Path(args.out), args.tokenizer)
    if not lines:
        raise SystemExit(f"no suite or sampled cell under {args.results} {args.also}: run "
                         "`python -m experiments.run -m experiment=suite` first")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
