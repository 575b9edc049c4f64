"""Document-level DP-SGD (DESIGN §4, NOESIS stage 1): the pieces that carry the guarantee.

One step over N documents, expected batch B, sampling rate q = B / N:

    S      = {i : u_i < q}, u_i ~ U[0,1) from a CSPRNG      Poisson sampling (S may be empty)
    g_i    = ∇ loss(one block of document i)                 per-document gradient (per_sample.py)
    ĝ_i    = g_i · min(1, C / ‖g_i‖)                         clipped: ‖ĝ_i‖ ≤ C
    g      = (Σ_{i∈S} ĝ_i + N(0, σ²C² I)) / B                noise from the same CSPRNG; divided by
                                                             the EXPECTED batch, not |S|

σ comes from opacus' accountant for (ε, δ), q and the number of steps; the same accountant
reports the ε actually spent, which the bundle records beside the parameters. Nothing here
branches on data: the clip factor is a tensor expression, the noise is drawn for every step
(empty batches too), and the sampler draws one uniform per document whatever the documents are.

The randomness (sampling, block offsets, noise) comes from one KeystreamRNG (AES-256-CTR). By
default it is keyed from the OS CSPRNG; a `noise_seed` makes a run reproducible — for tests and
benchmarks only: whoever knows the seed knows the noise, and the guarantee is void against them."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from umbra.errors import UmbraError
from umbra.privacy.csprng import KeystreamRNG
from umbra.tuning.noesis_config import DPConfig

# Rényi orders of the RDP accountant: opacus' defaults stop at 63, too low for small q and σ ~ 1
# (the optimum then sits on the last order and the bound is loose); these reach 4096.
RDP_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [2**k for k in range(6, 13)]


class PrivacyBudgetError(UmbraError):
    """The requested (ε, δ) cannot be met with this data and schedule."""


@dataclass(frozen=True)
class DPPlan:
    """What a run will do and what it spends: computed once, recorded in the bundle."""

    documents: int  # N
    sample_rate: float  # q = B / N
    steps: int  # T
    noise_multiplier: float  # σ (0 when non-private)
    clip_norm: float  # C
    expected_batch: int  # B
    epsilon: float  # ε spent after T steps at (q, σ), by the accountant (inf when non-private)
    delta: float
    accountant: str
    target_epsilon: float

    def record(self) -> dict:
        """The manifest's `privacy` entry (JSON: ε = ∞ as "inf")."""
        out = asdict(self)
        for k in ("epsilon", "target_epsilon"):
            out[k] = "inf" if math.isinf(out[k]) else out[k]
        out["unit"] = "document"
        out["mechanism"] = "dp-sgd/poisson/v1"
        return out


def spent_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                  accountant: str = "rdp") -> float:
    """ε after `steps` Poisson-sampled Gaussian steps (σ, q), by opacus' accountant."""
    if noise_multiplier <= 0:
        return math.inf
    if steps == 0:
        return 0.0
    from opacus.accountants.utils import create_accountant

    acc = create_accountant(mechanism=accountant)
    acc.history = [(noise_multiplier, sample_rate, steps)]
    # The RDP-to-(ε, δ) conversion is an upper bound that can dip below 0 for huge σ: ε is >= 0.
    return max(0.0, float(acc.get_epsilon(delta=delta, **_orders(accountant))))


def _orders(accountant: str) -> dict:
    return {"alphas": RDP_ORDERS} if accountant == "rdp" else {}


def plan_run(config: DPConfig, documents: int) -> DPPlan:
    """σ and the schedule for `documents` documents. PrivacyBudgetError when (ε, δ) cannot be met:
    no documents, B > N, δ not below 1/N, the accountant finds no σ, or the σ it needs exceeds B
    (the noise on each coordinate of the averaged update would exceed the clip bound itself: such
    a run spends the budget and learns nothing, so it is refused rather than run)."""
    config.validate()
    if documents < 1:
        raise PrivacyBudgetError("no documents to train on (an empty slice)")
    if config.expected_batch > documents:
        raise PrivacyBudgetError(f"expected batch {config.expected_batch} exceeds the {documents} documents "
                                 f"(q > 1); lower --expected-batch or add documents")
    q = config.expected_batch / documents
    steps = max(1, math.ceil(config.epochs / q))
    if not config.private:
        return DPPlan(documents, q, steps, 0.0, config.clip, config.expected_batch, math.inf,
                      config.delta, config.accountant, math.inf)
    if config.delta >= 1.0 / documents:
        raise PrivacyBudgetError(f"delta {config.delta:g} is not below 1/N = 1/{documents}: it would allow "
                                 f"releasing a whole document; lower --delta")
    from opacus.accountants.utils import get_noise_multiplier

    try:
        sigma = float(get_noise_multiplier(target_epsilon=config.epsilon, target_delta=config.delta,
                                           sample_rate=q, steps=steps, accountant=config.accountant,
                                           **_orders(config.accountant)))
    except ValueError as exc:
        raise PrivacyBudgetError(f"the accountant cannot reach ε = {config.epsilon:g} at δ = {config.delta:g} "
                                 f"with {documents} documents, q = {q:.4g} and {steps} steps ({exc}); raise ε, "
                                 f"or train fewer epochs") from exc
    if sigma > config.expected_batch:
        raise PrivacyBudgetError(f"the accountant cannot reach ε = {config.epsilon:g} at δ = {config.delta:g} with "
                                 f"{documents} documents and {steps} steps usefully: it needs σ = {sigma:.4g} > B = "
                                 f"{config.expected_batch}, so every coordinate of every update would carry noise "
                                 f"larger than the clip bound C; raise ε or the expected batch, or train fewer epochs")
    spent = spent_epsilon(sigma, q, steps, config.delta, config.accountant)
    if spent > config.epsilon:  # the search's tolerance is on the safe side; checked, not assumed
        raise PrivacyBudgetError(f"accountant returned σ = {sigma:g} spending ε = {spent:g} > {config.epsilon:g}")
    return DPPlan(documents, q, steps, sigma, config.clip, config.expected_batch, spent, config.delta,
                  config.accountant, config.epsilon)


class DPRandom:
    """The run's one CSPRNG: Poisson sampling, block offsets and the Gaussian noise."""

    def __init__(self, seed: int | None = None, stream: str = ""):
        self.seed = seed  # None: keyed from the OS CSPRNG
        label = None if seed is None else f"umbra/dp-sgd/{seed}" + (f"/{stream}" if stream else "")
        self._rng = KeystreamRNG(label)

    def poisson(self, n: int, q: float) -> np.ndarray:
        """Indices of the documents in this step's batch: each independently with probability q."""
        return np.flatnonzero(self._rng.random(n) < q)

    def below(self, bounds: np.ndarray) -> np.ndarray:
        """One uniform integer in [0, b) per bound (block offsets)."""
        return self._rng.below(np.maximum(np.asarray(bounds, dtype=np.int64), 1))

    def uniform(self, n: int) -> np.ndarray:
        return self._rng.random(n)

    def normal(self, shape: tuple[int, ...], dtype: torch.dtype = torch.float32,
               device: torch.device | None = None) -> torch.Tensor:
        """Standard normals drawn on the CPU (the keystream), then moved to `device`."""
        n = int(np.prod(shape)) if shape else 1
        return torch.from_numpy(self._rng.normal(n)).to(dtype).view(shape).to(device=device)


def flat_norms(per_sample: dict[str, torch.Tensor]) -> torch.Tensor:
    """‖g_i‖ over every parameter: per_sample {name: [P, ...]} -> [P]."""
    sq = [g.flatten(1).float().pow(2).sum(1) for g in per_sample.values()]
    return torch.stack(sq).sum(0).sqrt()


def clip_factors(norms: torch.Tensor, clip_norm: float, weights: torch.Tensor | None = None) -> torch.Tensor:
    """min(1, C / ‖g_i‖) · w_i  [P] (w_i = 0 for padding rows); a tensor expression, no branch."""
    f = (clip_norm / (norms + 1e-6)).clamp(max=1.0)
    return f if weights is None else f * weights


def clipped_sum(per_sample: dict[str, torch.Tensor], clip_norm: float,
                weights: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Σ_i ĝ_i per parameter: {name: [P, ...]} -> {name: [...]}."""
    f = clip_factors(flat_norms(per_sample), clip_norm, weights)
    return {n: torch.einsum("p,p...->...", f.to(g.dtype), g) for n, g in per_sample.items()}


def noisy_mean(summed: dict[str, torch.Tensor], plan: DPPlan, rng: DPRandom) -> dict[str, torch.Tensor]:
    """(Σ ĝ_i + N(0, σ²C²)) / B per parameter; without noise (σ = 0) just Σ / B."""
    if plan.noise_multiplier == 0:  # a non-private plan (a setting, not data)
        return {name: s / plan.expected_batch for name, s in summed.items()}
    std = plan.noise_multiplier * plan.clip_norm
    return {name: (s + rng.normal(tuple(s.shape), s.dtype, s.device) * std) / plan.expected_batch
            for name, s in summed.items()}
