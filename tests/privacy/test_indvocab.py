"""INDVocab: the ε_i-IND bound of the closed form, exactness of the sampler, the table API."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from umbra.errors import ConfigError, ValidationError
from umbra.privacy.csprng import KeystreamRNG
from umbra.privacy.indvocab import (
    INDVocab,
    INDVocabConfig,
    exact_probabilities,
    guess_bound,
    num_bands,
    randomize_column,
)


def _column(n=60, seed=0, decimals=2):
    """A column with repeated values (like a bf16 table): the output set is the distinct values."""
    return np.round(np.random.default_rng(seed).standard_normal(n), decimals)


@pytest.mark.parametrize("eps_i", [0.0, 0.01, 0.5, 2.0, 7.0, 40.0])
@pytest.mark.parametrize("h", [0.1, 0.25, 1.0])
def test_exact_distribution_is_eps_ind(eps_i, h):
    values, probs = exact_probabilities(_column(), eps_i, h)
    assert values.size == np.unique(_column()).size
    assert np.allclose(probs.sum(axis=1), 1.0)
    logp = np.log(probs)
    worst = (logp.max(axis=0) - logp.min(axis=0)).max()  # max over outputs and token pairs
    assert worst <= eps_i + 1e-9


def test_exact_distribution_prefers_close_values():
    col = _column()
    values, probs = exact_probabilities(col, 10.0, 0.25)
    for t in range(col.size):
        d = np.abs(values - col[t])
        order = np.argsort(d, kind="stable")
        assert np.all(np.diff(probs[t, order]) <= 1e-15)  # non-increasing in distance
        assert values[probs[t].argmax()] == col[t]


def test_eps_zero_is_uniform_over_the_value_set():
    _, probs = exact_probabilities(_column(), 0.0, 0.25)
    assert np.allclose(probs, 1.0 / probs.shape[1])


def _chi2_pvalues(base: np.ndarray, eps_i: float, h: float, reps: int, seed: int) -> list[float]:
    """Randomize a column made of `reps` copies of `base` (every copy draws independently from
    the same distribution, since duplicates do not change the output set) and compare each base
    token's empirical output frequencies with the closed form."""
    values, probs = exact_probabilities(base, eps_i, h)
    out = randomize_column(np.tile(base, reps), eps_i, h, KeystreamRNG(seed))
    pvalues = []
    for t in range(base.size):
        draws = out[t :: base.size]
        idx = np.searchsorted(values, draws)
        assert np.array_equal(values[idx], draws)  # outputs are members of the value set
        observed = np.bincount(idx, minlength=values.size).astype(float)
        expected = probs[t] * reps
        big = expected >= 5
        o = np.append(observed[big], observed[~big].sum())
        e = np.append(expected[big], expected[~big].sum())
        if e[-1] < 5:  # fold a too-small remainder into the largest cell
            o[np.argmax(e[:-1])] += o[-1]
            e[np.argmax(e[:-1])] += e[-1]
            o, e = o[:-1], e[:-1]
        pvalues.append(1.0 if e.size < 2 else stats.chisquare(o, e).pvalue)
    return pvalues


@pytest.mark.parametrize("eps_i", [0.05, 1.0, 3.0, 25.0, 300.0])
def test_sampler_matches_closed_form(eps_i):
    """Chi-square at a fixed seed, covering one band (small ε_i) and many bands (large ε_i)."""
    base = _column(n=12, seed=3, decimals=1)
    pvalues = _chi2_pvalues(base, eps_i, 0.25, reps=4000, seed=11)
    # 12 tests per ε_i; under exactness all p-values are U(0,1): Bonferroni at 0.1%
    assert min(pvalues) > 1e-3 / len(pvalues), (num_bands(eps_i), pvalues)


def test_sampler_detects_a_wrong_distribution():
    """The chi-square check has power: the sampler at ε_i = 3 is not the ε_i = 1 distribution."""
    base = _column(n=12, seed=3, decimals=1)
    values, wrong = exact_probabilities(base, 1.0, 0.25)
    out = randomize_column(np.tile(base, 4000), 3.0, 0.25, KeystreamRNG(11))
    draws = np.searchsorted(values, out[0 :: base.size])
    observed = np.bincount(draws, minlength=values.size)
    assert stats.chisquare(observed, wrong[0] * 4000).pvalue < 1e-6


def test_infinite_epsilon_returns_table_unchanged():
    table = torch.randn(300, 16).to(torch.bfloat16)
    out = INDVocab(INDVocabConfig(math.inf)).randomize(table)
    assert out.dtype == table.dtype and torch.equal(out, table) and out.data_ptr() != table.data_ptr()
    arr = np.random.default_rng(0).standard_normal((50, 4)).astype(np.float32)
    assert np.array_equal(INDVocab(INDVocabConfig(math.inf)).randomize(arr), arr)


def test_randomized_table_keeps_dtype_and_column_value_sets():
    table = (torch.randn(2000, 32) * 0.02).to(torch.bfloat16)
    out = INDVocab(INDVocabConfig(epsilon=8.0)).randomize(table, seed=1)
    assert out.shape == table.shape and out.dtype == torch.bfloat16
    for i in range(32):
        assert set(out[:, i].float().tolist()) <= set(table[:, i].float().tolist())
    assert not torch.equal(out, table)


def test_seeded_is_reproducible_and_unseeded_is_not():
    table = torch.randn(500, 8)
    iv = INDVocab(INDVocabConfig(epsilon=20.0))
    assert torch.equal(iv.randomize(table, seed=5), iv.randomize(table, seed=5))
    assert not torch.equal(iv.randomize(table, seed=5), iv.randomize(table, seed=6))
    assert not torch.equal(iv.randomize(table), iv.randomize(table))


def test_large_epsilon_mostly_keeps_values_small_epsilon_does_not():
    table = torch.randn(1000, 8, dtype=torch.float64)
    strong = INDVocab(INDVocabConfig(epsilon=8.0)).randomize(table, seed=2)  # ε_i = 1
    weak = INDVocab(INDVocabConfig(epsilon=8 * 300.0)).randomize(table, seed=2)  # ε_i = 300, 217 bands
    err_strong = (strong - table).abs().mean().item()
    err_weak = (weak - table).abs().mean().item()
    assert err_weak < 0.1 * err_strong


def test_constant_column_and_per_feature_budgets():
    table = np.zeros((100, 3))
    table[:, 1] = np.arange(100)
    out = INDVocab(INDVocabConfig(1.0)).randomize(table, seed=0, feature_epsilons=np.array([1.0, math.inf, 0.0]))
    assert np.array_equal(out[:, 0], table[:, 0])  # one value: nothing to randomize
    assert np.array_equal(out[:, 1], table[:, 1])  # ε_i = ∞
    assert not np.array_equal(out[:, 1], out[:, 2])


def test_guess_bound():
    assert guess_bound(0.0, 1000) == pytest.approx(1e-3)
    assert guess_bound(math.log(999), 1000) == pytest.approx(0.5)
    assert guess_bound(math.inf, 10) == 1.0
    assert INDVocab(INDVocabConfig(13.0)).guess_bound(32000) == pytest.approx(math.exp(13) / (math.exp(13) + 31999))


@pytest.mark.parametrize("bad", [dict(epsilon=-1.0), dict(epsilon=math.nan), dict(epsilon=1.0, h=0.0)])
def test_config_validation(bad):
    with pytest.raises(ConfigError):
        INDVocab(INDVocabConfig(**bad))


def test_input_validation():
    iv = INDVocab(INDVocabConfig(1.0))
    with pytest.raises(ValidationError):
        iv.randomize(np.array([[np.nan, 1.0], [0.0, 1.0]]))
    with pytest.raises(ValidationError):
        iv.randomize(np.zeros(5))
    with pytest.raises(ValidationError):
        iv.randomize(np.zeros((4, 2)), feature_epsilons=np.array([1.0]))
    with pytest.raises(ValidationError):
        exact_probabilities(np.arange(10_000.0), 1.0)  # |V| x |S| over the limit


def test_csprng_bounded_integers_are_uniform():
    rng = KeystreamRNG(7)
    draws = rng.below(np.full(60_000, 6))
    assert draws.min() == 0 and draws.max() == 5
    assert stats.chisquare(np.bincount(draws, minlength=6)).pvalue > 1e-4
    u = rng.random(100_000)
    assert 0.0 <= u.min() and u.max() < 1.0 and stats.kstest(u, "uniform").pvalue > 1e-4
