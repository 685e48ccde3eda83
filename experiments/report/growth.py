"""Further runs (``--also``: folders outside the Table 1 sweep, e.g. all 300 TreeBank samples): their cells, the
mask-time tail at every prefix length (``prefix_tails_<name>.csv``), and the growth figure against the tails of
earlier runs (``--before``)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gcdbench.experiments.report.cells import details
from gcdbench.experiments.report.collect import collect, find_runs, load_cells, load_steps, run_infos, single_mode
from gcdbench.experiments.report.figures import fig_mask_vs_prefix
from gcdbench.experiments.report.plot import (emphasis, legend_below, order_datasets, panels, save_figure, styles,
                                              tick_us, us_axis)
from gcdbench.experiments.report.section import Context, Section
from gcdbench.experiments.report.text import figure_link, fmt_us, markdown, measured_at


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
    lines = []
    commits = sorted({str(r["git_commit"] or "?")[:7] for r in run_infos(find_runs(Path(root)))})
    now = f"this run ({', '.join(commits) or 'commit unknown'})"
    for path in before:
        label, old = read_before(path)
        for (config, ds, tok), t in tails.groupby(["config", "dataset", "tokenizer"]):
            o = old[(old["config"] == config) & (old["dataset"] == ds) & (old["tokenizer"] == tok)]
            if o.empty:
                continue
            fig = fig_growth({label: o, now: t}, limit_us)
            stem = f"growth_{name}_{config}_{tok}"
            save_figure(fig, out / "figures", stem)
            lines += [f"**Growth, {config} on {ds} ({tok})**, {label} → {now}: highest per-length p99 "
                      f"{fmt_us(o['p99_us'].max())} → {fmt_us(t['p99_us'].max())} µs; lengths over "
                      f"{fmt_us(limit_us)} µs: {int((o['p99_us'] > limit_us).sum())} of {len(o)} → "
                      f"{int((t['p99_us'] > limit_us).sum())} of {len(t)}; median of the per-length p50 "
                      f"{fmt_us(o['p50_us'].median())} → {fmt_us(t['p50_us'].median())} µs (`{path}`).", "",
                      figure_link(stem), ""]
    return lines


def further_runs(root: Path, out: Path, limit_us: float = 1000.0, before: tuple = ()) -> list[str]:
    """README lines for a run folder outside the Table 1 sweep, and its per-prefix-length tail files (and the
    growth figure against ``before``: per-prefix tail CSVs of earlier runs)."""
    cells = single_mode(collect(root))
    if cells.empty:
        return [f"## Further runs: `{root}`", "", "No run.json found.", ""]
    name = Path(root).name
    lines = [f"## Further runs: `{root}`", "", markdown(details(cells).drop(columns=["machine", "gpu"])), "",
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
            f"{int(t['prefix_tokens'].max())} tokens. Highest per-length p99: {fmt_us(worst['p99_us'])} µs at "
            f"length {int(worst['prefix_tokens'])} ({int(worst['masks'])} masks). Lengths whose p99 exceeds "
            f"{fmt_us(limit_us)} µs: {len(over)} of {len(t)}"
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
            save_figure(fig, figs, stem)
            lines += [figure_link(stem), ""]
    return lines


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
    datasets = order_datasets(pd.concat([t["dataset"] for t in tables.values()]))
    st = styles(set(tables))
    fig, axes = panels(len(datasets), height=5.0)
    for ax, ds in zip(axes, datasets):
        for label in tables:
            d = tables[label]
            d = d[d["dataset"] == ds].sort_values("prefix_tokens")
            if d.empty:
                continue
            color, marker = st[label]
            ax.plot(d["prefix_tokens"], d["p50_us"], color=color, marker=marker, ms=2, label=f"{label} p50",
                    **emphasis(label))
            ax.plot(d["prefix_tokens"], d["p99_us"], color=color, ls="--", lw=0.9, label=f"{label} p99")
        if limit_us:
            ax.axhline(limit_us, color="0.4", ls=":", lw=1, label=f"target {tick_us(limit_us)}")
        ax.set_yscale("log")
        us_axis(ax)
        ax.set_title(ds)
        ax.set_xlabel("prefix length (tokens)")
        ax.set_ylabel("time per mask (log)")
        legend_below(ax)
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
    return save_figure(fig, out_dir, "growth")


def lines(ctx: Context) -> list[str]:
    """One "Further runs" section per --also folder."""
    return [line for root in ctx.also for line in further_runs(Path(root), ctx.out, before=ctx.before)]


SECTION = Section("further_runs", lines, "each --also folder: its cells, per-prefix tails, growth figure")
