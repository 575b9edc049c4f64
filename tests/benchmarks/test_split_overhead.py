"""The split-overhead benchmark's statistics: the order-statistic confidence interval of a median."""

from __future__ import annotations

import math
import random

import pytest

from split_overhead import median_ci_ranks


@pytest.mark.parametrize("n, ranks, coverage", [(3, (0, 2), 0.75), (6, (0, 5), 0.96875),
                                                (9, (1, 7), 0.9609375), (21, (5, 15), 0.9734)])
def test_ranks_and_coverage_of_known_sizes(n, ranks, coverage):
    lo, hi, cov = median_ci_ranks(n)
    assert (lo, hi) == ranks
    assert cov == pytest.approx(coverage, abs=1e-4)


@pytest.mark.parametrize("n", [6, 9, 15, 21, 40])
def test_the_interval_is_the_narrowest_that_reaches_95_percent(n):
    lo, hi, cov = median_ci_ranks(n)
    assert cov >= 0.95 and hi == n - 1 - lo
    narrower = 1 - 2 * sum(math.comb(n, i) for i in range(lo + 2)) / 2**n
    assert lo + 1 >= (n - 1) / 2 or narrower < 0.95


def test_the_interval_covers_the_true_median_as_often_as_it_claims():
    rng = random.Random(0)
    n, trials, hits = 9, 4000, 0
    lo, hi, cov = median_ci_ranks(n)
    for _ in range(trials):  # exponential(1): median ln 2
        xs = sorted(rng.expovariate(1.0) for _ in range(n))
        hits += xs[lo] <= math.log(2) <= xs[hi]
    assert abs(hits / trials - cov) < 0.02
