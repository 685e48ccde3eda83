"""``gcdbench-compare OLD NEW`` (``python -m gcdbench.experiments.compare``): is NEW faster or slower than OLD, and how
sure is that (issue 66)?

OLD and NEW are two result folders (e.g. one engine run at two commits); or ``--results DIR --old CONFIG --new
CONFIG`` compares two configs of one folder (e.g. ``--old glrmask --new valiant``); ``--old``/``--new`` also pick
the configs of two folders. Per dataset and tokenizer and per statistic (mean, p50, p99, p99.9 of the per-mask
times) it prints the ratio NEW/OLD with its 95% interval and a verdict: ``faster``, ``slower``, or ``~`` when the
interval contains 1 (no significant difference) -- a two-level bootstrap over samples and repeats, paired by sample
and by repeat where both ran the same ones (:mod:`gcdbench.experiments.report.stats`). A config whose repeats
disagree is named with what to do.

OLD and NEW may also be bench files (``experiments/bench.py --out``), each a file or several joined by commas, each
file one repeat: e.g. an A/B run alternated over time, ``gcdbench-compare r1_base.json,r4_base.json
r2_new.json,r3_new.json`` (records of ``bench masks --keep-masks``: per-mask times by sample), or the sets of one
interleaved batch run, ``gcdbench-compare --results ab.json --old "valiant (threads=1)" --new "valiant
(threads=2)"`` (per-step times, per B; :func:`gcdbench.experiments.report.stats.bench_configs`).

``--csv FILE`` writes the table, ``--figure FILE`` draws the ratios with their intervals (log axis). The exit status
gates a change: with ``--fail-on-slower 1.1`` it is 1 when any statistic's ratio is significantly above 1.1 (its
interval's lower bound above 1.1), else 0; 2 when nothing could be compared (one line says why).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from gcdbench.experiments.report import stats

COLUMNS = ["dataset", "tokenizer", "old", "new", "statistic", "old_us", "old_lo", "old_hi", "new_us", "new_lo",
           "new_hi", "ratio", "ratio_lo", "ratio_hi", "verdict", "old_repeats", "new_repeats", "paired_samples",
           "paired_repeats"]


class CompareError(ValueError):
    """Nothing to compare (the message names why and what to give instead)."""


def _pick(configs: dict, name: str | None, where: str) -> dict:
    if name is None:
        return configs
    got = {k: v for k, v in configs.items() if k[2] == name}
    if not got:
        have = sorted({k[2] for k in configs})
        raise CompareError(f"no config {name!r} under {where} (configs there: {', '.join(have) or 'none'})")
    return got


def pairs(old: dict, new: dict) -> list[tuple]:
    """(old config, new config) per dataset and tokenizer: when each side holds one config there (``--old`` and
    ``--new`` picked them), those two; else the same config label on both sides."""
    out = []
    for (ds, tok, label), o in sorted(old.items()):
        here = [c for k, c in sorted(new.items()) if k[:2] == (ds, tok)]
        n = new.get((ds, tok, label))
        if n is None and len(here) == 1 and len([k for k in old if k[:2] == (ds, tok)]) == 1:
            n = here[0]
        if n is not None and n is not o:
            out.append((o, n))
    return out


def bench_files(arg) -> list[Path] | None:
    """The bench files ``arg`` names (``a.json`` or ``a.json,b.json``: each file one repeat), or None when it names
    a results folder."""
    parts = [p for p in str(arg).split(",") if p]
    if not parts or not all(p.endswith((".json", ".json.gz")) for p in parts):
        return None
    missing = [p for p in parts if not Path(p).is_file() and not Path(p + ".gz").is_file()]
    if missing:
        raise CompareError(f"no bench file {', '.join(missing)} (give files written by `bench ... --out FILE`)")
    return [Path(p) for p in parts]


def read(root) -> dict:
    """The configs of a results folder (:func:`stats.read_configs`) or of bench files (:func:`bench_files`)."""
    files = bench_files(root)
    if files is not None:
        try:
            return stats.bench_configs(files)
        except (stats.BenchError, ValueError) as err:
            raise CompareError(str(err)) from None
    if not Path(root).is_dir():
        raise CompareError(f"{root} is not a folder of results (give the --out_dir of a run, or --results DIR) nor "
                           "bench files (FILE.json, or FILE1.json,FILE2.json for repeats)")
    return stats.read_configs(root)


def compare(old_root: Path, new_root: Path, old_name: str | None = None, new_name: str | None = None,
            resamples: int = stats.RESAMPLES, seed: int = stats.SEED) -> tuple[pd.DataFrame, list[str]]:
    """The comparison table (:data:`COLUMNS`) and the stability notes of the configs compared (OLD and NEW: result
    folders or bench files, :func:`read`)."""
    same = str(new_root) == str(old_root) or (Path(new_root).exists() and Path(old_root).exists()
                                              and Path(new_root).resolve() == Path(old_root).resolve())
    if same and (old_name is None or new_name is None or old_name == new_name):
        raise CompareError(f"one folder ({old_root}): name two of its configs, --old CONFIG --new CONFIG")
    old_all = read(old_root)
    new_all = old_all if same else read(new_root)
    if not old_all or not new_all:
        empty = old_root if not old_all else new_root
        raise CompareError(f"no finished single-mode cell with per-mask rows under {empty}")
    old = _pick(old_all, old_name or new_name, str(old_root))
    new = _pick(new_all, new_name or old_name, str(new_root))
    matched = pairs(old, new)
    if not matched:
        raise CompareError(f"no dataset and tokenizer where both {old_name or 'a config'} of {old_root} and "
                           f"{new_name or 'the same config'} of {new_root} ran: name the configs with --old/--new")
    rows, notes = [], []
    for o, n in matched:
        for r in stats.ratios(o, n, resamples, seed):
            rows.append({"dataset": o.dataset, "tokenizer": o.tokenizer, "old": o.config, "new": n.config, **r,
                         "old_repeats": o.n_repeats, "new_repeats": n.n_repeats})
        for side, c in (("old", o), ("new", n)):
            st = stats.stability(c, seed=seed)
            if st["unstable"]:
                notes.append(f"{side} {c.config} on {c.dataset} ({c.tokenizer}) is unstable: {st['why']}; "
                             f"{st['advice']}")
            elif c.n_repeats < 2:
                notes.append(f"{side} {c.config} on {c.dataset} ({c.tokenizer}) ran once: its interval covers the "
                             "samples, not the machine's drift between runs (repeats=5 for that)")
    return pd.DataFrame(rows, columns=COLUMNS), sorted(set(notes))


def markdown(table: pd.DataFrame) -> str:
    """The comparison as a markdown table: one line per dataset, tokenizer and statistic."""
    lines = ["| dataset | tokenizer | old | new | statistic | old µs | new µs | new/old [95%] | verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        lines.append(f"| {r['dataset']} | {r['tokenizer']} | {r['old']} | {r['new']} | {r['statistic']} | "
                     f"{stats.fmt_interval(r['old_us'], r['old_lo'], r['old_hi'])} | "
                     f"{stats.fmt_interval(r['new_us'], r['new_lo'], r['new_hi'])} | "
                     f"{stats.fmt_interval(r['ratio'], r['ratio_lo'], r['ratio_hi'])} | {r['verdict']} |")
    return "\n".join(lines)


def figure(table: pd.DataFrame, path: Path) -> Path:
    """The ratios with their 95% intervals as horizontal error bars on a log axis, one line per dataset and
    statistic; 1 (no change) marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    labels = [f"{r.dataset} ({r.tokenizer}) {r.statistic}" for r in table.itertuples()]
    y = np.arange(len(table))[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.3 * len(table) + 1.2))
    colors = table["verdict"].map({"slower": "tab:red", "faster": "tab:green"}).fillna("tab:gray")
    err = np.vstack([table["ratio"] - table["ratio_lo"], table["ratio_hi"] - table["ratio"]]).clip(min=0)
    for yi, x, e0, e1, c in zip(y, table["ratio"], err[0], err[1], colors):
        ax.errorbar(x, yi, xerr=[[e0], [e1]], fmt="o", color=c, capsize=3)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_yticks(y, labels, fontsize=7)
    pair = sorted(set(zip(table["old"], table["new"])))
    ax.set_xlabel("new / old per-mask time (95% interval; < 1: new faster)")
    ax.set_title(", ".join(f"{n} vs {o}" for o, n in pair)[:90], fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def slower_than(table: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """The rows whose ratio is significantly above ``threshold`` (its interval's lower bound above it)."""
    return table[table["ratio_lo"] > threshold]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="gcdbench-compare", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="*", metavar="OLD NEW",
                    help="two result folders (OLD then NEW), or bench files (FILE.json; A.json,B.json: repeats)")
    ap.add_argument("--results", help="one result folder (or bench file) holding both configs (with --old and --new)")
    ap.add_argument("--old", help="the OLD config label (as the report names it)")
    ap.add_argument("--new", help="the NEW config label")
    ap.add_argument("--csv", help="write the table as CSV here")
    ap.add_argument("--figure", help="draw the ratios with their intervals here (PNG or PDF)")
    ap.add_argument("--fail-on-slower", type=float, metavar="RATIO",
                    help="exit 1 when a statistic's ratio is significantly above RATIO (e.g. 1.1)")
    ap.add_argument("--resamples", type=int, default=stats.RESAMPLES, help="bootstrap resamples (default %(default)s)")
    ap.add_argument("--seed", type=int, default=stats.SEED, help="bootstrap seed (default %(default)s)")
    a = ap.parse_args(argv)
    if a.results and a.folders:
        ap.error("give either two folders OLD NEW or --results DIR, not both")
    if a.results:
        old_root = new_root = Path(a.results)
    elif len(a.folders) == 2:
        old_root, new_root = (Path(f) for f in a.folders)
    else:
        ap.error("give two result folders OLD NEW, or --results DIR --old CONFIG --new CONFIG")
    if a.resamples < 100:
        ap.error(f"--resamples {a.resamples}: at least 100 (a 95% interval from fewer is noise)")
    try:
        table, notes = compare(old_root, new_root, a.old, a.new, a.resamples, a.seed)
    except CompareError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(markdown(table))
    for n in notes:
        print(f"note: {n}")
    if a.csv:
        Path(a.csv).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(a.csv, index=False)
    if a.figure:
        figure(table, Path(a.figure))
    if a.fail_on_slower is not None:
        bad = slower_than(table, a.fail_on_slower)
        if len(bad):
            for r in bad.itertuples():
                print(f"slower: {r.new} vs {r.old} on {r.dataset} ({r.tokenizer}) {r.statistic}: {r.ratio:.3g}x "
                      f"[{r.ratio_lo:.3g}, {r.ratio_hi:.3g}], above {a.fail_on_slower:g}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
