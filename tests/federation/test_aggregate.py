"""Eqs. 3-5 as pure functions: weighted FedAvg by scrubbed-data size, server-side Nesterov momentum
(checked against a literal transcription of the paper's three lines), the exact reduction to FedAvg
at m = 0, η = 1, and every malformed round refused with the state untouched."""

from __future__ import annotations

import numpy as np
import pytest

from umbra.errors import ConfigError, ValidationError
from umbra.federation.aggregate import (AggregationError, ServerOptConfig, ServerState, aggregate_round,
                                        nesterov_step, weighted_average)

NAMES = {"dec.0.q.lora_a": (4, 16), "dec.0.q.lora_b": (16, 4), "dec.1.v.lora_a": (4, 16)}


def arrays(seed: int, scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: (scale * rng.standard_normal(s)).astype(np.float32) for n, s in NAMES.items()}


def updates(k: int = 3, round_: int = 0):
    return [(arrays(100 * round_ + i), n) for i, n in zip(range(k), (120, 30, 50, 7))]


def test_weighted_average_weighs_by_sample_counts():
    ups = [(arrays(1), 3), (arrays(2), 1)]
    avg = weighted_average(ups)
    for name in NAMES:
        expected = 0.75 * ups[0][0][name].astype(np.float64) + 0.25 * ups[1][0][name].astype(np.float64)
        np.testing.assert_allclose(avg[name], expected, rtol=0, atol=1e-12)
    # an organization with no scrubbed data gets no say
    avg0 = weighted_average([(arrays(1), 5), (arrays(2, scale=1e6), 0)])
    np.testing.assert_allclose(avg0["dec.0.q.lora_a"], arrays(1)["dec.0.q.lora_a"], atol=1e-12)


def test_nesterov_matches_the_papers_three_lines_over_rounds():
    cfg = ServerOptConfig(momentum=0.5, lr=0.7)
    state = ServerState.initial(arrays(0))
    w = {n: a.astype(np.float64) for n, a in arrays(0).items()}
    v = {n: np.zeros(s) for n, s in NAMES.items()}
    for t in range(4):
        ups = updates(3, t)
        state = aggregate_round(state, ups, cfg)
        total = sum(n for _, n in ups)
        for name in NAMES:
            avg = sum(n / total * u[name].astype(np.float64) for u, n in ups)  # eq. 3
            p = w[name] + cfg.momentum * v[name]  # look-ahead
            v[name] = cfg.momentum * v[name] + cfg.lr * (avg - p)  # eq. 4
            w[name] = (w[name] + v[name]).astype(np.float32).astype(np.float64)  # eq. 5 (kept in float32)
            np.testing.assert_allclose(state.weights[name], w[name], rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(state.velocity[name], v[name], rtol=1e-5, atol=1e-6)
            assert state.weights[name].dtype == np.float32
    assert state.round == 4 and [h["round"] for h in state.history] == [1, 2, 3, 4]


def test_momentum_carries_the_global_past_a_repeated_average():
    """The same average every round: FedAvg stops at it; Nesterov with η < 1 gets there faster
    than without momentum (the velocity keeps pointing at it)."""
    start, target = arrays(0), arrays(9)
    plain, heavy = ServerState.initial(start), ServerState.initial(start)
    for _ in range(3):
        plain = aggregate_round(plain, [(target, 1)], ServerOptConfig(momentum=0.0, lr=0.5))
        heavy = aggregate_round(heavy, [(target, 1)], ServerOptConfig(momentum=0.5, lr=0.5))
    dist = lambda s: sum(float(np.abs(s.weights[n].astype(np.float64) - target[n]).sum()) for n in NAMES)  # noqa: E731
    assert dist(heavy) < dist(plain) > 0


def test_momentum_zero_and_rate_one_is_fedavg_bit_for_bit():
    cfg = ServerOptConfig(momentum=0.0, lr=1.0)
    state = ServerState.initial(arrays(0))
    for t in range(3):
        ups = updates(3, t)
        state = aggregate_round(state, ups, cfg)
        avg = weighted_average(ups)
        for name in NAMES:
            assert np.array_equal(state.weights[name], avg[name].astype(np.float32))


def test_nesterov_step_leaves_its_inputs_alone():
    w, v, avg = arrays(0), {n: np.ones(s) for n, s in NAMES.items()}, weighted_average(updates())
    before = {n: a.copy() for n, a in w.items()}
    nesterov_step(w, v, avg, ServerOptConfig())
    assert all(np.array_equal(w[n], before[n]) for n in NAMES) and all((v[n] == 1).all() for n in NAMES)


def _bad_rounds():
    good = arrays(1)
    wrong_shape = {**good, "dec.0.q.lora_b": np.zeros((16, 5), np.float32)}
    missing = {k: v for k, v in good.items() if k != "dec.1.v.lora_a"}
    extra = {**good, "dec.0.q.revealing_a": np.zeros((4, 16), np.float32)}
    nan = {**good, "dec.0.q.lora_a": np.full((4, 16), np.nan, np.float32)}
    inf = {**good, "dec.1.v.lora_a": np.full((4, 16), np.inf, np.float32)}
    ints = {**good, "dec.0.q.lora_a": np.zeros((4, 16), np.int64)}
    return {
        "empty round": ([], "empty round"),
        "wrong shape": ([(good, 3), (wrong_shape, 4)], "shape (16, 5)"),
        "missing tensor": ([(missing, 3)], "missing ['dec.1.v.lora_a']"),
        "unexpected tensor": ([(extra, 3)], "unexpected ['dec.0.q.revealing_a']"),
        "nan": ([(good, 3), (nan, 4)], "non-finite"),
        "inf": ([(inf, 4)], "non-finite"),
        "integer tensor": ([(ints, 4)], "not floating point"),
        "zero total weight": ([(good, 0), (arrays(2), 0)], "sum to zero"),
        "negative count": ([(good, -1)], "non-negative integer"),
        "float count": ([(good, 2.5)], "non-negative integer"),
        "bool count": ([(good, True)], "non-negative integer"),
    }


@pytest.mark.parametrize("case", list(_bad_rounds()))
def test_a_malformed_round_raises_and_leaves_the_state_as_it_was(case):
    ups, message = _bad_rounds()[case]
    state = aggregate_round(ServerState.initial(arrays(0)), updates(), ServerOptConfig())
    snapshot = ({n: a.copy() for n, a in state.weights.items()}, {n: a.copy() for n, a in state.velocity.items()})
    with pytest.raises(AggregationError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)")) as info:
        aggregate_round(state, ups, ServerOptConfig())
    assert isinstance(info.value, ValidationError)
    assert state.round == 1
    assert all(np.array_equal(state.weights[n], snapshot[0][n]) for n in NAMES)
    assert all(np.array_equal(state.velocity[n], snapshot[1][n]) for n in NAMES)
    # and the next good round proceeds from the unchanged state
    assert aggregate_round(state, updates(2, 5), ServerOptConfig()).round == 2


def test_an_overflowing_aggregate_is_refused():
    state = ServerState.initial({"x": np.full((2,), 3e38, np.float32)})
    with pytest.raises(AggregationError, match="not finite"):
        aggregate_round(state, [({"x": np.full((2,), -3e38, np.float32)}, 1)], ServerOptConfig(momentum=0.0, lr=2.0))
    assert (state.weights["x"] == np.float32(3e38)).all()


def test_initial_state_and_config_are_validated():
    with pytest.raises(AggregationError):
        ServerState.initial({})
    with pytest.raises(AggregationError, match="non-finite"):
        ServerState.initial({"x": np.array([np.nan], np.float32)})
    for bad in (ServerOptConfig(momentum=1.0), ServerOptConfig(momentum=-0.1), ServerOptConfig(lr=0.0),
                ServerOptConfig(lr=float("nan"))):
        with pytest.raises(ConfigError):
            bad.validate()
