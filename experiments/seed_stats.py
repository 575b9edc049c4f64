"""Means over seeds with their 95 % t-intervals, as every benchmark table reports them."""

from __future__ import annotations

import math

import numpy as np

# two-sided 95 % Student t critical values by degrees of freedom
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % t-interval over seeds (nan with one seed)."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return float(v.mean()), float("nan")
    t = _T95.get(len(v) - 1, 1.96)
    return float(v.mean()), float(t * v.std(ddof=1) / math.sqrt(len(v)))
