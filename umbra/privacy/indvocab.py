"""INDVocab: the randomized embedding table of NOIR §6, as DESIGN §4 fixes it.

For feature i the output set is the set of distinct values S_i = {e_u[i] : u ∈ V}; token t's
value is drawn once from the exponential mechanism

    P(o = s | t) ∝ w_t(s) = exp(−ε_i · min(1, |e_t[i] − s| / (h R_i)) / 2),   s ∈ S_i,

R_i = max − min of feature i over V, h the temperature (default 0.25), ε_i = ε/d by default;
ε = ∞ returns the table unchanged. Every row is ε-IND with ε = Σ ε_i (docs/privacy/indvocab.md).

Sampling is exact rejection sampling, one column at a time, never touching |V|×|V| memory. The
envelope is piecewise constant in distance: K equal bands of width hR_i/K inside the clipping
range (band k's envelope is the weight at its inner edge) and one band outside it (the floor
weight exp(−ε_i/2)). Band counts come from searchsorted on the sorted distinct values, so
proposing = pick a band with probability ∝ count × envelope, then a uniform member of it; a
candidate s is accepted with probability w_t(s)/envelope ≥ exp(−ε_i/(2K)). K = 1 while
ε_i ≤ 2 ln 2 (acceptance ≥ 1/2 inside, 1 outside), else K = ⌈ε_i/(2 ln 2)⌉ ≤ MAX_BANDS."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from umbra.errors import ConfigError, ValidationError
from umbra.privacy.csprng import KeystreamRNG

MAX_BANDS = 1024  # beyond ε_i ≈ 1420 the worst-case acceptance decays as exp(−ε_i / 2048)
ENVELOPE_SLACK = 1e-6  # in units of h·R_i: keeps the envelope above w despite float rounding
WORK_ELEMENTS = 1 << 22  # rows × (K+1) handled at once inside a column
EXACT_TABLE_LIMIT = 1 << 25  # |V| × |S_i| entries allowed in exact_probabilities


@dataclass(frozen=True)
class INDVocabConfig:
    epsilon: float  # total ε of one token row (Σ ε_i); math.inf = no randomization
    h: float = 0.25  # temperature: distances are clipped at h·R_i (NOIR's best setting)
    columns_per_chunk: int = 64  # columns converted to float64 together (|V| × 64 × 8 bytes)

    def validate(self) -> None:
        if math.isnan(self.epsilon) or self.epsilon < 0:
            raise ConfigError(f"epsilon must be >= 0 (or inf), got {self.epsilon}")
        if not (math.isfinite(self.h) and self.h > 0):
            raise ConfigError(f"h must be a positive number, got {self.h}")
        if self.columns_per_chunk < 1:
            raise ConfigError("columns_per_chunk must be >= 1")


def guess_bound(epsilon: float, vocab_size: int) -> float:
    """Largest chance that a uniform-prior guess of a token from its ε-IND row is right:
    e^ε / (e^ε + |V| − 1)."""
    if vocab_size < 1:
        raise ValidationError("vocab_size must be >= 1")
    if math.isinf(epsilon):
        return 1.0
    return 1.0 / (1.0 + (vocab_size - 1) * math.exp(-epsilon))


def num_bands(epsilon_i: float) -> int:
    if epsilon_i <= 2 * math.log(2):
        return 1
    return min(MAX_BANDS, math.ceil(epsilon_i / (2 * math.log(2))))


class _Column:
    """Sorted distinct values of one column, centred (so band edges round to ~1e-16 · R_i)."""

    def __init__(self, column: np.ndarray):
        col = np.asarray(column, dtype=np.float64)
        if col.ndim != 1 or col.size == 0:
            raise ValidationError("a column must be a non-empty 1-D array")
        if not np.isfinite(col).all():
            raise ValidationError("the embedding table holds NaN or Inf")
        self.order = np.argsort(col)  # ties may come in any order
        xs = col[self.order]
        first = np.empty(col.size, dtype=bool)
        first[0] = True
        np.not_equal(xs[1:], xs[:-1], out=first[1:])
        self.values = xs[first]  # S_i, sorted
        self.rank = np.cumsum(first) - 1  # index in S_i of each token, in sorted-token order
        self.centred = self.values - 0.5 * (self.values[0] + self.values[-1])
        self.spread = float(self.values[-1] - self.values[0])  # R_i


def exact_probabilities(column: np.ndarray, epsilon_i: float, h: float = 0.25) -> tuple[np.ndarray, np.ndarray]:
    """(S_i sorted, P) with P[t, j] = P(o = S_i[j] | token t), straight from the closed form.
    For small vocabularies only (tests, docs): |V| × |S_i| must stay under EXACT_TABLE_LIMIT."""
    col = _Column(column)
    n, m = col.rank.size, col.values.size
    if n * m > EXACT_TABLE_LIMIT:
        raise ValidationError(f"exact table of {n} x {m} entries is too large (limit {EXACT_TABLE_LIMIT})")
    own = np.empty(n, dtype=np.int64)
    own[col.order] = col.rank
    if m == 1:
        return col.values, np.ones((n, 1))
    if math.isinf(epsilon_i):
        probs = np.zeros((n, m))
        probs[np.arange(n), own] = 1.0
        return col.values, probs
    width = h * col.spread
    dist = np.abs(col.centred[own][:, None] - col.centred[None, :])
    w = np.exp(-0.5 * epsilon_i * np.minimum(1.0, dist / width))
    return col.values, w / w.sum(axis=1, keepdims=True)


def randomize_column(column: np.ndarray, epsilon_i: float, h: float, rng: KeystreamRNG) -> np.ndarray:
    """One exact draw per token from the mechanism above; returns the new column (float64)."""
    col = _Column(column)
    m = col.values.size
    if math.isinf(epsilon_i) or m == 1:
        return np.asarray(column, dtype=np.float64).copy()
    if math.isnan(epsilon_i) or epsilon_i < 0:
        raise ValidationError(f"feature epsilon must be >= 0, got {epsilon_i}")
    k = num_bands(epsilon_i)
    width = h * col.spread
    env = np.exp(-0.5 * epsilon_i * np.maximum(0.0, np.arange(k + 1) / k - ENVELOPE_SLACK))  # [K+1]
    picked = np.empty(col.rank.size, dtype=np.int64)  # index into S_i, in sorted-token order
    step = max(1, WORK_ELEMENTS // (k + 1))
    for u0 in range(0, m, step):
        u1 = min(m, u0 + step)
        plan = _band_plan(col.centred, u0, u1, width, k, env)
        t0, t1 = np.searchsorted(col.rank, [u0, u1])
        for s0 in range(t0, t1, step):
            s1 = min(t1, s0 + step)
            picked[s0:s1] = _sample(plan, col.rank[s0:s1] - u0, col.centred, u0, width, epsilon_i, env, rng)
    out = np.empty(col.rank.size, dtype=np.float64)
    out[col.order] = col.values[picked]
    return out


def _band_plan(sc: np.ndarray, u0: int, u1: int, width: float, k: int, env: np.ndarray) -> dict:
    """Per distinct value a = sc[u] (u in [u0, u1)): each band's index ranges, counts and the
    cumulative proposal mass, band-major ([K+1, u1 − u0]). Band b < K holds the distances
    [b, b+1)·width/K: a left part [left_start, left_start + n_left) and a right part starting at
    right_start; band K is everything at distance >= width."""
    a = sc[u0:u1]
    m = sc.size
    lb = np.empty((k + 1, a.size), dtype=np.int64)  # lb[b] = #values <= a − b·width/K
    rb = np.empty((k + 1, a.size), dtype=np.int64)  # rb[b] = #values <  a + b·width/K
    lb[0] = rb[0] = np.arange(u0, u1)
    for b in range(1, k + 1):
        e = width * b / k
        np.minimum(np.searchsorted(sc, a - e, side="right"), lb[b - 1], out=lb[b])  # min/max: rounding
        np.maximum(np.searchsorted(sc, a + e, side="left"), rb[b - 1], out=rb[b])  # never overlaps
    left_start = np.concatenate([lb[1:], np.zeros((1, a.size), np.int64)])
    n_left = np.concatenate([lb[:-1] - lb[1:], lb[-1:]])
    n_right = np.concatenate([rb[1:] - rb[:-1], m - rb[-1:]])
    count = n_left + n_right
    return dict(
        left_start=left_start.ravel(), n_left=n_left.ravel(), right_start=rb.ravel(),
        count=count.ravel(), cum=np.cumsum(count * env[:, None], axis=0), width=a.size,
    )


def _sample(plan, local: np.ndarray, sc, u0, width, epsilon_i, env, rng: KeystreamRNG) -> np.ndarray:
    """Rejection sampling for tokens whose value is sc[u0 + local]; returns indices into sc."""
    k = env.size - 1
    cum, mc = plan["cum"], plan["width"]
    result = np.empty(local.size, dtype=np.int64)
    todo = np.arange(local.size)
    while todo.size:
        u = local[todo]
        r = rng.random(u.size) * cum[k][u]
        if k == 1:
            band = (cum[0][u] <= r).astype(np.int64)
        else:
            band = np.minimum((cum[:, u] <= r[None, :]).sum(axis=0), k)
        flat = band * mc + u
        cnt = plan["count"][flat]
        off = rng.below(np.maximum(cnt, 1))
        nl = plan["n_left"][flat]
        j = np.where(off < nl, plan["left_start"][flat] + off, plan["right_start"][flat] + off - nl)
        dist = np.abs(sc[j] - sc[u0 + u])
        w = np.exp(-0.5 * epsilon_i * np.minimum(1.0, dist / width))
        accept = (cnt > 0) & (rng.random(u.size) * env[band] < w)  # U < w / envelope
        result[todo[accept]] = j[accept]
        todo = todo[~accept]
    return result


class INDVocab:
    """Randomizes an embedding table [|V|, d] (torch or numpy) once, per DESIGN §4."""

    def __init__(self, config: INDVocabConfig):
        config.validate()
        self.config = config

    def feature_epsilons(self, d: int) -> np.ndarray:
        """ε_i = ε/d for every feature (sequential composition gives ε per row)."""
        return np.full(d, self.config.epsilon / d, dtype=np.float64)

    def guess_bound(self, vocab_size: int) -> float:
        return guess_bound(self.config.epsilon, vocab_size)

    def probabilities(self, column: np.ndarray, epsilon_i: float) -> tuple[np.ndarray, np.ndarray]:
        return exact_probabilities(column, epsilon_i, self.config.h)

    def randomize(
        self,
        table: torch.Tensor | np.ndarray,
        seed: bytes | int | str | None = None,  # None: a fresh key from `secrets` (production)
        feature_epsilons: np.ndarray | None = None,  # default ε/d each; their sum is the row's ε
        progress: Callable[[int, int], None] | None = None,  # called with (columns done, d)
    ) -> torch.Tensor | np.ndarray:
        """A new table of the same type, shape and dtype. Output values are members of each
        column's own value set, so casting back to the input dtype is exact."""
        if table.ndim != 2 or table.shape[0] < 1 or table.shape[1] < 1:
            raise ValidationError(f"an embedding table must be [vocab, hidden], got shape {tuple(table.shape)}")
        n, d = table.shape
        eps = self.feature_epsilons(d) if feature_epsilons is None else np.asarray(feature_epsilons, np.float64)
        if eps.shape != (d,) or np.isnan(eps).any() or (eps < 0).any():
            raise ValidationError(f"feature_epsilons must be {d} values >= 0")
        is_torch = isinstance(table, torch.Tensor)
        out = table.detach().clone() if is_torch else np.array(table, copy=True)
        if np.isinf(eps).all():
            return out
        rng = KeystreamRNG(seed)
        step = self.config.columns_per_chunk
        for c0 in range(0, d, step):
            c1 = min(d, c0 + step)
            block = table[:, c0:c1]
            block = block.detach().to(torch.float64).numpy() if is_torch else np.asarray(block, np.float64)
            cols = np.ascontiguousarray(block.T)
            res = np.stack([randomize_column(cols[i], float(eps[c0 + i]), self.config.h, rng) for i in range(c1 - c0)])
            if is_torch:
                out[:, c0:c1] = torch.from_numpy(np.ascontiguousarray(res.T)).to(out.dtype)
            else:
                out[:, c0:c1] = res.T.astype(out.dtype)
            if progress is not None:
                progress(c1, d)
        return out
