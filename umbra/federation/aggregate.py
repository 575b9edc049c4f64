"""The federation's aggregation math (seed 003 §4.2, eqs. 3-5), as pure functions on numpy arrays:

    state = ServerState.initial(global_arrays)                    # Δw^0, Δv^0 = 0
    state = aggregate_round(state, [(arrays_1, n_1), (arrays_2, n_2), ...], ServerOptConfig())

Eq. 3, weighted FedAvg by each organization's scrubbed-data size |D_n^mask| (its count of training
tokens in the scrubbed view):            Δw̄ = Σ_n |D_n| / Σ_k |D_k| · Δw_n
Eqs. 4-5, server-side Nesterov momentum (not Flower's FedAvgM, which is heavy-ball: it steps along
the momentum of pseudo-gradients without the look-ahead):
    Δp = Δw + m·Δv                      (the look-ahead)
    Δv' = m·Δv + η·(Δw̄ - Δp)            (4)
    Δw' = Δw + Δv'                      (5)
computed in float64 in the rearranged, algebraically equal form Δv' = m(1-η)·Δv + η·(Δw̄ - Δw),
Δw' = (1-η)·Δw + η·Δw̄ + m(1-η)·Δv, so that with m = 0 and η = 1 the new global IS the weighted
average, bit for bit (no Δw + (Δw̄ - Δw) rounding), then cast back to each tensor's dtype.

How LoRA factors are averaged: A and B separately, as the arrays they are (each `...lora_a` and
`...lora_b` tensor is one entry, averaged with the rule above), not the product B·A re-factorized.
Why: (1) it is what eq. 3 says — Δw_n is the adapter's parameters, and only they travel;
(2) the global adapter stays a rank-r LoRA of the very shapes every organization trains, so the
next round starts each of them from it, and the traffic stays r·(d + k) per target instead of d·k;
(3) averaging the products then re-factorizing (truncated SVD) is lossy the other way: the mean of
N rank-r products has rank up to N·r, truncation to r discards part of it, and the factors an SVD
returns are in a different gauge (any B·G, G⁻¹·A is the same product) from the ones each
organization was optimizing. The cost of averaging factors: mean(B)·mean(A) ≠ mean(B·A). Every
organization starts a round from the same global (A, B) and moves by (δA_n, δB_n), so the
difference is the covariance term mean(δB_n·δA_n) - mean(δB)·mean(δA): second order in the local
drift, small for the few local epochs of a round.

Validation: every update of a round is checked against the global state's names, shapes and dtypes
and for finite values, and weights must be non-negative integers with a positive total, BEFORE
anything is computed; the result is new arrays (the old state is never written), and a non-finite
result is refused too. So a malformed update raises `AggregationError` and the global state stays
what it was."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from umbra.errors import ConfigError, ValidationError

Arrays = Mapping[str, np.ndarray]


class AggregationError(ValidationError):
    """A round's updates cannot be aggregated (empty round, wrong names or shapes, non-finite
    values, bad weights). The global state is unchanged."""


@dataclass(frozen=True)
class ServerOptConfig:
    momentum: float = 0.5  # m, eqs. 4-5 (seed 003 App. A: 0.5); 0 with lr 1 is plain FedAvg
    lr: float = 0.5  # η, the server rate. At η = 1 eqs. 4-5 cancel the momentum exactly (Δw' = Δw̄
    #                  for every m: plain FedAvg), so the default is below 1; the paper's η_global =
    #                  0.01 would move the global 18 % of the way to the average in 20 rounds at m = 0

    def validate(self) -> "ServerOptConfig":
        if not (math.isfinite(self.momentum) and 0 <= self.momentum < 1):
            raise ConfigError(f"momentum must be in [0, 1), got {self.momentum}")
        if not (math.isfinite(self.lr) and 0 < self.lr <= 2):
            raise ConfigError(f"the server rate must be in (0, 2], got {self.lr}")
        return self


@dataclass(frozen=True)
class ServerState:
    weights: dict[str, np.ndarray]  # Δw^t, the global secure adapter's tensors by name
    velocity: dict[str, np.ndarray]  # Δv^t, float64, same names and shapes
    round: int = 0  # rounds aggregated so far
    history: tuple[dict, ...] = field(default=())  # per round: organizations, weights (never arrays)

    @staticmethod
    def initial(weights: Arrays) -> "ServerState":
        """Δw^0 = the given tensors (copied), Δv^0 = 0."""
        if not weights:
            raise AggregationError("the global adapter has no tensors")
        w = {}
        for name, a in weights.items():
            a = np.asarray(a)
            if a.dtype.kind != "f":
                raise AggregationError(f"global tensor {name!r} is {a.dtype}, not floating point")
            if not np.isfinite(a).all():
                raise AggregationError(f"global tensor {name!r} has non-finite values")
            w[name] = a.copy()
        return ServerState(w, {n: np.zeros(a.shape, np.float64) for n, a in w.items()})

    def spec(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """name -> (shape, dtype) every update must match."""
        return {n: (tuple(a.shape), a.dtype.str) for n, a in self.weights.items()}


def validate_update(update: Arrays, num_examples: object, spec: Mapping[str, tuple[tuple[int, ...], str]],
                    who: str = "an update") -> None:
    """AggregationError unless `update` has exactly the names of `spec`, each with its shape and a
    floating dtype, finite values, and `num_examples` is a non-negative int."""
    if isinstance(num_examples, bool) or not isinstance(num_examples, (int, np.integer)) or num_examples < 0:
        raise AggregationError(f"{who}: the sample count must be a non-negative integer, got {num_examples!r}")
    names, expected = set(update), set(spec)
    if names != expected:
        missing, extra = sorted(expected - names), sorted(names - expected)
        raise AggregationError(f"{who}: tensor names differ from the global adapter's "
                               f"(missing {missing[:3]}{'...' if len(missing) > 3 else ''}, "
                               f"unexpected {extra[:3]}{'...' if len(extra) > 3 else ''})")
    for name in sorted(names):
        a = np.asarray(update[name])
        shape, _ = spec[name]
        if tuple(a.shape) != shape:
            raise AggregationError(f"{who}: {name!r} has shape {tuple(a.shape)}, the global adapter's is {shape}")
        if a.dtype.kind != "f":
            raise AggregationError(f"{who}: {name!r} is {a.dtype}, not floating point")
        if not np.isfinite(a).all():
            raise AggregationError(f"{who}: {name!r} has non-finite values")


def weighted_average(updates: Sequence[tuple[Arrays, int]], spec: Mapping | None = None) -> dict[str, np.ndarray]:
    """Eq. 3 in float64: Σ_n n_i / Σ n_k · update_i, per name (validated against `spec`, or the
    first update's names and shapes)."""
    if not updates:
        raise AggregationError("an empty round: no update to aggregate")
    if spec is None:
        spec = {n: (tuple(np.shape(a)), "") for n, a in updates[0][0].items()}
    for i, (arrays, n) in enumerate(updates):
        validate_update(arrays, n, spec, f"update {i}")
    total = sum(int(n) for _, n in updates)
    if total <= 0:
        raise AggregationError("the updates' sample counts sum to zero: nothing to weigh them by")
    out = {}
    for name in spec:
        acc = np.zeros(spec[name][0], np.float64)
        for arrays, n in updates:
            acc += (int(n) / total) * np.asarray(arrays[name], np.float64)
        out[name] = acc
    return out


def nesterov_step(weights: Arrays, velocity: Arrays, average: Arrays,
                  config: ServerOptConfig) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Eqs. 4-5: (Δw', Δv') from Δw, Δv and the round's average Δw̄ (new arrays; Δw' in Δw's
    dtypes, Δv' in float64)."""
    config.validate()
    m, eta = config.momentum, config.lr
    new_w, new_v = {}, {}
    for name, w in weights.items():  # (an overflow to inf in the cast is caught by the caller)
        w64, v, avg = np.asarray(w, np.float64), np.asarray(velocity[name], np.float64), average[name]
        new_v[name] = m * (1 - eta) * v + eta * (avg - w64)
        with np.errstate(over="ignore"):
            new_w[name] = ((1 - eta) * w64 + eta * avg + m * (1 - eta) * v).astype(np.asarray(w).dtype)
    return new_w, new_v


def aggregate_round(state: ServerState, updates: Sequence[tuple[Arrays, int]], config: ServerOptConfig,
                    who: Sequence[str] | None = None) -> ServerState:
    """One server round: validate every update, eq. 3, eqs. 4-5; the next state (the given one is
    untouched). `who` names the updates in errors and the history (e.g. node ids)."""
    config.validate()
    if not updates:
        raise AggregationError("an empty round: no update to aggregate")
    names = list(who) if who is not None else [f"update {i}" for i in range(len(updates))]
    spec = state.spec()
    for (arrays, n), name in zip(updates, names):
        validate_update(arrays, n, spec, name)
    average = weighted_average(updates, spec)
    weights, velocity = nesterov_step(state.weights, state.velocity, average, config)
    for name, a in weights.items():
        if not np.isfinite(a).all():
            raise AggregationError(f"round {state.round + 1}: the aggregate of {name!r} is not finite; state kept")
    record = {"round": state.round + 1, "updates": names, "samples": [int(n) for _, n in updates]}
    return ServerState(weights, velocity, state.round + 1, state.history + (record,))
