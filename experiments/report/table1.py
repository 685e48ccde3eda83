"""Table 1 in seed 000's layout: per engine config and dataset, complexity, init, per-mask mean and p50/p99/max,
pass; written as ``table1.md``, ``.csv`` and ``.tex``."""
from __future__ import annotations

import pandas as pd

from gcdbench.experiments.report import stats
from gcdbench.experiments.report.collect import DATASET_ORDER, engine_class
from gcdbench.experiments.report.section import Context, Section
from gcdbench.experiments.report.text import fmt_s, fmt_us, get, markdown, measured_at


def complexity(engine: str, ambiguous: bool) -> str:
    """Table 1's "Cmplx." entry: what the engine class declares for a grammar that is (not) highly ambiguous."""
    cls = engine_class(engine)
    return cls.complexity(bool(ambiguous)) if cls is not None else "?"


def table1(cells: pd.DataFrame, tokenizer: str = "qwen3", intervals: pd.DataFrame | None = None
           ) -> tuple[pd.DataFrame, list[str]]:
    """Rows = engine configs, per dataset: complexity, init, per-mask mean (µs), p50/p99/max, pass rate.
    ``intervals`` (:func:`.stats.cell_intervals`): a config run with repeats shows its repeats' masks pooled, the
    mean with its 95% interval (issue 66)."""
    cells = cells[cells["tokenizer"] == tokenizer]
    pooled = ({(r.config, r.dataset): r for r in intervals.itertuples() if r.repeats > 1}
              if intervals is not None and not intervals.empty else {})
    notes: list[str] = []
    once = None   # the note number shared by every cell run once in a table that has repeated cells
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
            row[f"{ds} Cmplx."] = complexity(c["engine"], bool(get(c, "ambiguous")))
            if isinstance(c.get("compile_error"), str) and c["compile_error"]:
                notes.append(f"{config} × {ds}: not run: {c['compile_error'].splitlines()[0][:200]}")
                row[f"{ds} Init"] = "×"
                row[f"{ds} Per-mask µs"] = f"× [{len(notes)}]"
                row[f"{ds} p50/p99/max µs"] = "×"
                row[f"{ds} Pass"] = "×"
                continue
            mark = ""
            n_ok_cells = int(get(c, "samples") or 0)
            passed, requested, aborted = int(get(c, "passed") or 0), get(c, "requested"), get(c, "aborted")
            if aborted or (requested and passed < requested):
                notes.append(
                    f"{config} × {ds}: estimated from {int(get(c, 'mask_n') or 0)} masks of {n_ok_cells} samples "
                    f"({get(c, 'outcomes') or ''})" + (f"; {aborted}" if aborted else ""))
                mark = f" [{len(notes)}]"
            if get(c, "provenance"):
                notes.append(f"{config} × {ds}: not from one clean commit: {c['provenance']}")
                mark += f" [{len(notes)}]"
            row[f"{ds} Init"] = fmt_s(c.get("init_s"))
            if get(c, "init_cache_hit"):
                notes.append(f"{config} × {ds}: init read from the engine's on-disk cache, not a cold compile")
                row[f"{ds} Init"] += f" [{len(notes)}]"
            row[f"{ds} Per-mask µs"] = fmt_us(c.get("mask_mean_us")) + mark
            row[f"{ds} p50/p99/max µs"] = "/".join(fmt_us(c.get(k)) for k in ("mask_p50_us", "mask_p99_us", "mask_max_us"))
            if pooled and (config, ds) not in pooled and get(c, "mask_n"):   # beside repeated cells: say it is one
                if once is None:
                    notes.append("one run, no repeats (a slow engine's cell, or one run before repeats): its figures "
                                 "come from one sitting, and no interval covers the machine's drift between runs")
                    once = len(notes)
                row[f"{ds} Per-mask µs"] += f" [{once}]"
            if (config, ds) in pooled:   # repeats: every repeat's masks, the mean with its interval (stats.py)
                p = pooled[(config, ds)]
                notes.append(f"{config} × {ds}: {p.repeats} repeats pooled ({p.masks} masks); [low, high]: 95% "
                             "bootstrap interval over samples and repeats" + ("; unstable" if p.unstable else ""))
                row[f"{ds} Per-mask µs"] = (f"{fmt_us(p.mean_us)} [{fmt_us(p.mean_lo)}, {fmt_us(p.mean_hi)}]" + mark
                                            + f" [{len(notes)}]")
                row[f"{ds} p50/p99/max µs"] = "/".join(fmt_us(v) for v in (p.p50_us, p.p99_us, p.max_us))
            pr = c.get("pass_rate")
            row[f"{ds} Pass"] = "–" if pr is None or pd.isna(pr) else f"{passed}/{n_ok_cells}"
        out.append(row)
    return pd.DataFrame(out), notes


def table1_markdown(t1: pd.DataFrame, notes: list[str]) -> str:
    """Table 1 as Markdown, its numbered notes listed below it."""
    note_lines = [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
    return markdown(t1, parse_numbers=False) + ("\n\n" + "\n".join(f"- {n}" for n in note_lines) if notes else "")


def lines(ctx: Context) -> list[str]:
    """The "Table 1" section; writes ``table1.csv``, ``table1.tex`` and ``table1.md``."""
    intervals = stats.cell_intervals(ctx.cells, ctx.tokenizer)   # issue 66: intervals, floor, stability
    t1, notes = table1(ctx.cells, ctx.tokenizer, intervals)
    t1.to_csv(ctx.out / "table1.csv", index=False)
    (ctx.out / "table1.tex").write_text(t1.to_latex(index=False, escape=True))
    ctx.table1_md = table1_markdown(t1, notes)
    (ctx.out / "table1.md").write_text(ctx.table1_md + "\n")
    return [
        f"## Table 1 ({ctx.tokenizer} vocabulary)", "",
        "Init = engine compile time for the grammar and vocabulary. Per-mask = mean time of one next-token mask "
        "(µs), p50/p99/max over every mask of the cell. Pass = samples whose every oracle token and final EOS "
        "were allowed. × = the engine could not run the cell (reason in the notes).", "",
        ctx.table1_md, "",
        measured_at(ctx.cells[ctx.cells["tokenizer"] == ctx.tokenizer]), "", *_interval_lines(ctx, intervals)]


def _interval_lines(ctx: Context, intervals: pd.DataFrame) -> list[str]:
    """Under Table 1 (issue 66): the harness's floor, and every config's figures with 95% intervals
    (``intervals.csv``)."""
    if intervals.empty:
        return []
    intervals.to_csv(ctx.out / "intervals.csv", index=False)
    stats.interval_figure(intervals, ctx.out / "figures", f"intervals_{ctx.tokenizer}")
    floor = stats.floor_lines(intervals)
    return [*floor, *([""] if floor else []), f"### Intervals ({ctx.tokenizer} vocabulary)", "",
            "Each per-mask figure with its 95% interval: a bootstrap over the samples (a sample's masks are not "
            "independent) and, for a config run with repeats, over its repeats (`repeats=R`); a config run once "
            "has no interval for the machine's drift between runs. `gcdbench-compare` gives ratios between configs "
            "with their intervals.", "", *stats.interval_lines(intervals), "",
            f"![per-mask p50 and p99 with 95% intervals](figures/intervals_{ctx.tokenizer}.png)", "",
            *ratio_lines(ctx)]


#: the statistics whose ratios the Table 1 section gives (``stats.STATS`` names)
RATIO_STATS = ("mean", "p50", "p99", "p99.9")


def ratio_frame(cells: pd.DataFrame, tokenizer: str, base: str) -> pd.DataFrame:
    """Every config run with repeats against the config ``base`` run with repeats on the same dataset: one row
    per (dataset, config, statistic) with ``stats.ratios``' columns (config / base, its 95% interval from one
    resampling of both, paired by sample and repeat where they can be, and the verdict). Empty when ``base`` has
    no repeated cells."""
    if cells.empty or "path" not in cells:
        return pd.DataFrame()
    configs = stats.read_configs(list(cells.loc[cells["tokenizer"] == tokenizer, "path"]))
    rows = []
    for (ds, tok, config), cfg in sorted(configs.items()):
        ref = configs.get((ds, tok, base))
        if config == base or ref is None or cfg.n_repeats < 2 or ref.n_repeats < 2:
            continue
        for r in stats.ratios(ref, cfg):
            if r["statistic"] in RATIO_STATS:
                rows.append({"dataset": ds, "tokenizer": tok, "config": config, "base": base,
                             "repeats": cfg.n_repeats, "base_repeats": ref.n_repeats, **r})
    return pd.DataFrame(rows)


def ratio_base(cells: pd.DataFrame, given: str | None) -> str | None:
    """The config Table 1's ratios divide by: ``given`` (``--ratio-base``), else the engine that an adapter of the
    cells states its speed targets against (``Engine.speed_baseline``, e.g. Valiant's), else None (no ratios)."""
    if given:
        return given
    for name in sorted(set(cells["engine"])) if "engine" in cells else ():
        base = getattr(engine_class(name), "speed_baseline", None)
        if base:
            return base
    return None


def ratio_lines(ctx: Context) -> list[str]:
    """Under Table 1: each config's per-mask statistics as a ratio to the base config's (:func:`ratio_base`: with
    Valiant's cells, GLRMask) with 95% intervals and verdicts, for the configs run with repeats
    (``ratios_<base>.csv``)."""
    base = ratio_base(ctx.cells, ctx.ratio_base)
    frame = ratio_frame(ctx.cells, ctx.tokenizer, base) if base else pd.DataFrame()
    if frame.empty:
        return []
    frame.to_csv(ctx.out / f"ratios_{base}.csv", index=False)
    lines = [f"### Ratios to {base} ({ctx.tokenizer} vocabulary)", "",
             f"Each config's per-mask statistic divided by {base}'s on the same dataset, both run with repeats "
             "(`repeats=R`, interleaved), with a 95% interval from one bootstrap of both over samples and repeats "
             "(paired where the samples and repeats are the same). Verdict: `slower` / `faster` where the interval "
             f"lies above / below 1, `~` where it holds 1. Below 1: faster than {base}.", "",
             "| Method | dataset | repeats | " + " | ".join(f"{k} ratio [95%]" for k in RATIO_STATS) + " |",
             "|---|---|---|" + "---|" * len(RATIO_STATS)]
    for (ds, config), grp in frame.groupby(["dataset", "config"], sort=False):
        by = {r.statistic: r for r in grp.itertuples()}
        cols = [f"{stats.fmt_interval(by[k].ratio, by[k].ratio_lo, by[k].ratio_hi)} {by[k].verdict}"
                if k in by else "–" for k in RATIO_STATS]
        lines.append(f"| {config} | {ds} | {grp['repeats'].iloc[0]} vs {grp['base_repeats'].iloc[0]} | "
                     + " | ".join(cols) + " |")
    return lines + [""]


SECTION = Section("table1", lines, "Table 1 (seed 000's layout) of the --results cells")
