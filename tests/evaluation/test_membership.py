"""Membership-inference metrics are the textbook ones: AUC equals the pairwise win rate (ties
half) and the ROC curve's area, TPR at a fixed FPR never exceeds that FPR's budget, the bootstrap
interval is seeded and covers the estimate, and bad input is refused."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from umbra.errors import ConfigError
from umbra.evaluation.membership import (auc, bootstrap_ci, membership_result, roc_curve, tpr_at_fpr,
                                         write_roc_svg)


def _pairwise(m, n) -> float:
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(m, n))
    return wins / (len(m) * len(n))


@pytest.mark.parametrize("seed", range(5))
def test_auc_is_pairwise_win_rate_and_roc_area(seed):
    rng = np.random.default_rng(seed)
    m = rng.integers(0, 6, 40).astype(float) + 0.5  # many ties, inside and across groups
    n = rng.integers(0, 6, 30).astype(float)
    n[:10] += 0.5
    a = auc(m, n)
    assert a == pytest.approx(_pairwise(m, n), abs=1e-12)
    fpr, tpr = roc_curve(m, n)
    assert float(np.trapezoid(tpr, fpr)) == pytest.approx(a, abs=1e-12)
    assert fpr[0] == tpr[0] == 0.0 and fpr[-1] == tpr[-1] == 1.0
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)


def test_separable_and_identical_scores():
    assert auc([3, 4, 5], [0, 1, 2]) == 1.0
    assert auc([0, 1, 2], [3, 4, 5]) == 0.0
    assert auc([1, 1, 1], [1, 1]) == 0.5
    assert tpr_at_fpr([3, 4, 5], [0, 1, 2], 0.0) == 1.0
    assert tpr_at_fpr([1, 1], [1, 1], 0.01) == 0.0  # a tie cannot be split: the only threshold costs 100 % FPR


def test_tpr_at_fpr_respects_the_budget():
    rng = np.random.default_rng(1)
    n = rng.normal(size=1000)
    m = rng.normal(loc=1.0, size=1000)
    t = tpr_at_fpr(m, n, 0.01)
    threshold = np.sort(m)[::-1][int(round(t * m.size)) - 1]  # the lowest member score still called "member"
    assert (n >= threshold).mean() <= 0.01
    assert 0.02 < t < 0.3  # a unit shift of normals: about 9 % at 1 % FPR


def test_bootstrap_is_seeded_and_covers_estimate():
    rng = np.random.default_rng(2)
    m, n = rng.normal(0.3, 1, 200), rng.normal(0, 1, 200)
    lo, hi = bootstrap_ci(m, n, auc, rounds=300, seed=7)
    assert (lo, hi) == bootstrap_ci(m, n, auc, rounds=300, seed=7)
    assert lo < auc(m, n) < hi and hi - lo < 0.2
    r = membership_result(m, n, seed=7, rounds=300)
    assert r.auc_ci == (lo, hi) and r.members == r.nonmembers == 200
    assert r.auc_ci[0] > 0.5  # a real shift: the interval excludes chance
    null = membership_result(rng.normal(size=200), rng.normal(size=200), seed=0, rounds=300)
    assert null.auc_ci[0] < 0.5 < null.auc_ci[1]


def test_bad_input_is_refused():
    with pytest.raises(ConfigError):
        auc([], [1.0])
    with pytest.raises(ConfigError):
        roc_curve([1.0, float("nan")], [0.0])
    with pytest.raises(ConfigError):
        tpr_at_fpr([1.0], [0.0], 1.5)
    with pytest.raises(ConfigError):
        bootstrap_ci([1.0], [0.0], auc, rounds=0)


def test_roc_svg_is_well_formed(tmp_path):
    m, n = [0.9, 0.8, 0.3], [0.1, 0.4, 0.2]
    path = write_roc_svg({"go ← python": roc_curve(m, n), "a<b & c": roc_curve(n, m)}, tmp_path / "r" / "roc.svg",
                         "MIA <test>")
    root = ET.parse(path).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    assert len(root.findall(f"{ns}polyline")) == 3  # two curves and the diagonal
    labels = [t.text for t in root.findall(f"{ns}text")]
    assert "MIA <test>" in labels and any(lbl.startswith("go ← python (AUC 0.889)") for lbl in labels)
