"""Growth exponents: the slope of a cost against a length on log-log axes, and the cliffs benchmark's fits of
its records. Shared by the cliffs benchmark (``experiments/cliffs.py``) and the report's sections, which both
sit above this module."""
from __future__ import annotations

import numpy as np
import pandas as pd

#: a growth exponent above this (per-unit cost against length) is a cliff: above the cubic bound of the charts
CLIFF_EXPONENT = 2.0


def loglog_slope(length, cost) -> float:
    """Least-squares slope of log(cost) against log(length) over the longer half of the points (NaN if < 3)."""
    x, y = np.asarray(length, float), np.asarray(cost, float)
    ok = (x > 0) & (y > 0)
    x, y = x[ok], y[ok]
    if x.size < 3:
        return float("nan")
    keep = x >= np.median(x)
    if keep.sum() < 3:
        keep = np.ones_like(x, bool)
    return float(np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)[0])


def deciles(costs) -> list[float]:
    """Cumulative cost at 10%, 20%, ..., 100% of a sentence (its per-byte or per-mask costs in order)."""
    c = np.cumsum(np.asarray(costs, float))
    if not c.size:
        return []
    return [float(c[max(0, int(np.ceil(d * c.size / 10)) - 1)]) for d in range(1, 11)]


def within_exponent(n: float, cum: list[float]) -> float:
    """Growth exponent of the cost per unit along one sentence of ``n`` units from its cumulative deciles: the
    least-squares slope of log cumulative cost against log position over the last 70% of the sentence, minus one
    (cost per unit ~ position^k gives cumulative ~ position^(k+1)). NaN when too short."""
    if not cum or n < 20:
        return float("nan")
    x = np.array([np.ceil(d * n / 10) for d in range(1, 11)], float)[3:]
    y = np.asarray(cum, float)[3:]
    ok = y > 0
    if ok.sum() < 3:
        return float("nan")
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0]) - 1.0


def state_exponent(bins_list, min_range: int = 3, min_count: int = 5, min_items: int = 32) -> float:
    """Exponent of the per-byte time against the column size, pooled over a grammar's sentences (the bins of
    :func:`_reference_record`): least squares of log mean time against log column size over the bins of columns of
    at least ``min_items`` items with at least ``min_count`` bytes; NaN when they span fewer than ``min_range``
    powers of two (the column did not grow enough to fit, as on LR-like grammars, where it stays O(|G|)). Below
    ``min_items`` a byte's time is mostly the checker's fixed cost or a memoised transition (0.3 us against 20 us
    for a new column of 20 items on grammar 162), not the closure the bound is about."""
    count: dict[int, int] = {}
    total: dict[int, float] = {}
    for bins in bins_list:
        if not isinstance(bins, dict):
            continue
        for b, (c, us) in bins.items():
            count[int(b)] = count.get(int(b), 0) + c
            total[int(b)] = total.get(int(b), 0.0) + c * us
    ks = sorted(b for b in count if count[b] >= min_count and total[b] > 0 and 2 ** b >= min_items)
    if len(ks) < 2 or ks[-1] - ks[0] < min_range:
        return float("nan")
    x = np.log(2.0 ** (np.array(ks) + 0.5))
    y = np.log([total[b] / count[b] for b in ks])
    return float(np.polyfit(x, y, 1)[0])


def fit_bench(records: list[dict]) -> pd.DataFrame:
    """Per (engine, grammar): the growth exponent of the cost per unit (reference: per byte; engines: per mask)
    along its longest finished sentence (:func:`within_exponent`; the measure compared with an engine's bound), the
    exponent across the sentence lengths (mean cost against length: sentences of different lengths may differ in
    kind, e.g. one long word against short ones), the worst byte or mask, the worst mask of the longest sentence,
    and the audit. For the reference, the two factors of its bound: the largest column size over ``D (n + 1)``
    (``column_bound_ratio``, at most 1 by construction of Earley columns) and the exponent of the per-byte time
    against the column size (``exponent_state``, bound 2: :func:`state_exponent`). A per-byte cost that grows with
    the length of a glued word, not with the position, overshoots a fit against the position when the word
    starts late; the column size is the variable the bound is stated in."""
    df = pd.DataFrame(records)
    rows = []
    for (engine, seed), g in df.groupby(["engine", "grammar_seed"]):
        ok = g[g["outcome"].isin(["ok", "no_eos"])] if "outcome" in g else g
        unit = "bytes" if engine == "reference" else "masks"
        if engine == "reference":
            x, y = ok.get("bytes"), ok.get("mean_byte_us")
            worst = ok["max_byte_us"].max() if len(ok) else np.nan
        else:
            x, y = ok.get("tokens"), ok.get("mean_us")
            worst = ok["max_us"].max() if len(ok) else np.nan
        across = loglog_slope(x, y) if x is not None and len(ok) else np.nan
        longest = ok.loc[ok[unit].idxmax()] if len(ok) and unit in ok else None
        within = within_exponent(longest[unit], longest.get("cum_deciles_s")) if longest is not None \
            and isinstance(longest.get("cum_deciles_s"), list) else np.nan
        ref = engine == "reference" and "byte_us_by_column" in ok
        rows.append({
            "engine": engine, "grammar_seed": int(seed), "templates": "+".join(g["templates"].iloc[0]),
            "sentences": len(g), "finished": len(ok), "exponent": within, "exponent_across": across,
            "exponent_state": state_exponent(ok["byte_us_by_column"].tolist()) if ref else np.nan,
            "column_bound_ratio": float(ok["column_bound_ratio"].max()) if ref and len(ok) else np.nan,
            "max_column_items": int(ok["max_column_items"].max()) if ref and len(ok) else 0,
            "worst_us": worst, "longest_tokens": int(longest["tokens"]) if longest is not None else 0,
            "longest_units": int(longest[unit]) if longest is not None else 0,
            "at_longest_us": float(longest["max_us"]) if longest is not None and engine != "reference" else np.nan,
            "audited": int(g["audited"].fillna(0).sum()) if "audited" in g else 0,
            "agree": int(g["agree"].fillna(0).sum()) if "agree" in g else 0,
            "outcomes": ", ".join(f"{k} {v}" for k, v in g["outcome"].value_counts().items()),
        })
    return pd.DataFrame(rows)
