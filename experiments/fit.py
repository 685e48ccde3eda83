"""Growth exponents: the slope of a cost against a length on log-log axes. Shared by the cliffs benchmark
(``experiments/cliffs.py``) and the report's sections, which both sit above this module."""
from __future__ import annotations

import numpy as np


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
