"""Document-level DP-SGD's pieces (umbra/tuning/dp_sgd.py): clipping bounds every document's
gradient, the noise has the planned standard deviation, the recorded plan re-accounts to at most
the target ε, budgets the data cannot meet are refused, and the randomness is a CSPRNG's."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from umbra.errors import ConfigError
from umbra.tuning.dp_sgd import (DPRandom, PrivacyBudgetError, clip_factors, clipped_sum, flat_norms, noisy_mean,
                                 plan_run, spent_epsilon)
from umbra.tuning.noesis_config import DPConfig


def _per_sample(p: int = 16, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    scales = torch.logspace(-2, 2, p)  # norms from far below C to far above it
    return {"a": torch.randn(p, 3, 5, generator=g) * scales[:, None, None],
            "b": torch.randn(p, 7, generator=g) * scales[:, None]}


def test_every_clipped_document_gradient_has_norm_at_most_c():
    per = _per_sample()
    for c in (0.1, 1.0, 3.0):
        f = clip_factors(flat_norms(per), c)
        clipped = {k: v * f.view(-1, *([1] * (v.dim() - 1))) for k, v in per.items()}
        norms = flat_norms(clipped)
        assert torch.all(norms <= c * (1 + 1e-5))
        small = flat_norms(per) < c  # those below the bound are left as they are
        assert torch.allclose(norms[small], flat_norms(per)[small])


def test_clipped_sum_weights_padding_rows_out():
    per = _per_sample()
    w = torch.zeros(16)
    w[:5] = 1
    total = clipped_sum(per, 1.0, w)
    expected = clipped_sum({k: v[:5] for k, v in per.items()}, 1.0)
    for k in per:
        torch.testing.assert_close(total[k], expected[k])


def test_the_noise_has_standard_deviation_sigma_c_over_b():
    plan = plan_run(DPConfig(epsilon=1.0, delta=1e-6, clip_norm=0.7, expected_batch=50, epochs=1.0), 10_000)
    summed = {"w": torch.zeros(400, 500)}
    out = noisy_mean(summed, plan, DPRandom(seed=3))["w"]
    expected = plan.noise_multiplier * plan.clip_norm / plan.expected_batch
    assert out.std().item() == pytest.approx(expected, rel=0.01)  # 200,000 draws: ±0.3 % at 2σ
    assert abs(out.mean().item()) < 4 * expected / math.sqrt(out.numel())


def test_the_recorded_plan_reaccounts_to_at_most_the_target():
    for eps, n, batch, epochs in ((1.0, 12_000, 64, 4.0), (0.5, 3_000, 32, 2.0), (8.0, 3_000, 32, 2.0)):
        plan = plan_run(DPConfig(epsilon=eps, expected_batch=batch, epochs=epochs), n)
        rec = plan.record()
        again = spent_epsilon(rec["noise_multiplier"], rec["sample_rate"], rec["steps"], rec["delta"], rec["accountant"])
        assert again <= eps
        assert again == pytest.approx(plan.epsilon)
        assert rec["sample_rate"] == batch / n and rec["steps"] == math.ceil(epochs * n / batch)
        assert rec["epsilon"] > 0.9 * eps  # σ is not wastefully large either


def test_non_private_plans_have_no_noise_and_infinite_epsilon():
    plan = plan_run(DPConfig(epsilon=math.inf, expected_batch=10, epochs=1.0), 100)
    assert plan.noise_multiplier == 0 and math.isinf(plan.epsilon) and plan.record()["epsilon"] == "inf"
    out = noisy_mean({"w": torch.ones(3)}, plan, DPRandom(0))["w"]
    torch.testing.assert_close(out, torch.full((3,), 0.1))


def test_budgets_the_data_cannot_meet_are_refused():
    with pytest.raises(PrivacyBudgetError, match="cannot reach"):
        plan_run(DPConfig(epsilon=1e-7, expected_batch=100, epochs=50.0), 100)
    with pytest.raises(PrivacyBudgetError, match="exceeds"):
        plan_run(DPConfig(expected_batch=64), 10)
    with pytest.raises(PrivacyBudgetError, match="empty"):
        plan_run(DPConfig(), 0)
    with pytest.raises(PrivacyBudgetError, match="1/N"):
        plan_run(DPConfig(delta=1e-3, expected_batch=10), 5_000)
    with pytest.raises(ConfigError):
        plan_run(DPConfig(epsilon=0.0), 100)
    with pytest.raises(ConfigError):
        plan_run(DPConfig(accountant="moments"), 100)


def test_poisson_sampling_has_rate_q_and_a_seed_fixes_every_draw():
    rng = DPRandom(seed=1)
    sizes = [len(rng.poisson(1_000, 0.05)) for _ in range(400)]
    assert np.mean(sizes) == pytest.approx(50, rel=0.03)
    assert 0 in [len(DPRandom(seed=s).poisson(20, 0.01)) for s in range(20)]  # empty batches happen
    a, b = DPRandom(seed=7), DPRandom(seed=7)
    assert np.array_equal(a.poisson(500, 0.1), b.poisson(500, 0.1))
    assert torch.equal(a.normal((4, 4)), b.normal((4, 4)))
    assert not torch.equal(DPRandom().normal((4, 4)), DPRandom().normal((4, 4)))  # unseeded: OS entropy
