"""Figures from stored results only: every folder under the results root that has a ``run.json``.

``python -m experiments.figures --results results/runs --out results/figures`` writes, as PNG and PDF:

- ``mask_vs_prefix_<tokenizer>``: per-mask time against prefix length (tokens), mean and p99 per bucket, log y,
  one panel per dataset, one colour per engine config (seed 000's figure 6);
- ``mask_vs_workers``: per-mask time against the Valiant engine's ``workers`` option (seed 000's figure 5);
- ``mask_vs_vocab``: per-mask time against the vocabulary size (``vocab_size`` of run.json; a tokenizer sweep);
- ``latency_cdf_<tokenizer>``: the distribution of per-mask time per engine config, p50/p99/max marked;
- ``init_time_<tokenizer>`` and ``memory_<tokenizer>``: compile time and peak resident memory per cell;
- ``batch_<tokenizer>``: batch mode, step latency and per-sequence cost against the batch size B (log axes).

Batch-mode cells are drawn only in ``batch_<tokenizer>``; the other figures show single-mode cells.

Cells that did not produce masks (compile error, compile time-out or out-of-memory) are shown, never dropped:
a hatched bar marked ``×`` in the bar charts and a ``×`` note with the reason in the line charts. A cell is drawn
as complete only when every requested sample ended ``ok``: any other outcome (``Outcome`` of parsers/base.py:
rejected, no_eos, timeout, oom, engine_error, crash, skipped) puts its status in the legend ("partial: rejected
13/30", or "failed: engine_error 30/30" when no sample passed, drawn dotted).

Figures are built on :class:`matplotlib.figure.Figure` objects without pyplot (no global backend state), saved
through the Agg (PNG) and PDF canvases; a notebook can display the returned figures directly.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from gcdbench.experiments.report import (DATASET_ORDER, Unreadable, collect, collect_batch, find_runs, is_batch,
                                         read_cell_file)
from gcdbench.parsers.base import Outcome
CAPTIONS = {   # by file stem prefix, for the report's README
    "mask_vs_prefix": "Per-mask time against prefix length (tokens): solid = mean, dashed = p99 per prefix bucket, "
                      "log scale; one panel per dataset (seed 000's figure 6).",
    "latency_cdf": "Distribution of per-mask time per engine config; ● p50, ▲ p99, ■ max.",
    "init_time": "Engine init (grammar + vocabulary compile) time per cell, log scale.",
    "memory": "Peak resident memory (MB) of the worker process during compile and during the samples.",
    "mask_vs_workers": "Per-mask time against the engine's `workers` option (seed 000's figure 5).",
    "mask_vs_vocab": "Per-mask time against vocabulary size (a sweep over `tokenizer=`); points named by tokenizer.",
    "batch": "Batch mode: step latency (one `fill_masks` call over the live sequences; p50 over full steps, band "
             "to p99) and per-sequence cost (step time / live sequences) against the batch size B, log axes; "
             "× = a B at which the cell produced no step.",
    "growth": "Per-mask time at each prefix length (tokens), p50 solid and p99 dashed, before and after a change; "
              "dotted: the target.",
}
_MARKERS = "osD^v<>ph*"


# --------------------------------------------------------------------------------------------------------------
# tidy frames
# --------------------------------------------------------------------------------------------------------------
def load_steps(root: Path | str) -> pd.DataFrame:
    """Every mask of every cell under ``root`` as one tidy frame.

    Columns: those of ``steps.parquet`` (engine, config, dataset, tokenizer, sample_id, step, prefix_tokens,
    prefix_bytes, mask_us, ...) plus ``vocab_size``, ``workers`` (the engine's option, if it has one) and ``run_dir``.
    """
    frames = []
    for run_dir in find_runs(Path(root)):
        try:
            meta = read_cell_file(run_dir, "run.json")
            df = read_cell_file(run_dir, "steps.parquet")
        except Unreadable:
            continue   # collect() warns about it and skips the cell
        if df is None:
            continue
        df["vocab_size"] = meta.get("vocab_size")
        df["workers"] = (meta.get("engine_options") or {}).get("workers")
        df["run_dir"] = str(run_dir)
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["engine", "config", "dataset", "tokenizer", "sample_id", "step", "prefix_tokens",
                                     "prefix_bytes", "mask_us", "commit_us", "n_allowed", "oracle_allowed", "outcome",
                                     "vocab_size", "workers", "run_dir"])
    return pd.concat(frames, ignore_index=True)


def load_cells(root: Path | str) -> pd.DataFrame:
    """One row per cell (``report.collect``) plus ``vocab_size``, ``workers``, ``engine_options`` and ``status``.

    ``status`` is None for a complete cell, else a short reason (:func:`cell_status`).
    """
    cells = collect(Path(root))
    if cells.empty:
        return cells
    extra = []
    for path in cells["path"]:
        meta = read_cell_file(Path(path), "run.json")
        opts = meta.get("engine_options") or {}
        extra.append({"vocab_size": meta.get("vocab_size"), "workers": opts.get("workers"),
                      "engine_options": json.dumps(opts, sort_keys=True)})
    attrs = dict(cells.attrs)
    cells = pd.concat([cells.reset_index(drop=True), pd.DataFrame(extra)], axis=1)
    cells.attrs.update(attrs)
    cells["status"] = pd.Series([cell_status(r) for _, r in cells.iterrows()], dtype=object, index=cells.index)
    return cells


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


def _value(x):
    return None if x is None or (isinstance(x, float) and np.isnan(x)) else x


def is_failed(status) -> bool:
    """True for cells that produced no masks at all."""
    return isinstance(status, str) and status.startswith("compile")


def _line_style(status) -> str:
    """Dotted for a cell in which no sample passed, solid otherwise."""
    return ":" if isinstance(status, str) and status.startswith("failed") else "-"


def _datasets(values) -> list[str]:
    vals = set(values)
    return [d for d in DATASET_ORDER if d in vals] + sorted(vals - set(DATASET_ORDER))


def _styles(configs) -> dict:
    """A fixed colour and marker per engine config, stable across figures."""
    from matplotlib import colormaps

    cmap = colormaps["tab10"] if len(configs) <= 10 else colormaps["tab20"]
    return {c: (cmap(i % cmap.N), _MARKERS[i % len(_MARKERS)]) for i, c in enumerate(sorted(configs))}


def _label(config: str, status) -> str:
    return f"{config} ({status})" if isinstance(status, str) and status else config


def _fmt_us(v) -> str:
    if v <= 0:
        return ""
    if v >= 1e6:
        return f"{v / 1e6:g} s"
    if v >= 1e3:
        return f"{v / 1e3:g} ms"
    return f"{v:g} µs"


def _us_formatter(ax, axis="y"):
    """A log axis in µs with µs/ms/s tick labels; minor ticks are labelled (selectively) on short ranges."""
    from matplotlib.ticker import LogFormatter

    class UsFormatter(LogFormatter):
        def _num_to_string(self, x, vmin, vmax):
            return _fmt_us(x)

    a = ax.yaxis if axis == "y" else ax.xaxis
    a.set_major_formatter(UsFormatter(labelOnlyBase=False))
    # labels with units are wide: on x, minor ticks get labels only within one decade (matplotlib's default)
    a.set_minor_formatter(UsFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5) if axis == "y" else (1, 0.4)))


def _panels(n: int, width=5.0, height=3.6):
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _failed_note(ax, failed: list[str]):
    if failed:
        ax.text(0.99, 0.02, "\n".join(f"× {f}" for f in failed), transform=ax.transAxes, ha="right", va="bottom",
                fontsize=7, color="firebrick", bbox=dict(boxstyle="round", fc="white", ec="firebrick", alpha=0.85))


def _empty(ax, text):
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=9, color="grey")
    ax.set_xticks([])
    ax.set_yticks([])


# --------------------------------------------------------------------------------------------------------------
# figures (each returns a Figure, or None when the results hold nothing to draw)
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
    datasets = _datasets(cells["dataset"])
    styles = _styles(set(cells["config"]))
    fig, axes = _panels(len(datasets))
    for ax, ds in zip(axes, datasets):
        s = steps[steps["dataset"] == ds]
        b = prefix_buckets(s, width)
        failed = []
        for _, c in cells[cells["dataset"] == ds].sort_values("config").iterrows():
            if is_failed(c["status"]):
                failed.append(f"{c['config']}: {c['status']}")
                continue
            d = b[b["config"] == c["config"]]
            if d.empty:
                failed.append(f"{c['config']}: no masks")
                continue
            color, marker = styles[c["config"]]
            ax.plot(d["prefix"], d["mean_us"], color=color, marker=marker, ms=3, ls=_line_style(c["status"]),
                    label=_label(c["config"], c["status"]))
            ax.plot(d["prefix"], d["p99_us"], color=color, ls="--", lw=0.9, alpha=0.8)
        ax.set_yscale("log")
        _us_formatter(ax)
        ax.set_title(f"{ds} ({tokenizer})")
        w = b.attrs.get("width", 1)
        ax.set_xlabel("prefix length (tokens)" + (f", buckets of {w}" if w > 1 else ""))
        ax.set_ylabel("time per mask (log; solid mean, dashed p99)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left")
        _failed_note(ax, failed)
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle("Per-mask time against prefix length")
    return fig


def prefix_percentiles(steps: pd.DataFrame) -> pd.DataFrame:
    """p50, p99, mean and count of ``mask_us`` per (dataset, prefix length in tokens): one row per length, no
    buckets (a growth figure's input; ``bench_valiant`` writes the same columns as its ``per_prefix`` records)."""
    cols = ["dataset", "prefix_tokens", "masks", "p50_us", "p99_us", "mean_us"]
    if steps.empty:
        return pd.DataFrame(columns=cols)
    g = steps.groupby(["dataset", "prefix_tokens"])["mask_us"]
    return g.agg(masks="size", p50_us="median", p99_us=lambda x: float(np.percentile(x, 99)),
                 mean_us="mean").reset_index()[cols]


def fig_growth(tables: dict[str, pd.DataFrame], limit_us: float | None = None):
    """Per-mask time against exact prefix length, p50 (solid) and p99 (dashed), one line pair per labelled table
    (for example ``{"before": ..., "after": ...}`` of :func:`prefix_percentiles`), one panel per dataset; a dotted
    line at ``limit_us`` (a target) when given."""
    tables = {k: v for k, v in tables.items() if v is not None and not v.empty}
    if not tables:
        return None
    datasets = _datasets(pd.concat([t["dataset"] for t in tables.values()]))
    styles = _styles(set(tables))
    fig, axes = _panels(len(datasets))
    for ax, ds in zip(axes, datasets):
        for label in tables:
            d = tables[label]
            d = d[d["dataset"] == ds].sort_values("prefix_tokens")
            if d.empty:
                continue
            color, marker = styles[label]
            ax.plot(d["prefix_tokens"], d["p50_us"], color=color, marker=marker, ms=2, label=f"{label} p50")
            ax.plot(d["prefix_tokens"], d["p99_us"], color=color, ls="--", lw=0.9, label=f"{label} p99")
        if limit_us:
            ax.axhline(limit_us, color="0.4", ls=":", lw=1, label=f"target {_fmt_us(limit_us)}")
        ax.set_yscale("log")
        _us_formatter(ax)
        ax.set_title(ds)
        ax.set_xlabel("prefix length (tokens)")
        ax.set_ylabel("time per mask (log)")
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle("Per-mask time by prefix length (p50, p99)")
    return fig


def draw_growth(before: Path | str, after: Path | str, out_dir: Path | str, limit_us: float | None = None,
                labels: tuple[str, str] = ("before", "after")) -> list[Path]:
    """:func:`fig_growth` of the runs stored under ``before`` and ``after`` (two results roots) into ``out_dir`` as
    ``growth.png``/``.pdf``; returns the files (none when neither root holds steps)."""
    fig = fig_growth({labels[0]: prefix_percentiles(load_steps(before)),
                      labels[1]: prefix_percentiles(load_steps(after))}, limit_us)
    if fig is None:
        return []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return _save(fig, out_dir, "growth")


def fig_mask_vs_workers(cells: pd.DataFrame):
    """Per-mask mean (and p99) against the engine option ``workers`` (seed 000's figure 5).

    Only a sweep is drawn: cells whose other options agree and that were run with two or more worker counts.
    A lone cell (e.g. the CPU backend, where ``workers`` is carried in the options but unused) is no sweep."""
    cells = cells[cells["workers"].notna()] if "workers" in cells else cells.iloc[0:0]
    if cells.empty:
        return None
    # one line per (dataset, tokenizer, engine options other than workers)
    key = cells["engine_options"].map(lambda o: json.dumps({k: v for k, v in json.loads(o).items() if k != "workers"},
                                                           sort_keys=True))
    cells = cells.assign(_key=key)
    swept = cells.groupby(["engine", "dataset", "tokenizer", "_key"])["workers"].transform("nunique") >= 2
    cells = cells[swept]
    if cells.empty:
        return None
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    failed = []
    groups = list(cells.groupby(["engine", "dataset", "tokenizer", "_key"], sort=True))
    styles = _styles([str(k) for k, _ in groups])
    all_opts = [json.loads(k[3]) for k, _ in groups]
    varying = sorted({o for d in all_opts for o in d if len({json.dumps(x.get(o)) for x in all_opts}) > 1})
    for k, grp in groups:
        engine, ds, tok, opts = k
        shown = ", ".join(f"{o}={json.loads(opts).get(o)}" for o in varying)
        base = grp.sort_values("workers")
        for _, c in base.iterrows():
            if is_failed(c["status"]):
                failed.append(f"{c['config']} on {ds}: {c['status']}")
        ok = base[~base["status"].map(is_failed) & base["mask_mean_us"].notna()]
        color, marker = styles[str(k)]
        name = f"{engine} on {ds} ({tok})" + (f" [{shown}]" if shown else "")
        partial = ok["status"].notna().any()
        if len(ok):
            ax.plot(ok["workers"], ok["mask_mean_us"], color=color, marker=marker,
                    label=name + (" (partial)" if partial else ""))
            ax.plot(ok["workers"], ok["mask_p99_us"], color=color, ls="--", lw=0.9, alpha=0.8)
        # failed points: an × on the x axis at their worker count
        bad = base[base["status"].map(is_failed)]
        if len(bad):
            ax.scatter(bad["workers"], [0.02] * len(bad), marker="x", color=color, s=60, zorder=5,
                       transform=ax.get_xaxis_transform(), clip_on=False)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(cells["workers"].astype(int).unique()))
    ax.set_xticklabels([str(w) for w in sorted(cells["workers"].astype(int).unique())])
    ax.set_yscale("log")
    _us_formatter(ax)
    ax.set_xlabel("workers (engine option; CUDA backend: thread blocks, at most one SM each)")
    ax.set_ylabel("time per mask (log; solid mean, dashed p99)")
    ax.set_title("Per-mask time against workers")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    _failed_note(ax, failed)
    ax.grid(True, which="major", alpha=0.3)
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
    styles = _styles([str(k) for k, _ in groups])
    failed = []
    for k, grp in groups:
        grp = grp.sort_values("vocab_size")
        for _, c in grp[grp["status"].map(is_failed)].iterrows():
            failed.append(f"{c['config']} on {c['dataset']} ({c['tokenizer']}): {c['status']}")
        ok = grp[~grp["status"].map(is_failed) & grp["mask_mean_us"].notna()]
        if ok.empty:
            continue
        color, marker = styles[str(k)]
        states = [st.split(":")[0] for st in ok["status"].dropna()]
        ax.plot(ok["vocab_size"], ok["mask_mean_us"], color=color, marker=marker,
                label=f"{k[0]} on {k[1]}" + (f" ({'failed' if 'failed' in states else 'partial'})" if states else ""))
        ax.plot(ok["vocab_size"], ok["mask_p99_us"], color=color, ls="--", lw=0.9, alpha=0.8)
        for _, c in ok.iterrows():
            ax.annotate(c["tokenizer"], (c["vocab_size"], c["mask_mean_us"]), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _us_formatter(ax)
    sizes = sorted(int(v) for v in cells["vocab_size"].dropna().unique())
    ax.set_xticks(sizes, [f"{v:,}" for v in sizes], rotation=30, fontsize=7)
    ax.xaxis.set_minor_formatter(_null_formatter())
    ax.set_xlabel("vocabulary size (token ids, log)")
    ax.set_ylabel("time per mask (log; solid mean, dashed p99)")
    ax.set_title("Per-mask time against vocabulary size")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    _failed_note(ax, failed)
    ax.grid(True, which="major", alpha=0.3)
    return fig


def _null_formatter():
    from matplotlib.ticker import NullFormatter

    return NullFormatter()


def fig_latency_cdf(steps: pd.DataFrame, cells: pd.DataFrame, tokenizer: str):
    """Empirical CDF of per-mask time per engine config, with p50 (●), p99 (▲) and max (■) marked."""
    cells = cells[cells["tokenizer"] == tokenizer]
    steps = steps[steps["tokenizer"] == tokenizer]
    if cells.empty:
        return None
    datasets = _datasets(cells["dataset"])
    styles = _styles(set(cells["config"]))
    fig, axes = _panels(len(datasets))
    for ax, ds in zip(axes, datasets):
        failed = []
        for _, c in cells[cells["dataset"] == ds].sort_values("config").iterrows():
            us = np.sort(steps.loc[(steps["dataset"] == ds) & (steps["config"] == c["config"]), "mask_us"].to_numpy())
            if is_failed(c["status"]) or us.size == 0:
                failed.append(f"{c['config']}: {c['status'] or 'no masks'}")
                continue
            color, _ = styles[c["config"]]
            y = np.arange(1, us.size + 1) / us.size
            ax.step(us, y, where="post", color=color, label=_label(c["config"], c["status"]))
            for q, m in ((50, "o"), (99, "^")):
                v = float(np.percentile(us, q))
                ax.plot([v], [q / 100], marker=m, color=color, ms=5, ls="none")
            ax.plot([us[-1]], [1.0], marker="s", color=color, ms=5, ls="none")
        ax.set_xscale("log")
        _us_formatter(ax, "x")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("time per mask (log)")
        ax.set_ylabel("fraction of masks (CDF)")
        ax.set_title(f"{ds} ({tokenizer}); ● p50 ▲ p99 ■ max")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right" if not failed else "center right")
        _failed_note(ax, failed)
        ax.grid(True, alpha=0.3)
    fig.suptitle("Distribution of per-mask time")
    return fig


def _grouped_bars(ax, cells: pd.DataFrame, value: str, styles: dict, log: bool, unit_fmt):
    """Bars per dataset, one per config present there; cells without a value are hatched and marked × + status."""
    datasets = _datasets(cells["dataset"])
    vals = pd.to_numeric(cells[value], errors="coerce")
    top = float(vals.max()) if vals.notna().any() else 1.0
    placeholder = top if top > 0 else 1.0
    widest = max(int((cells["dataset"] == ds).sum()) for ds in datasets)
    for i, ds in enumerate(datasets):
        here = cells[cells["dataset"] == ds].sort_values("config")
        w = 0.8 / len(here)
        for j, (_, c) in enumerate(here.iterrows()):
            color, _ = styles[c["config"]]
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


def _legend_for(ax, configs, styles):
    from matplotlib.patches import Patch

    handles = [Patch(color=styles[c][0], label=c) for c in sorted(configs)]
    handles.append(Patch(facecolor="none", edgecolor="grey", hatch="//", label="× no value (failed cell)"))
    handles.append(Patch(facecolor="lightgrey", edgecolor="black", hatch="..", label="partial cell"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def fig_init_time(cells: pd.DataFrame, tokenizer: str):
    """Init (compile) time per engine config and dataset, log scale."""
    cells = cells[cells["tokenizer"] == tokenizer]
    if cells.empty:
        return None
    styles = _styles(set(cells["config"]))
    fig = Figure(figsize=(min(14.0, 3.0 + 0.5 * len(cells)), 4.2),
                 layout="constrained")
    ax = fig.subplots()
    _grouped_bars(ax, cells, "init_s", styles, log=True,
                  unit_fmt=lambda v: f"{v * 1e3:.0f} ms" if v < 1 else f"{v:.1f} s")
    ax.set_ylabel("init (compile) time, s (log)")
    ax.set_xlabel("dataset")
    ax.set_title(f"Engine init time ({tokenizer} vocabulary)")
    _legend_for(ax, set(cells["config"]), styles)
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def fig_memory(cells: pd.DataFrame, tokenizer: str):
    """Peak resident memory of the worker during compile and during the run, per engine config and dataset."""
    cells = cells[cells["tokenizer"] == tokenizer]
    if cells.empty:
        return None
    styles = _styles(set(cells["config"]))
    fig = Figure(figsize=(min(16.0, 5.0 + 1.0 * len(cells)), 4.0),
                 layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, col, what in ((axes[0], "peak_rss_compile_mb", "compile"), (axes[1], "peak_rss_samples_mb", "samples")):
        _grouped_bars(ax, cells, col, styles, log=False, unit_fmt=lambda v: f"{v:,.0f}")
        ax.set_title(f"peak resident memory, {what}")
        ax.set_xlabel("dataset")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel("peak RSS of the worker process (MB)")
    _legend_for(axes[1], set(cells["config"]), styles)
    fig.suptitle(f"Memory ({tokenizer} vocabulary)")
    return fig


def fig_batch(bcells: pd.DataFrame, tokenizer: str):
    """Batch mode (``report.collect_batch`` rows): per dataset, step latency (top: p50 over full steps, band to
    p99) and per-sequence cost (bottom: step time / live sequences) against B, log-log; one line per engine config
    (its thread count is in the config name). A B at which a cell produced no step is an × on the axis, with its
    reason in the note; a cell with other outcomes than ``ok`` is named "partial"/"failed" in the legend."""
    bcells = bcells[bcells["tokenizer"] == tokenizer] if not bcells.empty else bcells
    if bcells.empty:
        return None
    datasets = _datasets(bcells["dataset"])
    styles = _styles(set(bcells["config"]))
    fig = Figure(figsize=(max(6.5, 5.2 * len(datasets)), 7.6), layout="constrained")
    axes = fig.subplots(2, len(datasets), squeeze=False)
    for col, ds in enumerate(datasets):
        top, bottom = axes[0][col], axes[1][col]
        failed = []
        here = bcells[bcells["dataset"] == ds]
        for config, grp in here.groupby("config", sort=True):
            grp = grp.sort_values("B")
            color, marker = styles[config]
            ok = grp[grp["step_p50_us"].notna()] if "step_p50_us" in grp else grp.iloc[0:0]
            status = {cell_status(r) for _, r in grp.iterrows()} - {None}
            worst = "failed" if any(str(x).startswith(("failed", "compile")) for x in status) else \
                ("partial" if status else "")
            label = config + (f" ({worst} at some B)" if worst else "")
            if len(ok):
                top.plot(ok["B"], ok["step_p50_us"], color=color, marker=marker, ms=4, label=label)
                top.fill_between(ok["B"], ok["step_p50_us"], ok["step_p99_us"], color=color, alpha=0.12)
                bottom.plot(ok["B"], ok["per_seq_us"], color=color, marker=marker, ms=4, label=label)
            bad = grp[~grp.index.isin(ok.index)]
            for ax in (top, bottom):
                if len(bad):
                    ax.scatter(bad["B"], [0.02] * len(bad), marker="x", color=color, s=50, zorder=5,
                               transform=ax.get_xaxis_transform(), clip_on=False)
            for _, c in bad.iterrows():
                why = cell_status(c) or "no steps"
                failed.append(f"{config} B={int(c['B'])}: {why}")
        Bs = sorted(int(b) for b in here["B"].unique())
        for ax, what in ((top, "step latency (one fill_masks call; p50, band to p99)"),
                         (bottom, "per-sequence cost (step time / live sequences)")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(Bs, [str(b) for b in Bs])
            ax.xaxis.set_minor_formatter(_null_formatter())
            ax.set_yscale("log")
            _us_formatter(ax)
            ax.set_xlabel("batch size B (sequences in lock-step)")
            ax.set_ylabel(what, fontsize=8)
            ax.grid(True, which="major", alpha=0.3)
        top.set_title(f"{ds} ({tokenizer})")
        if top.get_legend_handles_labels()[0]:
            top.legend(fontsize=6, loc="upper left")
        _failed_note(bottom, failed[:12] + ([f"... {len(failed) - 12} more"] if len(failed) > 12 else []))
    fig.suptitle("Batch decoding: step latency and per-sequence cost against B")
    return fig


# --------------------------------------------------------------------------------------------------------------
def _save(fig: Figure, out_dir: Path, stem: str) -> list[Path]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    paths = []
    for ext in ("png", "pdf"):
        p = out_dir / f"{stem}.{ext}"
        fig.savefig(p, dpi=150)
        paths.append(p)
    return paths


def figures(steps: pd.DataFrame, cells: pd.DataFrame) -> dict[str, Figure]:
    """Every figure the results allow, by file stem (no files written)."""
    out: dict[str, Figure] = {}
    if cells.empty:
        return out
    cells = cells[~is_batch(cells)]   # batch-mode cells: their own figure (fig_batch)
    if "run_dir" in steps and "path" in cells:
        steps = steps[steps["run_dir"].isin(set(cells["path"]))]
    tokenizers = sorted(set(cells["tokenizer"]))
    for tok in tokenizers:
        for stem, f in ((f"mask_vs_prefix_{tok}", fig_mask_vs_prefix(steps, cells, tok)),
                        (f"latency_cdf_{tok}", fig_latency_cdf(steps, cells, tok)),
                        (f"init_time_{tok}", fig_init_time(cells, tok)),
                        (f"memory_{tok}", fig_memory(cells, tok))):
            if f is not None:
                out[stem] = f
    for stem, f in (("mask_vs_workers", fig_mask_vs_workers(cells)), ("mask_vs_vocab", fig_mask_vs_vocab(cells))):
        if f is not None:
            out[stem] = f
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
        paths += _save(fig, out_dir, stem)
    if is_batch(cells).any():
        bcells = collect_batch([results_root])
        for tok in sorted(set(bcells["tokenizer"])):
            fig = fig_batch(bcells, tok)
            if fig is not None:
                paths += _save(fig, out_dir, f"batch_{tok}")
    return paths


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
