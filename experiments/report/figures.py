"""The report's "Figures" section: figures of the single-mode cells under --results, as PNG and PDF.

``python -m experiments.figures --results results/runs --out results/figures`` (or ``draw_all``) writes:

- ``mask_vs_prefix_<tokenizer>``: per-mask time against prefix length (tokens), mean and p99 per bucket, log y,
  one panel per dataset, one colour per engine config (seed 000's figure 6);
- ``mask_vs_<option>``: per-mask time against an engine option the cells were swept over (the one option in
  which otherwise equal cells differ, read from run.json's ``engine_options``; seed 000's figure 5 is the sweep
  over Valiant's ``workers``);
- ``mask_vs_vocab``: per-mask time against the vocabulary size (``vocab_size`` of run.json; a tokenizer sweep);
- ``latency_cdf_<tokenizer>``: the distribution of per-mask time per engine config, p50/p99/max marked;
- ``init_time_<tokenizer>`` and ``memory_<tokenizer>``: compile time and peak resident memory per cell;
- ``batch_<tokenizer>``: batch mode (:func:`..batch.fig_batch`), when --results holds batch cells.

Cells that did not produce masks (compile error, compile time-out or out-of-memory) are shown, never dropped:
a hatched bar marked ``×`` in the bar charts and a ``×`` note with the reason in the line charts. A cell is drawn
as complete only when every requested sample ended ``ok``: any other outcome (``Outcome`` of parsers/base.py:
rejected, no_eos, timeout, oom, engine_error, crash, skipped) puts its status in the legend ("partial: rejected
13/30", or "failed: engine_error 30/30" when no sample passed, drawn dotted).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from gcdbench.experiments.report.batch import fig_batch
from gcdbench.experiments.report.collect import collect_batch, is_batch, load_cells, load_steps
from gcdbench.experiments.report.plot import (emphasis, failed_handles, failed_marks, failed_note, is_failed,
                                              legend_below, legend_right, line_style, no_minor_labels, order_datasets,
                                              panels, save_figure, series_label, styles, us_axis)
from gcdbench.experiments.report.section import Context, Section
from gcdbench.experiments.report.text import figure_link

CAPTIONS = {   # by file stem prefix, for the report's README (the first matching prefix)
    "mask_vs_prefix": "Per-mask time against prefix length (tokens): solid = mean, dashed = p99 per prefix bucket, "
                      "log scale; one panel per dataset (seed 000's figure 6).",
    "latency_cdf": "Distribution of per-mask time per engine config; ● p50, ▲ p99, ■ max.",
    "init_time": "Engine init (grammar + vocabulary compile) time per cell, log scale.",
    "memory": "Peak resident memory (MB) of the worker process during compile and during the samples.",
    "mask_vs_vocab": "Per-mask time against vocabulary size (a sweep over `tokenizer=`); points named by tokenizer.",
    "mask_vs_": "Per-mask time against the engine option named in the file name, over cells that differ in that "
                "option only (seed 000's figure 5 is such a sweep, over `workers`).",
    "batch": "Batch mode: step latency (one `fill_masks` call over the live sequences; p50 over full steps, band "
             "to p99) and per-sequence cost (step time / live sequences) against the batch size B, log axes; "
             "× = a B at which the cell produced no step.",
    "growth": "Per-mask time at each prefix length (tokens), p50 solid and p99 dashed, before and after a change; "
              "dotted: the target.",
}


# --------------------------------------------------------------------------------------------------------------
# per-mask time against prefix length, and its distribution
# --------------------------------------------------------------------------------------------------------------
def _bucket_width(max_prefix: int, target: int = 25) -> int:
    raw = max(1.0, max_prefix / target)
    for nice in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000):
        if nice >= raw:
            return nice
    return int(raw)


def prefix_buckets(steps: pd.DataFrame, width: int | None = None) -> pd.DataFrame:
    """Mean, p99 and count of ``mask_us`` per (config, dataset, tokenizer, prefix bucket); ``prefix`` = bucket start."""
    if steps.empty:
        return pd.DataFrame(columns=["config", "dataset", "tokenizer", "prefix", "mean_us", "p99_us", "n"])
    width = width or _bucket_width(int(steps["prefix_tokens"].max()))
    s = steps.assign(prefix=(steps["prefix_tokens"] // width) * width)
    g = s.groupby(["config", "dataset", "tokenizer", "prefix"])["mask_us"]
    out = g.agg(mean_us="mean", p99_us=lambda x: float(np.percentile(x, 99)), n="size").reset_index()
    out.attrs["width"] = width
    return out


def fig_mask_vs_prefix(steps: pd.DataFrame, cells: pd.DataFrame, tokenizer: str, width: int | None = None):
    """Per-mask time against prefix length: solid = mean, dashed = p99 per bucket (seed 000's figure 6)."""
    cells = cells[cells["tokenizer"] == tokenizer]
    steps = steps[steps["tokenizer"] == tokenizer]
    if cells.empty:
        return None
    datasets = order_datasets(cells["dataset"])
    st = styles(set(cells["config"]))
    fig, axes = panels(len(datasets), height=6.4)
    for ax, ds in zip(axes, datasets):
        s = steps[steps["dataset"] == ds]
        b = prefix_buckets(s, width)
        failed = []
        for _, c in cells[cells["dataset"] == ds].sort_values("config").iterrows():
            if is_failed(c["status"]):
                failed.append((c["config"], c["status"]))
                continue
            d = b[b["config"] == c["config"]]
            if d.empty:
                failed.append((c["config"], "no masks"))
                continue
            color, marker = st[c["config"]]
            ax.plot(d["prefix"], d["mean_us"], color=color, marker=marker, ms=3, ls=line_style(c["status"]),
                    label=series_label(c["config"], c["status"]), **emphasis(c["config"]))
            ax.plot(d["prefix"], d["p99_us"], color=color, ls="--", lw=0.9, alpha=0.7,
                    zorder=emphasis(c["config"])["zorder"])
        ax.set_yscale("log")
        us_axis(ax)
        ax.set_title(f"{ds} ({tokenizer})")
        w = b.attrs.get("width", 1)
        ax.set_xlabel("prefix length (tokens)" + (f", buckets of {w}" if w > 1 else ""))
        ax.set_ylabel("time per mask (log; solid mean, dashed p99)")
        handles, labels = ax.get_legend_handles_labels()
        extra = failed_handles(failed, st)
        legend_below(ax, handles + extra, labels + [h.get_label() for h in extra])
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle("Per-mask time against prefix length")
    return fig


def fig_latency_cdf(steps: pd.DataFrame, cells: pd.DataFrame, tokenizer: str):
    """Empirical CDF of per-mask time per engine config, with p50 (●), p99 (▲) and max (■) marked."""
    cells = cells[cells["tokenizer"] == tokenizer]
    steps = steps[steps["tokenizer"] == tokenizer]
    if cells.empty:
        return None
    datasets = order_datasets(cells["dataset"])
    st = styles(set(cells["config"]))
    fig, axes = panels(len(datasets), height=6.4)
    for ax, ds in zip(axes, datasets):
        failed = []
        for _, c in cells[cells["dataset"] == ds].sort_values("config").iterrows():
            us = np.sort(steps.loc[(steps["dataset"] == ds) & (steps["config"] == c["config"]), "mask_us"].to_numpy())
            if is_failed(c["status"]) or us.size == 0:
                failed.append((c["config"], c["status"] or "no masks"))
                continue
            color, _ = st[c["config"]]
            y = np.arange(1, us.size + 1) / us.size
            ax.step(us, y, where="post", color=color, label=series_label(c["config"], c["status"]),
                    **emphasis(c["config"]))
            for q, m in ((50, "o"), (99, "^")):
                v = float(np.percentile(us, q))
                ax.plot([v], [q / 100], marker=m, color=color, ms=5, ls="none")
            ax.plot([us[-1]], [1.0], marker="s", color=color, ms=5, ls="none")
        ax.set_xscale("log")
        us_axis(ax, "x")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("time per mask (log)")
        ax.set_ylabel("fraction of masks (CDF)")
        ax.set_title(f"{ds} ({tokenizer}); ● p50 ▲ p99 ■ max")
        handles, labels = ax.get_legend_handles_labels()
        extra = failed_handles(failed, st)
        legend_below(ax, handles + extra, labels + [h.get_label() for h in extra])
        ax.grid(True, alpha=0.3)
    fig.suptitle("Distribution of per-mask time")
    return fig


def _grouped_bars(ax, cells: pd.DataFrame, value: str, st: dict, log: bool, unit_fmt):
    """Bars per dataset, one per config present there; cells without a value are hatched and marked × + status."""
    datasets = order_datasets(cells["dataset"])
    vals = pd.to_numeric(cells[value], errors="coerce")
    top = float(vals.max()) if vals.notna().any() else 1.0
    placeholder = top if top > 0 else 1.0
    widest = max(int((cells["dataset"] == ds).sum()) for ds in datasets)
    for i, ds in enumerate(datasets):
        here = cells[cells["dataset"] == ds].sort_values("config")
        w = 0.8 / len(here)
        for j, (_, c) in enumerate(here.iterrows()):
            color, _ = st[c["config"]]
            x = i - 0.4 + w * (j + 0.5)
            v = c.get(value)
            rot = 90 if widest > 3 else 0
            if v is None or pd.isna(v) or is_failed(c["status"]):
                why = c["status"] if isinstance(c["status"], str) else "no value"
                ax.bar(x, placeholder, w, color="none", edgecolor=color, hatch="//", lw=0.8)
                ax.text(x, placeholder, f" × {why}", ha="center", va="bottom", fontsize=6, color="firebrick",
                        rotation=rot)
                continue
            partial = isinstance(c["status"], str)
            ax.bar(x, v, w, color=color, hatch=".." if partial else None, edgecolor="black" if partial else None,
                   lw=0.4)
            ax.text(x, v, " " + unit_fmt(v), ha="center", va="bottom", fontsize=6, rotation=rot)
    ax.set_xticks(range(len(datasets)))
    ax.set_xticklabels(datasets)
    if log:
        ax.set_yscale("log")
        low = float(vals[vals > 0].min()) if (vals > 0).any() else placeholder
        ax.set_ylim(low / 3, placeholder * 20)
    else:
        ax.set_ylim(0, placeholder * 1.6)


def _legend_for(ax, configs, st):
    """A legend of the bar charts: one colour per config, then what hatched and dotted bars mean."""
    from matplotlib.patches import Patch

    handles = [Patch(color=st[c][0], label=c) for c in sorted(configs)]
    handles.append(Patch(facecolor="none", edgecolor="grey", hatch="//", label="× no value (failed cell)"))
    handles.append(Patch(facecolor="lightgrey", edgecolor="black", hatch="..", label="partial cell"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def fig_init_time(cells: pd.DataFrame, tokenizer: str):
    """Init (compile) time per engine config and dataset, log scale."""
    cells = cells[cells["tokenizer"] == tokenizer]
    if cells.empty:
        return None
    st = styles(set(cells["config"]))
    fig = Figure(figsize=(min(14.0, max(7.0, 3.0 + 0.5 * len(cells))), 4.2),   # room for the legend at the right
                 layout="constrained")
    ax = fig.subplots()
    _grouped_bars(ax, cells, "init_s", st, log=True,
                  unit_fmt=lambda v: f"{v * 1e3:.0f} ms" if v < 1 else f"{v:.1f} s")
    ax.set_ylabel("init (compile) time, s (log)")
    ax.set_xlabel("dataset")
    ax.set_title(f"Engine init time ({tokenizer} vocabulary)")
    _legend_for(ax, set(cells["config"]), st)
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def fig_memory(cells: pd.DataFrame, tokenizer: str):
    """Peak resident memory of the worker during compile and during the run, per engine config and dataset."""
    cells = cells[cells["tokenizer"] == tokenizer]
    if cells.empty:
        return None
    st = styles(set(cells["config"]))
    fig = Figure(figsize=(min(16.0, max(9.0, 5.0 + 1.0 * len(cells))), 4.0),   # room for the legend at the right
                 layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, col, what in ((axes[0], "peak_rss_compile_mb", "compile"), (axes[1], "peak_rss_samples_mb", "samples")):
        _grouped_bars(ax, cells, col, st, log=False, unit_fmt=lambda v: f"{v:,.0f}")
        ax.set_title(f"peak resident memory, {what}")
        ax.set_xlabel("dataset")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel("peak RSS of the worker process (MB)")
    # the panels share their y axis: one limit over both columns (each call set its own; the last one won, and a
    # label above it pushed the constrained layout to collapse the axes)
    both = pd.to_numeric(pd.concat([cells["peak_rss_compile_mb"], cells["peak_rss_samples_mb"]]), errors="coerce")
    axes[0].set_ylim(0, (float(both.max()) if both.notna().any() and both.max() > 0 else 1.0) * 1.6)
    _legend_for(axes[1], set(cells["config"]), st)
    fig.suptitle(f"Memory ({tokenizer} vocabulary)")
    return fig


def fig_mask_vs_vocab(cells: pd.DataFrame):
    """Per-mask mean (and p99) against vocabulary size, one line per (engine config, dataset) that was run with
    two or more vocabularies (a sweep over ``tokenizer=``); points are named by tokenizer."""
    if cells.empty:
        return None
    swept = cells.groupby(["config", "dataset"])["vocab_size"].transform("nunique") >= 2
    cells = cells[swept]
    if cells.empty:
        return None
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    groups = list(cells.groupby(["config", "dataset"], sort=True))
    st = styles([str(k) for k, _ in groups])
    failed = []
    for k, grp in groups:
        grp = grp.sort_values("vocab_size")
        for _, c in grp[grp["status"].map(is_failed)].iterrows():
            failed.append(f"{c['config']} on {c['dataset']} ({c['tokenizer']}): {c['status']}")
        ok = grp[~grp["status"].map(is_failed) & grp["mask_mean_us"].notna()]
        if ok.empty:
            continue
        color, marker = st[str(k)]
        states = [x.split(":")[0] for x in ok["status"].dropna()]
        ax.plot(ok["vocab_size"], ok["mask_mean_us"], color=color, marker=marker,
                label=f"{k[0]} on {k[1]}" + (f" ({'failed' if 'failed' in states else 'partial'})" if states else ""))
        ax.plot(ok["vocab_size"], ok["mask_p99_us"], color=color, ls="--", lw=0.9, alpha=0.8)
        for _, c in ok.iterrows():
            ax.annotate(c["tokenizer"], (c["vocab_size"], c["mask_mean_us"]), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    us_axis(ax)
    sizes = sorted(int(v) for v in cells["vocab_size"].dropna().unique())
    ax.set_xticks(sizes, [f"{v:,}" for v in sizes], rotation=30, fontsize=7)
    no_minor_labels(ax.xaxis)
    ax.set_xlabel("vocabulary size (token ids, log)")
    ax.set_ylabel("time per mask (log; solid mean, dashed p99)")
    ax.set_title("Per-mask time against vocabulary size")
    legend_right(ax)
    failed_note(ax, failed)
    ax.grid(True, which="major", alpha=0.3)
    return fig




# --------------------------------------------------------------------------------------------------------------
# per-mask time against a swept engine option
# --------------------------------------------------------------------------------------------------------------
def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def swept_options(cells: pd.DataFrame) -> list[str]:
    """Engine options that cells were swept over: numeric options taking two or more values among cells of one
    engine, dataset and tokenizer whose other options are equal (from run.json's ``engine_options``). A lone cell
    (e.g. Valiant's CPU backend, which carries the unused ``workers``) is no sweep."""
    if cells.empty or "engine_options" not in cells:
        return []
    opts = cells["engine_options"].map(json.loads)
    found = set()
    for name in sorted({k for o in opts for k, v in o.items() if _numeric(v)}):
        rest = opts.map(lambda o: json.dumps({k: v for k, v in o.items() if k != name}, sort_keys=True))
        value = opts.map(lambda o: o.get(name) if _numeric(o.get(name)) else None)
        frame = pd.DataFrame({"engine": cells["engine"], "dataset": cells["dataset"],
                              "tokenizer": cells["tokenizer"], "rest": rest, "value": value}).dropna(subset=["value"])
        if len(frame) and frame.groupby(["engine", "dataset", "tokenizer", "rest"])["value"].nunique().max() >= 2:
            found.add(name)
    return sorted(found)


def fig_mask_vs_option(cells: pd.DataFrame, option: str):
    """Per-mask mean (and p99) against the engine option ``option``, one line per (engine, dataset, tokenizer,
    other options) run with two or more values of it; failed cells are × marks on the x axis at their value."""
    if cells.empty or "engine_options" not in cells:
        return None
    opts = cells["engine_options"].map(json.loads)
    value = opts.map(lambda o: o.get(option) if _numeric(o.get(option)) else None)
    key = opts.map(lambda o: json.dumps({k: v for k, v in o.items() if k != option}, sort_keys=True))
    cells = cells.assign(_value=pd.to_numeric(value), _key=key)
    cells = cells[cells["_value"].notna()]
    if cells.empty:
        return None
    keys = ["engine", "dataset", "tokenizer", "_key"]
    cells = cells[cells.groupby(keys)["_value"].transform("nunique") >= 2]
    if cells.empty:
        return None
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    failed = []
    groups = list(cells.groupby(keys, sort=True))
    st = styles([str(k) for k, _ in groups])
    all_opts = [json.loads(k[3]) for k, _ in groups]
    varying = sorted({o for d in all_opts for o in d if len({json.dumps(x.get(o)) for x in all_opts}) > 1})
    for k, grp in groups:
        engine, ds, tok, rest = k
        shown = ", ".join(f"{o}={json.loads(rest).get(o)}" for o in varying)
        base = grp.sort_values("_value")
        for _, c in base.iterrows():
            if is_failed(c["status"]):
                failed.append(f"{c['config']} on {ds}: {c['status']}")
        ok = base[~base["status"].map(is_failed) & base["mask_mean_us"].notna()]
        color, marker = st[str(k)]
        name = f"{engine} on {ds} ({tok})" + (f" [{shown}]" if shown else "")
        if len(ok):
            ax.plot(ok["_value"], ok["mask_mean_us"], color=color, marker=marker,
                    label=name + (" (partial)" if ok["status"].notna().any() else ""))
            ax.plot(ok["_value"], ok["mask_p99_us"], color=color, ls="--", lw=0.9, alpha=0.8)
        bad = base[base["status"].map(is_failed)]
        if len(bad):
            failed_marks(ax, bad["_value"], color)
    values = sorted(cells["_value"].unique())
    if min(values) > 0:
        ax.set_xscale("log", base=2)
    ax.set_xticks(values, [f"{v:g}" for v in values])
    no_minor_labels(ax.xaxis)
    ax.set_yscale("log")
    us_axis(ax)
    ax.set_xlabel(f"{option} (engine option)")
    ax.set_ylabel("time per mask (log; solid mean, dashed p99)")
    ax.set_title(f"Per-mask time against {option}")
    legend_right(ax)
    failed_note(ax, failed)
    ax.grid(True, which="major", alpha=0.3)
    return fig


# --------------------------------------------------------------------------------------------------------------
# every figure, and the section
# --------------------------------------------------------------------------------------------------------------
def figures(steps: pd.DataFrame, cells: pd.DataFrame) -> dict[str, Figure]:
    """Every figure the results allow, by file stem (no files written)."""
    out: dict[str, Figure] = {}
    if cells.empty:
        return out
    cells = cells[~is_batch(cells)]   # batch-mode cells: their own figure (fig_batch)
    if "run_dir" in steps and "path" in cells:
        steps = steps[steps["run_dir"].isin(set(cells["path"]))]
    for tok in sorted(set(cells["tokenizer"])):
        for stem, f in ((f"mask_vs_prefix_{tok}", fig_mask_vs_prefix(steps, cells, tok)),
                        (f"latency_cdf_{tok}", fig_latency_cdf(steps, cells, tok)),
                        (f"init_time_{tok}", fig_init_time(cells, tok)),
                        (f"memory_{tok}", fig_memory(cells, tok))):
            if f is not None:
                out[stem] = f
    for option in swept_options(cells):
        f = fig_mask_vs_option(cells, option)
        if f is not None:
            out[f"mask_vs_{option}"] = f
    f = fig_mask_vs_vocab(cells)
    if f is not None:
        out["mask_vs_vocab"] = f
    return out


def draw_all(results_root: Path | str, out_dir: Path | str) -> list[Path]:
    """Draw every figure the results under ``results_root`` allow into ``out_dir`` (PNG and PDF); return the files."""
    out_dir = Path(out_dir)
    cells = load_cells(results_root)
    if cells.empty:
        return []
    steps = load_steps(results_root)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for stem, fig in figures(steps, cells).items():
        paths += save_figure(fig, out_dir, stem)
    if is_batch(cells).any():
        bcells = collect_batch([results_root])
        for tok in sorted(set(bcells["tokenizer"])):
            fig = fig_batch(bcells, tok)
            if fig is not None:
                paths += save_figure(fig, out_dir, f"batch_{tok}")
    return paths


def caption(stem: str) -> str:
    """The README caption of a figure file (:data:`CAPTIONS`, by the first matching prefix)."""
    return next((c for k, c in CAPTIONS.items() if stem.startswith(k)), stem)


def lines(ctx: Context) -> list[str]:
    """The "Figures" section: draws every figure of the --results cells into ``<out>/figures/``."""
    pngs = [p for p in draw_all(ctx.results, ctx.out / "figures") if p.suffix == ".png"
            and not p.stem.startswith("batch_")]   # the batch section shows its own figure
    out = ["", "## Figures", "",
           f"Drawn by `python -m experiments.figures --results {ctx.results} --out {ctx.out / 'figures'}` (PNG and "
           "PDF). Hatched bars and × entries are cells that produced no masks (compile error, time-out, "
           "out-of-memory); \"partial\" marks cells cut short by a limit.", ""]
    for p in pngs:
        out += [f"### {p.stem}", "", caption(p.stem), "", figure_link(p.stem), ""]
    return out


SECTION = Section("figures", lines, "figures of the --results cells (figures/)")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Figures from stored results only (PNG and PDF)")
    ap.add_argument("--results", default="results/runs", help="folder searched for run.json files")
    ap.add_argument("--out", default="results/figures", help="where the PNG and PDF files go")
    args = ap.parse_args(argv)
    paths = draw_all(Path(args.results), Path(args.out))
    if not paths:
        raise SystemExit(f"no run.json under {args.results}: run `python -m experiments.run ...` first")
    for p in paths:
        print(p)


if __name__ == "__main__":
    main()
