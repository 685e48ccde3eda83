"""The "Cold start" section: what a first run on a new machine costs, apart from the per-mask figures.

A cell run with ``cold=true`` started every worker with empty numba and gcdbench caches (``NUMBA_CACHE_DIR``,
``GCDBENCH_CACHE``: nothing compiled, no compiled artifact on disk); its twin without it (same engine config,
dataset and tokenizer) ran with the caches it found. Per twin pair: init (the timed compile), the import of the
engine's modules before it, numba's compile seconds in init and in the untimed warm-up sample (recorded by the
worker's listener, :mod:`gcdbench.experiments.jitwatch`), TTFM (init plus the warm-up's first mask), and the
per-mask p50, p99 and max of both, with the cold/cached ratio of each (a first run should time its masks as the
next one does: any mask that compiled is left out of them and counted).
"""
from __future__ import annotations

import pandas as pd

from gcdbench.experiments.report.section import Context, Section
from gcdbench.experiments.report.text import markdown, measured_at

KEY = ["config", "dataset", "tokenizer"]
STATS = (("p50", "mask_p50_us"), ("p99", "mask_p99_us"), ("max", "mask_max_us"))


def pairs(cold: pd.DataFrame, cached: pd.DataFrame) -> pd.DataFrame:
    """One row per cold cell, beside its cached twin (missing where none was run)."""
    cols = KEY + ["init_s", "import_s", "jit_init_s", "jit_warmup_s", "ttfm_s", "jit_masks"] + [c for _, c in STATS]
    have = lambda df: df.reindex(columns=cols)   # noqa: E731 - cells stored before a column have it empty
    return have(cold).merge(have(cached), on=KEY, how="left", suffixes=("_cold", "_cached"))


def table(p: pd.DataFrame) -> pd.DataFrame:
    """The section's table: seconds as printed figures, per-mask times in µs with the cold / cached ratio."""
    def s(v):
        return None if pd.isna(v) else round(float(v), 2)

    rows = []
    for _, r in p.iterrows():
        row = {"engine": r["config"], "dataset": r["dataset"], "tokenizer": r["tokenizer"],
               "init cold (s)": s(r["init_s_cold"]), "import cold (s)": s(r["import_s_cold"]),
               "JIT in init (s)": s(r["jit_init_s_cold"]), "JIT in warm-up (s)": s(r["jit_warmup_s_cold"]),
               "TTFM cold (s)": s(r["ttfm_s_cold"]), "init cached (s)": s(r["init_s_cached"]),
               "TTFM cached (s)": s(r["ttfm_s_cached"])}
        for name, col in STATS:
            a, b = r[f"{col}_cold"], r[f"{col}_cached"]
            row[f"{name} cold/cached (µs)"] = (None if pd.isna(a) else
                                               f"{a:,.1f} / {b:,.1f} ({a / b:.2f}x)" if pd.notna(b) and b > 0
                                               else f"{a:,.1f} / –")
        n = r["jit_masks_cold"]
        row["masks compiled (cold)"] = 0 if pd.isna(n) else int(n)
        rows.append(row)
    return pd.DataFrame(rows)


def lines(ctx: Context) -> list[str]:
    """The section (none when no cell ran with ``cold=true``); writes ``coldstart.csv``."""
    cold = ctx.cold_cells
    if cold.empty:
        return []
    p = pairs(cold, ctx.cells)
    t = table(p)
    t.to_csv(ctx.out / "coldstart.csv", index=False)
    return ["## Cold start", "",
            "A first run on a new machine: each `cold` cell started its worker with empty numba and gcdbench caches "
            "(`cold=true`), its cached twin with the caches the runs before it left. Init is the timed compile; "
            "import the engine's modules before it; JIT the seconds numba compiled in init and in the untimed "
            "warm-up sample; TTFM init plus the warm-up's first mask. Per-mask p50 / p99 / max of the timed samples "
            "of both cells (a mask inside whose timer numba loaded or compiled code is left out and counted in the "
            "last column).", "",
            markdown(t, parse_numbers=False), "", measured_at(pd.concat([cold, ctx.cells.merge(cold[KEY], on=KEY)])),
            ""]


SECTION = Section("coldstart", lines, "cold init, JIT seconds and TTFM beside the cached run's (cold=true cells)")
