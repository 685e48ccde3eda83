"""The report's "Grammar shapes" section (issue 65), from stored runner cells only: every engine's per-mask cost on
the everyday grammar shapes of ``dataset=shapes`` (``datasets/shapes.py``) against each family's size, Valiant's
ratio to GLRMask, and every engine's **spelling ratio** (p50 of one spelling over p50 of the other, same family,
size, samples and tokenizer: 1 for an engine whose cost follows the language, not the spelling).

A cell belongs here when its run record's ``dataset_meta`` holds ``shape`` (``{family, size, spelling}``, written
by the loader). ``python -m gcdbench.experiments.report.shapes --results results/shapes --out results`` writes the
section alone (``shapes.md``); ``python -m experiments.report ... --shapes results/shapes`` adds it to the README.
Files: ``shapes_cells.csv`` (one row per cell), ``shapes_ratios.csv`` (Valiant / GLRMask and spelling ratios),
``shapes_growth.csv`` (log-log slope of p50 against size) and ``figures/shapes_cost.{png,pdf}``.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from gcdbench.experiments.report.collect import Unreadable, cell_stats, run_dirs, run_infos, warn
from gcdbench.experiments.report.plot import no_minor_labels, panels, save_figure, styles, us_axis
from gcdbench.experiments.report.section import Context, Section
from gcdbench.experiments.report.stats import ratios as boot_ratios
from gcdbench.experiments.report.stats import read_configs
from gcdbench.experiments.report.text import figure_link, fmt_us, markdown, measured_at

def speed_pair() -> tuple[str | None, str | None]:
    """The engine whose ratio the section reports and the engine it is compared with: the first registered engine
    whose adapter states a speed target against another (``Engine.speed_baseline``), and that other."""
    from gcdbench.parsers.registry import engine_class, engines

    for name in engines():
        try:
            baseline = getattr(engine_class(name, runnable=False), "speed_baseline", None)
        except Exception:   # noqa: BLE001 - an engine whose module does not import here states nothing
            continue
        if baseline:
            return name, baseline
    return None, None


SUBJECT, BASELINE = speed_pair()
TARGET_P50, TARGET_P99 = 1.5, 2.0
CELL_COLUMNS = ["family", "size", "spelling", "spelling_index", "config", "engine", "tokenizer", "samples", "passed",
                "status", "mask_n", "mask_p50_us", "mask_p99_us", "mask_mean_us", "mask_max_us", "init_s",
                "audit_steps", "audit_agree_language", "audit_agree_profile", "commit", "machine", "dataset", "path"]


# --------------------------------------------------------------------------------------------------------------
# reading cells
# --------------------------------------------------------------------------------------------------------------
def shape_cells(roots) -> pd.DataFrame:
    """One row per single-mode shape cell under ``roots`` (:func:`~.collect.cell_stats` plus the shape's family,
    size, spelling and the spelling's index among the family's); damaged cells are skipped with a warning."""
    rows = []
    for run in run_infos(run_dirs([Path(r) for r in roots])):
        meta = run["dataset_meta"] or {}
        shape = meta.get("shape")
        if not isinstance(shape, dict):
            continue
        try:
            row = cell_stats(Path(run["path"]))
        except Unreadable as err:
            warn(f"{err}: shape cell {run['path']} skipped")
            continue
        if row.get("batch_size"):
            continue   # batch-mode cells time steps of many sequences: not comparable with per-mask cells
        spellings = list(meta.get("spellings") or [shape["spelling"]])
        row.update(family=shape["family"], size=int(shape["size"]), spelling=shape["spelling"],
                   spelling_index=spellings.index(shape["spelling"]) if shape["spelling"] in spellings else 0,
                   spellings=spellings, size_name=meta.get("size_name", "size"), family_what=meta.get("family_what", ""),
                   status=_status(row))
        rows.append(row)
    df = pd.DataFrame(rows)
    for c in CELL_COLUMNS:
        if c not in df:
            df[c] = np.nan
    return df


def _status(row) -> str:
    err = row.get("compile_error")
    if isinstance(err, str) and err:
        return "compile error: " + err.strip().splitlines()[0][:120]
    if not row.get("mask_n"):
        return "no masks"
    if row.get("passed", 0) < row.get("samples", 0):
        return row.get("outcomes", "")
    return ""


def _ok(c) -> bool:
    """Whether a cell's times are usable: it compiled and made masks."""
    return not str(c.get("status", "")).startswith(("compile error", "no masks")) and pd.notna(c.get("mask_p50_us"))


# --------------------------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------------------------
def _entry(c) -> str:
    if c is None:
        return "–"
    if not _ok(c):
        return "×"
    out = f"{fmt_us(c['mask_p50_us'])} / {fmt_us(c['mask_p99_us'])}"
    if c["passed"] < c["samples"]:
        out += f" ({int(c['passed'])}/{int(c['samples'])} ok)"
    return out


def _index(cells: pd.DataFrame) -> dict:
    return {(r["tokenizer"], r["family"], r["size"], r["spelling"], r["config"]): r for r in cells.to_dict("records")}


def cost_table(cells: pd.DataFrame, family: str, tokenizer: str) -> pd.DataFrame:
    """Rows engine config x spelling, columns the family's sizes: ``p50 / p99`` µs per mask (× no masks: compile
    error; – not run; ``(k/n ok)`` when a sample failed)."""
    c = cells[(cells["family"] == family) & (cells["tokenizer"] == tokenizer)]
    idx = _index(c)
    sizes = sorted(c["size"].unique())
    spellings = _spellings(c)
    rows = []
    for config in _configs(c):
        for sp in spellings:
            rows.append({"engine": config, "spelling": sp,
                         **{str(s): _entry(idx.get((tokenizer, family, s, sp, config))) for s in sizes}})
    return pd.DataFrame(rows)


def _spellings(c: pd.DataFrame) -> list[str]:
    return list(c.sort_values("spelling_index")["spelling"].drop_duplicates())


def _configs(c: pd.DataFrame) -> list[str]:
    """Engine configs, the subject and its baseline first."""
    names = sorted(set(c["config"]))
    return [n for n in (SUBJECT, BASELINE) if n in names] + [n for n in names if n not in (SUBJECT, BASELINE)]


def _ratio(a, b, key: str) -> float:
    if a is None or b is None or not _ok(a) or not _ok(b) or not b[key] > 0:
        return float("nan")
    return float(a[key] / b[key])


#: the columns of a ratio's 95% interval (``nan`` where a cell has no per-mask rows, as a packed cell)
INTERVAL_COLUMNS = ["p50_lo", "p50_hi", "p99_lo", "p99_hi"]


def _masks(c):
    """The per-mask :class:`~.stats.Config` of cell row ``c`` (its folder's ``steps.parquet``), or None (no folder,
    or a packed cell without per-mask rows)."""
    path = c.get("path") if c is not None else None
    if not isinstance(path, str) or not path:
        return None
    got = list(read_configs([Path(path)]).values())
    return got[0] if got else None


def _ratio_interval(a, b) -> dict:
    """The 95% intervals of ``a`` over ``b`` at p50 and p99 (:func:`~.stats.ratios`: one resampling of both cells'
    samples, paired by sample, as both cells ran the family's same samples); ``nan`` without per-mask rows."""
    out = dict.fromkeys(INTERVAL_COLUMNS, float("nan"))
    if a is None or b is None or not _ok(a) or not _ok(b):
        return out
    ca, cb = _masks(a), _masks(b)
    if ca is None or cb is None:
        return out
    for r in boot_ratios(cb, ca):
        if r["statistic"] in ("p50", "p99"):
            out[f"{r['statistic']}_lo"], out[f"{r['statistic']}_hi"] = r["ratio_lo"], r["ratio_hi"]
    return out


def ratios(cells: pd.DataFrame) -> pd.DataFrame:
    """Long table of every ratio the section reports: ``kind`` ``subject/baseline`` (Valiant over GLRMask, p50 and
    p99, per family, size and spelling, with their 95% intervals where the cells keep their per-mask rows) and
    ``spelling`` (per engine, family and size: p50 and p99 of the family's first spelling over its second)."""
    idx = _index(cells)
    rows = []
    for (tok, fam, size), c in cells.groupby(["tokenizer", "family", "size"]):
        sps = _spellings(c)
        subjects = sorted(set(c.loc[c["engine"] == SUBJECT, "config"]))   # the subject with any options
        for sp in sps:
            b = idx.get((tok, fam, size, sp, BASELINE))
            for config in subjects:
                a = idx.get((tok, fam, size, sp, config))
                if a is not None and b is not None:
                    rows.append({"kind": f"{SUBJECT}/{BASELINE}", "tokenizer": tok, "family": fam, "size": size,
                                 "spelling": sp, "engine": config,
                                 "p50_ratio": _ratio(a, b, "mask_p50_us"), "p99_ratio": _ratio(a, b, "mask_p99_us"),
                                 **_ratio_interval(a, b)})
        if len(sps) >= 2:
            for config in sorted(set(c["config"])):
                a, b = idx.get((tok, fam, size, sps[0], config)), idx.get((tok, fam, size, sps[1], config))
                if a is not None and b is not None:
                    rows.append({"kind": "spelling", "tokenizer": tok, "family": fam, "size": size,
                                 "spelling": f"{sps[0]}/{sps[1]}", "engine": config,
                                 "p50_ratio": _ratio(a, b, "mask_p50_us"), "p99_ratio": _ratio(a, b, "mask_p99_us")})
    return pd.DataFrame(rows, columns=["kind", "tokenizer", "family", "size", "spelling", "engine", "p50_ratio",
                                       "p99_ratio", *INTERVAL_COLUMNS])


#: keys of a ratio row, and the relative difference under which a kept interval's point counts as the same ratio
RATIO_KEY = ["kind", "tokenizer", "family", "size", "spelling", "engine"]
SAME_POINT = 1e-3


def keep_intervals(rat: pd.DataFrame, earlier: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """``rat`` with the intervals it lacks (cells packed without their per-mask rows) taken from ``earlier``, the
    ``shapes_ratios.csv`` a build over the same cells wrote while they were whole: a row takes the earlier row of
    the same key only where both point ratios (p50 and p99) agree within :data:`SAME_POINT`, so an interval never
    lands on other cells' ratio. Returns the table and how many rows took an interval."""
    rat = rat.copy()
    old = {tuple(r[k] for k in RATIO_KEY): r for r in earlier.to_dict("records")}
    kept = 0
    for i, r in rat.iterrows():
        if not all(pd.isna(r[c]) for c in INTERVAL_COLUMNS):
            continue
        o = old.get(tuple(r[k] for k in RATIO_KEY))
        if o is None or any(pd.isna(o[c]) for c in INTERVAL_COLUMNS):
            continue
        if all(pd.notna(r[q]) and pd.notna(o[q]) and abs(r[q] - o[q]) <= SAME_POINT * abs(o[q])
               for q in ("p50_ratio", "p99_ratio")):
            for c in INTERVAL_COLUMNS:
                rat.at[i, c] = o[c]
            kept += 1
    return rat, kept


def growth(cells: pd.DataFrame) -> pd.DataFrame:
    """Per (tokenizer, family, spelling, engine): the least-squares slope of log p50 against log size over every
    size the engine made masks at (NaN under two sizes): how the cost grows with the shape's size."""
    rows = []
    for (tok, fam, sp, config), c in cells.groupby(["tokenizer", "family", "spelling", "config"]):
        ok = c[[_ok(r) for r in c.to_dict("records")]]
        ok = ok[(ok["size"] > 0) & (ok["mask_p50_us"] > 0)]
        slope = (float(np.polyfit(np.log(ok["size"].astype(float)), np.log(ok["mask_p50_us"].astype(float)), 1)[0])
                 if ok["size"].nunique() >= 2 else float("nan"))
        rows.append({"tokenizer": tok, "family": fam, "spelling": sp, "engine": config, "sizes": int(ok["size"].nunique()),
                     "p50_slope": slope})
    return pd.DataFrame(rows, columns=["tokenizer", "family", "spelling", "engine", "sizes", "p50_slope"])


def _r(v) -> str:
    return "–" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.2f}"


def _ri(x: dict, q: str, target: float) -> str:
    """Ratio ``q`` (p50 or p99) of ratio row ``x``, bold when over ``target``, with its interval when it has one."""
    v = x[f"{q}_ratio"]
    text = _bold(_r(v), v > target)
    lo, hi = x.get(f"{q}_lo", float("nan")), x.get(f"{q}_hi", float("nan"))
    if pd.notna(lo) and pd.notna(hi) and text != "–":
        text += f" [{lo:.2f}, {hi:.2f}]"
    return text


def subject_table(rat: pd.DataFrame, family: str, tokenizer: str) -> pd.DataFrame:
    """Rows the family's sizes, per spelling Valiant / GLRMask at p50 and p99, bold where a target is missed."""
    r = rat[(rat["kind"] == f"{SUBJECT}/{BASELINE}") & (rat["family"] == family) & (rat["tokenizer"] == tokenizer)]
    if r.empty:
        return pd.DataFrame()
    out = []
    for (config, size), s in r.groupby(["engine", "size"]):
        row = {"engine": config, "size": size}
        for x in s.to_dict("records"):
            row[f"{x['spelling']} p50"] = _ri(x, "p50", TARGET_P50)
            row[f"{x['spelling']} p99"] = _ri(x, "p99", TARGET_P99)
        out.append(row)
    return pd.DataFrame(out)


def overview_table(rat: pd.DataFrame, tokenizer: str) -> pd.DataFrame:
    """Rows the subject's configs, columns the families: its worst ratio to the baseline over the family's sizes
    and spellings, ``p50 / p99`` (bold where over a target): whether every shape meets the targets at a glance."""
    r = rat[(rat["kind"] == f"{SUBJECT}/{BASELINE}") & (rat["tokenizer"] == tokenizer)]
    if r.empty:
        return pd.DataFrame()
    out = []
    for config, s in r.groupby("engine"):
        row = {"engine": config}
        for fam in _family_order(s["family"]):
            f = s[s["family"] == fam]
            w50, w99 = (f.loc[f[k].idxmax()] if f[k].notna().any() else None for k in ("p50_ratio", "p99_ratio"))
            row[fam] = (f"{_ri(w50, 'p50', TARGET_P50) if w50 is not None else '–'} / "
                        f"{_ri(w99, 'p99', TARGET_P99) if w99 is not None else '–'}")
        out.append(row)
    return pd.DataFrame(out)


def _bold(text: str, miss: bool) -> str:
    return f"**{text}**" if miss and text != "–" else text


def spelling_table(rat: pd.DataFrame, family: str, tokenizer: str) -> pd.DataFrame:
    """Rows engine configs, columns the family's sizes: p50 of the first spelling over p50 of the second."""
    r = rat[(rat["kind"] == "spelling") & (rat["family"] == family) & (rat["tokenizer"] == tokenizer)]
    if r.empty:
        return pd.DataFrame()
    sizes = sorted(r["size"].unique())
    order = [c for c in (SUBJECT, BASELINE) if c in set(r["engine"])] + sorted(set(r["engine"]) - {SUBJECT, BASELINE})
    return pd.DataFrame([{"engine": e, **{str(s): _r(next(iter(r[(r["engine"] == e) & (r["size"] == s)]["p50_ratio"]),
                                                              float("nan"))) for s in sizes}} for e in order])


# --------------------------------------------------------------------------------------------------------------
# figure
# --------------------------------------------------------------------------------------------------------------
def fig_cost(cells: pd.DataFrame, tokenizer: str):
    """p50 per mask against the family's size, log-log, one panel per family, one colour per engine config: the
    family's first spelling solid, its second dashed; a cell without masks is left out (the tables mark it ×)."""
    c = cells[cells["tokenizer"] == tokenizer]
    c = c[[_ok(r) for r in c.to_dict("records")]]
    if c.empty:
        return None
    families = [f for f in _family_order(c["family"])]
    st = styles(set(c["config"]))
    fig, axes = panels(len(families))
    for ax, fam in zip(axes, families):
        f = c[c["family"] == fam]
        sps = _spellings(f)
        for config in _configs(f):
            color, marker = st[config]
            for i, sp in enumerate(sps):
                d = f[(f["config"] == config) & (f["spelling"] == sp)].sort_values("size")
                if d.empty:
                    continue
                ax.plot(d["size"], d["mask_p50_us"], color=color, marker=marker, ms=3, ls="-" if i == 0 else "--",
                        lw=1.2 if i == 0 else 0.9, label=config if i == 0 or len(sps) == 1 else None)
        ax.set_xscale("log")
        ax.set_yscale("log")
        us_axis(ax)
        sizes = sorted(f["size"].unique())
        ax.set_xticks(sizes, [str(s) for s in sizes])
        no_minor_labels(ax.xaxis)
        ax.set_title(f"{fam} (— {sps[0]}" + (f", -- {sps[1]})" if len(sps) > 1 else ")"), fontsize=9)
        ax.set_xlabel(str(f["size_name"].iloc[0]) + " (log)")
        ax.set_ylabel("p50 per mask (log)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=6, loc="upper left")
    fig.suptitle(f"Grammar shapes: p50 mask time against size ({tokenizer})")
    return fig


def _family_order(values) -> list[str]:
    try:
        from gcdbench.datasets.shapes import FAMILIES   # the loader's order, when it is installed here
        known = list(FAMILIES)
    except ImportError:
        known = []
    vals = set(values)
    return [f for f in known if f in vals] + sorted(vals - set(known))


# --------------------------------------------------------------------------------------------------------------
# the section
# --------------------------------------------------------------------------------------------------------------
def shapes_section(roots, out: Path, intervals_from: Path | None = None) -> list[str]:
    """README lines of the "Grammar shapes" section and its files under ``out`` ([] when no shape cell is
    stored under ``roots``). ``intervals_from``: an earlier ``shapes_ratios.csv`` whose intervals the ratios of
    packed cells take back (:func:`keep_intervals`), for a section rebuilt after its cells were packed."""
    cells = shape_cells(roots)
    if cells.empty:
        return []
    out = Path(out)
    rat, gr = ratios(cells), growth(cells)
    kept_note = []
    if intervals_from is not None:
        earlier = pd.read_csv(intervals_from)   # read before ``out`` (maybe the same file) is written
        rat, kept = keep_intervals(rat, earlier)
        kept_note = [f"{_n(kept, 'interval', 'intervals')} of packed cells (no per-mask rows left) kept from the "
                     f"build over the whole cells (`{intervals_from}`), where both point ratios are those of that "
                     f"build (within {SAME_POINT:g}).", ""]
    out.mkdir(parents=True, exist_ok=True)
    cells[CELL_COLUMNS].sort_values(["tokenizer", "family", "size", "spelling", "config"]).to_csv(
        out / "shapes_cells.csv", index=False)
    rat.to_csv(out / "shapes_ratios.csv", index=False)
    gr.to_csv(out / "shapes_growth.csv", index=False)
    lines = ["## Grammar shapes", "",
             f"Every engine on everyday grammar shapes (`dataset=shapes`, `datasets/shapes.py`, "
             f"{_n(cells['family'].nunique(), 'family', 'families')}, {_n(len(cells), 'cell', 'cells')} from `{'`, `'.join(map(str, roots))}`): "
             "per-mask time against each family's size, in two spellings whose languages are equal (the reference "
             "checker gives the same mask at every prefix: `tests/test_shapes.py`) over the same samples. "
             f"Entries are p50 / p99 µs per mask; × a cell without masks (compile error), – not run. "
             f"{SUBJECT} / {BASELINE}: the ratio of their p50 and p99 on the same cell (bold: over the issue-65 "
             f"targets, {TARGET_P50}x at p50 and {TARGET_P99}x at p99), with its 95% interval where both cells "
             "keep their per-mask rows (a bootstrap over the cell's samples, paired, as both engines ran the same "
             "samples: `report/stats.py`; one run each, so the interval says nothing of the machine's drift "
             "between runs). Spelling ratio: an engine's p50 on the "
             "family's first spelling over its p50 on the second (1: its cost follows the language, not the "
             "spelling). Growth: the slope of log p50 against log size.", "",
             measured_at(cells), "", *kept_note]
    for tok in sorted(cells["tokenizer"].unique()):
        ov = overview_table(rat, tok)
        if not ov.empty:
            lines += [f"{SUBJECT} / {BASELINE} ({tok}), the worst over each family's sizes and spellings, p50 / p99 "
                      f"(targets {TARGET_P50}x / {TARGET_P99}x):", "", markdown(ov, parse_numbers=False), ""]
        fig = fig_cost(cells, tok)
        if fig is not None:
            stem = f"shapes_cost_{tok}"
            save_figure(fig, out / "figures", stem)
            lines += [figure_link(stem), ""]
        for fam in _family_order(cells[cells["tokenizer"] == tok]["family"]):
            f = cells[(cells["family"] == fam) & (cells["tokenizer"] == tok)]
            lines += [f"### {fam} ({tok}): {f['family_what'].iloc[0]}; size: {f['size_name'].iloc[0]}", "",
                      markdown(cost_table(cells, fam, tok), parse_numbers=False), ""]
            sub = subject_table(rat, fam, tok)
            if not sub.empty:
                lines += [f"{SUBJECT} / {BASELINE}:", "", markdown(sub, parse_numbers=False), ""]
            sp = spelling_table(rat, fam, tok)
            if not sp.empty:
                sps = _spellings(f)
                lines += [f"Spelling ratio, p50 {sps[0]} / p50 {sps[1]}:", "", markdown(sp, parse_numbers=False), ""]
            g = gr[(gr["family"] == fam) & (gr["tokenizer"] == tok)]
            if g["p50_slope"].notna().any():
                piv = g.pivot(index="engine", columns="spelling", values="p50_slope")
                piv = piv.reindex([e for e in _configs(f) if e in piv.index])[[s for s in _spellings(f) if s in piv]]
                lines += ["Growth (slope of log p50 against log size):", "",
                          markdown(piv.map(_r).reset_index(), parse_numbers=False), ""]
    (out / "shapes.md").write_text("\n".join(lines) + "\n")
    return lines


def _n(k: int, one: str, many: str) -> str:
    return f"{k} {one if k == 1 else many}"


def lines(ctx: Context) -> list[str]:
    """The section, from the --shapes folder (and any shape cell stored among the --results cells)."""
    roots = [ctx.results] + ([ctx.shapes] if getattr(ctx, "shapes", None) is not None else [])
    return shapes_section(roots, ctx.out)


SECTION = Section("shapes", lines, "grammar shapes (--shapes): cost against size, the ratio of the engine with a speed "
                                   "target to its baseline, spelling ratios")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", nargs="+", default=["results/shapes"], help="folders searched for shape cells")
    ap.add_argument("--out", default="results", help="where shapes.md, the CSV files and figures/ go")
    ap.add_argument("--intervals-from", type=Path, default=None,
                    help="an earlier shapes_ratios.csv, built while the cells were whole: packed cells' ratios take "
                         "its intervals back where their points agree")
    args = ap.parse_args(argv)
    found = shapes_section([Path(r) for r in args.results], Path(args.out), args.intervals_from)
    if not found:
        raise SystemExit(f"no shape cell under {' '.join(args.results)}: run `python -m experiments.run -m "
                         "experiment=shapes` first")
    print("\n".join(found))


if __name__ == "__main__":
    main()
