"""The "Batch decoding" section: per dataset, engine config and batch size B, step latency, per-sequence cost and
its gain over B=1, outcomes and audit (``batch.csv``), and the figure ``batch_<tokenizer>``."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from gcdbench.experiments.report.collect import cell_status, collect_batch
from gcdbench.experiments.report.plot import (emphasis, failed_marks, failed_note, legend_below, no_minor_labels,
                                              order_datasets, save_figure, styles, us_axis)
from gcdbench.experiments.report.section import Context, Section
from gcdbench.experiments.report.text import figure_link, fmt_us, get, markdown, measured_at


def batch_table(bcells: pd.DataFrame) -> pd.DataFrame:
    """The batch section's table: per dataset, engine config (its threads) and B: steps, step latency p50/p99,
    per-sequence cost and its gain over B=1 of the same config, outcomes, audit agreement."""
    rows = []
    for _, c in bcells.iterrows():
        base = bcells[(bcells["config"] == c["config"]) & (bcells["dataset"] == c["dataset"])
                      & (bcells["tokenizer"] == c["tokenizer"]) & (bcells["B"] == 1)]
        b1 = get(base.iloc[0], "per_seq_us") if len(base) else None
        per = get(c, "per_seq_us")
        audit = ""
        if get(c, "audit_steps"):
            agree = get(c, "audit_agree_profile")
            audit = f"{int(agree if agree is not None else get(c, 'audit_agree') or 0)}/{int(c['audit_steps'])}"
            if get(c, "audit_agree_single_mode") is not None:
                audit += f", single {int(c['audit_agree_single_mode'])}/{int(c['audit_steps'])}"
        err = get(c, "compile_error")
        rows.append({
            "dataset": c["dataset"], "config": c["config"], "threads": get(c, "threads"), "B": int(c["B"]),
            "steps (full)": f"{int(get(c, 'batch_steps') or 0)} ({int(get(c, 'full_steps') or 0)})",
            "step p50 µs": fmt_us(get(c, "step_p50_us")) + ("*" if c.get("step_basis") == "all" else ""),
            "step p99 µs": fmt_us(get(c, "step_p99_us")),
            "per-seq µs": fmt_us(per),
            "gain vs B=1": f"{b1 / per:.2f}×" if b1 and per else "–",
            "outcomes": (f"× {err.splitlines()[0][:80]}" if err and not get(c, "batch_steps") else
                         (c.get("outcomes") or "")) + (f"; batch call failed where every sequence's own fill_mask "
                                                      f"worked: {int(c['batch_path_errors'])} steps"
                                                      if get(c, "batch_path_errors") else ""),
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
    bcells = collect_batch(roots)
    names = ", ".join(f"`{r}`" for r in roots)
    if bcells.empty:
        return ["## Batch decoding", "", f"No batch-mode cell under {names}.", ""]
    # (a batch cell's samples are positive: its csv keeps the columns it had before negative datasets came)
    bcells.drop(columns=["outcome_counts", "sample_kind"], errors="ignore").to_csv(out / "batch.csv", index=False)
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
        markdown(batch_overview(bcells).fillna(""), parse_numbers=False), "",
        "Every cell (step latency, outcomes, audit):", "",
        markdown(batch_table(bcells), parse_numbers=False), "",
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
            save_figure(fig, figs, stem)
            lines += [figure_link(stem), ""]
    return lines


def fig_batch(bcells: pd.DataFrame, tokenizer: str):
    """Batch mode (``report.collect_batch`` rows): per dataset, step latency (top: p50 over full steps, band to
    p99) and per-sequence cost (bottom: step time / live sequences) against B, log-log; one line per engine config
    (its thread count is in the config name). A B at which a cell produced no step is an × on the axis, with its
    reason in the note; a cell with other outcomes than ``ok`` is named "partial"/"failed" in the legend."""
    bcells = bcells[bcells["tokenizer"] == tokenizer] if not bcells.empty else bcells
    if bcells.empty:
        return None
    datasets = order_datasets(bcells["dataset"])
    st = styles(set(bcells["config"]))
    fig = Figure(figsize=(max(6.5, 5.2 * len(datasets)), 10.5), layout="constrained")
    axes = fig.subplots(2, len(datasets), squeeze=False)
    for col, ds in enumerate(datasets):
        top, bottom = axes[0][col], axes[1][col]
        failed = []
        here = bcells[bcells["dataset"] == ds]
        for config, grp in here.groupby("config", sort=True):
            grp = grp.sort_values("B")
            color, marker = st[config]
            ok = grp[grp["step_p50_us"].notna()] if "step_p50_us" in grp else grp.iloc[0:0]
            status = {cell_status(r) for _, r in grp.iterrows()} - {None}
            worst = "failed" if any(str(x).startswith(("failed", "compile")) for x in status) else \
                ("partial" if status else "")
            label = config + (f" ({worst} at some B)" if worst else "")
            if len(ok):
                top.plot(ok["B"], ok["step_p50_us"], color=color, marker=marker, ms=4, label=label, **emphasis(config))
                top.fill_between(ok["B"], ok["step_p50_us"], ok["step_p99_us"], color=color, alpha=0.12)
                bottom.plot(ok["B"], ok["per_seq_us"], color=color, marker=marker, ms=4, label=label,
                            **emphasis(config))
            bad = grp[~grp.index.isin(ok.index)]
            for ax in (top, bottom):
                if len(bad):
                    failed_marks(ax, bad["B"], color, size=50)
            for _, c in bad.iterrows():
                why = cell_status(c) or "no steps"
                failed.append(f"{config} B={int(c['B'])}: {why}")
        Bs = sorted(int(b) for b in here["B"].unique())
        for ax, what in ((top, "step latency (one fill_masks call; p50, band to p99)"),
                         (bottom, "per-sequence cost (step time / live sequences)")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(Bs, [str(b) for b in Bs])
            no_minor_labels(ax.xaxis)
            ax.set_yscale("log")
            us_axis(ax)
            ax.set_xlabel("batch size B (sequences in lock-step)")
            ax.set_ylabel(what, fontsize=8)
            ax.grid(True, which="major", alpha=0.3)
        top.set_title(f"{ds} ({tokenizer})")
        legend_below(bottom, fontsize=6)
        failed_note(bottom, failed[:12] + ([f"... {len(failed) - 12} more"] if len(failed) > 12 else []))
    fig.suptitle("Batch decoding: step latency and per-sequence cost against B")
    return fig


def lines(ctx: Context) -> list[str]:
    """The section, when batch-mode cells are under --results or a --batch folder."""
    return batch_section(ctx.batch_roots, ctx.out, ctx.cells) if ctx.batch_roots else []


SECTION = Section("batch", lines, "batch-mode cells (--batch, and any under --results): batch.csv, batch figure")
