"""Statistics of per-mask and per-batch-step times that need no cell on disk: a cell's per-sample summary
(``summarize_sample_steps``), the digest a re-stored cell keeps in place of its mask times (``mask_digest``), mask
times of many cells merged for percentiles and CDFs (``Times``), and a batch cell's step numbers
(``batch_step_stats``). :mod:`.collect` reads the cells and calls these; :mod:`.restore` and :mod:`.maskbench` use
them on the frames it returns.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def summarize_sample_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """:func:`.collect.sample_step_summary` of per-mask rows (the re-store tool keeps exactly this), with
    ``first_us``, the sample's first mask (its step 0; what MaskBench's TTFM adds to the compile)."""
    out = steps.groupby("sample_id").agg(masks=("mask_us", "size"), mean_us=("mask_us", "mean"),
                                         max_us=("mask_us", "max"), last_step=("step", "max")).reset_index()
    first = steps[steps["step"] == 0].groupby("sample_id")["mask_us"].first()
    return out.assign(first_us=out["sample_id"].map(first).astype(float))


#: a re-stored cell's mask times (:func:`mask_digest`): all but the slowest in a log histogram of bins DIGEST_RATIO
#: wide from DIGEST_BASE_US up, the slowest DIGEST_TAIL (at least DIGEST_TAIL_MIN of them) kept exactly
DIGEST_BASE_US, DIGEST_RATIO, DIGEST_TAIL, DIGEST_TAIL_MIN = 0.01, 1.01, 0.01, 100


def mask_digest(us: np.ndarray) -> dict:
    """What a re-stored cell keeps of its per-mask times for percentiles and CDFs at any point (MaskBench's TBM
    table): count, exact sum, the slowest 1% (at least 100) exactly, the rest as counts in 1%-wide log bins.
    Percentiles from p99 up are exact (nearest rank) on cells of up to 100,000 masks; below, within 1%."""
    us = np.sort(np.asarray(us, dtype=float))
    k = min(us.size, max(DIGEST_TAIL_MIN, int(np.ceil(us.size * DIGEST_TAIL))))
    body, top = us[: us.size - k], us[us.size - k:]
    idx = np.floor(np.log(np.maximum(body, DIGEST_BASE_US) / DIGEST_BASE_US) / np.log(DIGEST_RATIO)).astype(np.int64)
    bins, counts = np.unique(idx, return_counts=True)
    return {"n": int(us.size), "sum_us": float(us.sum()), "base_us": DIGEST_BASE_US, "ratio": DIGEST_RATIO,
            "bins": bins.tolist(), "counts": counts.tolist(), "top_us": [round(float(x), 3) for x in top]}


class Times:
    """Mask times of one or more cells, each exact (every value) or a :func:`mask_digest` (values with counts):
    merged by ``+``; percentiles by linear interpolation when every part is exact (``np.percentile``), else
    nearest rank over the weighted values (a digest's bins at their geometric middle)."""

    def __init__(self, values=(), weights=None, total: float | None = None, exact: bool = True):
        self.values = np.asarray(values, dtype=float)
        self.weights = np.ones(self.values.size, dtype=np.int64) if weights is None else np.asarray(weights, np.int64)
        self.total = float(self.values.sum()) if total is None else float(total)
        self.exact = exact

    @classmethod
    def from_digest(cls, d: dict) -> "Times":
        bins = np.asarray(d["bins"], dtype=float)
        mids = d["base_us"] * d["ratio"] ** (bins + 0.5)
        top = np.asarray(d["top_us"], dtype=float)
        return cls(np.concatenate([mids, top]), np.concatenate([np.asarray(d["counts"], np.int64),
                                                                np.ones(top.size, np.int64)]), d["sum_us"], False)

    def __add__(self, other: "Times") -> "Times":
        return Times(np.concatenate([self.values, other.values]), np.concatenate([self.weights, other.weights]),
                     self.total + other.total, self.exact and other.exact)

    @property
    def n(self) -> int:
        return int(self.weights.sum())

    def mean(self) -> float:
        return self.total / self.n if self.n else float("nan")

    def max(self) -> float:
        return float(self.values.max()) if self.values.size else float("nan")

    def percentile(self, q: float) -> float:
        if not self.n:
            return float("nan")
        if self.exact:
            return float(np.percentile(self.values, q))
        order = np.argsort(self.values, kind="stable")
        cum = np.cumsum(self.weights[order])
        rank = max(1, int(np.ceil(q / 100 * cum[-1])))
        return float(self.values[order][np.searchsorted(cum, rank)])

    def cdf(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted values, fraction of masks at or below each) for a CDF plot."""
        order = np.argsort(self.values, kind="stable")
        cum = np.cumsum(self.weights[order])
        return self.values[order], cum / max(cum[-1], 1) if cum.size else cum


def batch_step_stats(bs: pd.DataFrame) -> dict:
    """Step latency (one ``fill_masks`` call) and per-sequence cost (step time / live sequences) of a batch cell's
    ``batch_steps`` rows, over its *full* steps (all B slots live); a cell without a full step (fewer samples than
    B, or cut short by a limit) uses every step and says so (``step_basis``)."""
    if bs is None or bs.empty:
        return dict(batch_steps=0, full_steps=0, step_basis=None)
    full = bs[bs["live"] == bs["size"]]
    use = full if len(full) else bs
    us = use["step_us"].to_numpy()
    return dict(batch_steps=int(len(bs)), full_steps=int(len(full)), step_basis="full" if len(full) else "all",
                live_mean=float(bs["live"].mean()), fallback_steps=int((bs["fallback"] > 0).sum()),
                batch_path_errors=int((bs["fallback"] == 2).sum()),
                step_mean_us=float(us.mean()), step_p50_us=float(np.percentile(us, 50)),
                step_p99_us=float(np.percentile(us, 99)), step_max_us=float(us.max()),
                per_seq_us=float((use["step_us"] / use["live"]).mean()),
                commit_per_seq_us=float((use["commit_us"] / use["live"]).mean()))
