"""The access gate (umbra/securegate/gate.py): trained over several revealing adapters with several
keys each, it routes fresh requests of every key class right (valid to their adapter; random,
malformed, other-bundle, empty and absent to the secure adapter); below τ it falls back to class
0; its file round-trips and a broken one is a GateError. Inside a real bundle (the key state, the
gating pass without the Middle): test_gate_bundle.py.

The gate is statistical: fresh random keys are misrouted at a rate of order 1e-5..1e-4 (measured
here as a bound). The training tests are seeded (fixed secrets, fixed bundle id, fixed request
draws) so they are deterministic; a misrouted key still opens nothing, because the revealing
adapter is sealed (test_access.py: a key the gate sends to an adapter it cannot decrypt)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from safetensors.torch import save as st_save

from umbra.engine import ClientModel
from umbra.errors import ConfigError
from umbra.model.adapters import LoraConfig
from umbra.model.adapters.files import adapter_bytes
from umbra.securegate.errors import GateError
from umbra.securegate.gate import (FORMAT, KEY_CLASSES, GateConfig, KeyEncoder, KeyGate, RandomKeyStates, gate_bytes,
                                   gate_from_bytes, mine_synthetic, train_gate)

from .helpers import SMALL_GATE

BUNDLE = "gate-test-bundle"
FRESH = 1000  # fresh requests per key class, at least


def _secret(label: str) -> bytes:
    return hashlib.sha256(b"umbra-test-gate:" + label.encode()).digest()


VALID = {"alpha": [_secret("a1"), _secret("a2"), _secret("a3")], "beta": [_secret("b1"), _secret("b2")],
         "gamma": [_secret("c1")]}


@pytest.fixture(scope="module")
def enc(sg_base):
    return KeyEncoder(ClientModel.load(sg_base).encoder, BUNDLE)


@pytest.fixture(scope="module")
def trained(enc):
    return train_gate(enc, VALID)  # the default config: what a bundle gets


def _bit_flips(s: bytes) -> list[bytes]:
    return [s[:i // 8] + bytes([s[i // 8] ^ (1 << (i % 8))]) + s[i // 8 + 1:] for i in range(8 * len(s))]


def _fresh_requests(enc, rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """≥ FRESH requests of every class, drawn independently of the gate's own training and check
    (its draws use seed 0; these another generator; the malformed keys are systematic)."""
    secrets_ = [s for c in sorted(VALID) for s in VALID[c]]
    reps = -(-FRESH // len(secrets_))
    malformed = []
    for s in secrets_:
        malformed += _bit_flips(s)  # every single-bit flip
        malformed += [s + b"\x00", s + b"\x00\x00", s + s, s[:-1], s[1:], s[:16], s[::-1], s.hex().encode(),
                      s[:-1] + bytes([(s[-1] + 1) % 256])] + [s[:n] for n in range(0, 31, 3)]
    other = [enc.key_states(secrets_, bundle_id=rng.bytes(8).hex()) for _ in range(-(-FRESH // len(secrets_)))]
    lengths = rng.choice([1, 16, 31, 32, 32, 32, 33, 64], size=FRESH)
    vocab = enc.encoder.embed_tokens.weight.shape[0]
    return {
        "valid": enc.key_states(secrets_ * reps),
        "random": enc.key_states([rng.bytes(int(n)) for n in lengths]),
        "malformed": enc.key_states(malformed),
        "other-bundle": torch.cat(other + [enc.key_states(secrets_, bundle_id=BUNDLE + "x"),
                                           enc.key_states(secrets_, bundle_id=BUNDLE.upper())]),
        "empty": enc.key_states([b""] * FRESH),
        # a request without a key: every token of the vocabulary at position 0 (exhaustive), twice
        "absent": enc.token_states(torch.arange(vocab).repeat(-(-FRESH // vocab))),
    }


def test_routes_every_fresh_request_of_every_key_class(enc, trained):
    gate, report = trained
    assert gate.classes == ("alpha", "beta", "gamma")
    assert set(report.accuracy) == set(KEY_CLASSES) and all(a == 1.0 for a in report.accuracy.values())
    assert all(report.checked[c] >= FRESH for c in KEY_CLASSES)
    fresh = _fresh_requests(enc, np.random.default_rng(20240615))
    assert set(fresh) == set(KEY_CLASSES)
    secrets_ = [s for c in sorted(VALID) for s in VALID[c]]
    expected_valid = torch.tensor([1 + sorted(VALID).index(c) for c in sorted(VALID) for _ in VALID[c]])
    for cls, states in fresh.items():
        assert states.shape[0] >= FRESH, cls
        routes = gate.route(states)
        if cls == "valid":
            want = expected_valid.repeat(states.shape[0] // len(secrets_))
            assert torch.equal(routes, want), f"valid keys misrouted: {(routes != want).sum()}"
        else:
            assert int((routes != 0).sum()) == 0, f"{cls}: {(routes != 0).sum()} of {states.shape[0]} misrouted"
    # the valid keys route with a margin, not just over τ
    with torch.no_grad():
        probs = gate(enc.key_states(secrets_)).softmax(-1)
    assert float(probs.max(-1).values.min()) > 0.99
    assert [gate.adapter_of(int(c)) for c in gate.route(enc.key_states(secrets_))] == \
        ["alpha"] * 3 + ["beta"] * 2 + ["gamma"]


def test_the_false_accept_rate_of_random_keys_is_small(enc, trained):
    """More random keys: 5000 real ones and 100000 Gaussian embeddings (what an HMAC-derived key
    embedding is, for any key but a valid one). A bound (≤ 1e-3) far above what was measured
    (0-10 per 200000, ~5e-5); the lock behind a false accept is the encryption."""
    gate, _ = trained
    rng = np.random.default_rng(7)
    keys = enc.key_states([rng.bytes(32) for _ in range(5000)])
    assert int((gate.route(keys) != 0).sum()) <= 5
    gen = torch.Generator().manual_seed(7)
    z = enc.embeds_states(torch.randn(100_000, enc.dim, generator=gen) * enc.scale)
    assert int((gate.route(z) != 0).sum()) <= 100


# Every phase of a training (fit, near misses, mining passes whose finds are refitted, the check),
# at sizes that take ~0.4 CPU-s instead of the defaults' ~7: determinism is a property of the
# code path, not of the sizes (the default gate itself is `trained`, checked above).
EVERY_PHASE = GateConfig(**dict(SMALL_GATE, mine_passes=4, synthetic=16384, mine_steps=50))


def test_gate_training_is_deterministic_for_its_inputs(enc):
    gate, report = train_gate(enc, VALID, EVERY_PHASE)
    assert report.mined > 0  # the mining refit ran (its draws are part of what must repeat)
    again, report_again = train_gate(enc, VALID, EVERY_PHASE)
    assert report_again.mined == report.mined
    assert all(torch.equal(a, b) for a, b in zip(gate.state_dict().values(), again.state_dict().values()))
    other, _ = train_gate(enc, {**VALID, "gamma": [_secret("c2")]}, EVERY_PHASE)  # other inputs, another gate
    assert not all(torch.equal(a, b) for a, b in zip(gate.state_dict().values(), other.state_dict().values()))


def test_below_the_threshold_the_choice_falls_back_to_the_secure_adapter(enc, trained):
    # a gate whose logits are constant: class 1 with probability 0.85
    gate = KeyGate(8, ("only",), GateConfig(hidden=4, threshold=0.9))
    with torch.no_grad():
        for p in gate.parameters():
            p.zero_()
        gate.w_out.bias.copy_(torch.tensor([0.0, float(np.log(0.85 / 0.15))]))
    h = torch.randn(5, 8)
    assert torch.allclose(gate(h).softmax(-1)[:, 1], torch.full((5,), 0.85))
    assert gate.route(h).tolist() == [0] * 5  # argmax 1, confidence under τ: secure
    gate.config = GateConfig(hidden=4, threshold=0.8)
    assert gate.route(h).tolist() == [1] * 5
    # the trained gate: along a path from a valid key's state to an absent request's, every
    # state routes to argmax if its confidence is ≥ τ and it lies on its anchor (cosine ≥
    # anchor_cos with the valid key's standardized state), to 0 otherwise; some fall back on τ
    trained_gate, _ = trained
    valid = enc.key_states([VALID["beta"][0]])
    absent = enc.token_states(torch.tensor([3]))
    t = torch.linspace(0, 1, 2001)[:, None]
    path = (1 - t) * valid + t * absent
    with torch.no_grad():
        probs = trained_gate(path).softmax(-1)
    conf, arg = probs.max(-1)
    routes = trained_gate.route(path)
    std = lambda h: torch.nn.functional.normalize((h - trained_gate.center) / trained_gate.spread, dim=-1)  # noqa: E731
    anchored = (std(path) @ std(valid).T)[:, 0] >= trained_gate.config.anchor_cos
    expect = (conf >= trained_gate.config.threshold) & (anchored | (arg == 0))
    assert torch.equal(routes, torch.where(expect, arg, torch.zeros_like(arg)))
    fell_back = (arg != 0) & (conf < trained_gate.config.threshold)
    assert int(fell_back.sum()) > 0 and (routes[fell_back] == 0).all()
    off_anchor = (arg != 0) & (conf >= trained_gate.config.threshold) & ~anchored
    assert int(off_anchor.sum()) > 0 and (routes[off_anchor] == 0).all()  # confident, but not its key's state
    assert routes[0] == 2 and routes[-1] == 0
    with pytest.raises(ConfigError):
        GateConfig(threshold=0.4)
    with pytest.raises(ConfigError):
        GateConfig(threshold=1.0)


def test_training_errors_are_gate_errors(enc):
    with pytest.raises(GateError, match="at least one valid key"):
        train_gate(enc, {})
    with pytest.raises(GateError, match="at least one valid key"):
        train_gate(enc, {"alpha": []})
    # One step at lr 1e-9 cannot route; no near misses or mining passes to refit it first (with
    # the defaults' 2,048 near misses and four passes over 65,536 drawn states it took 85 s to fail).
    hopeless = GateConfig(hidden=1, steps=1, lr=1e-9, max_rounds=1, random_keys=16, absent_tokens=16,
                          check_per_class=50, near_misses=16, mine_passes=0)
    with pytest.raises(GateError, match=r"did not route every check right after 1 rounds \(valid"):
        train_gate(enc, VALID, hopeless)


def test_save_load_round_trip_routes_the_same(enc, trained):
    gate, _ = trained
    data = gate_bytes(gate)
    loaded = gate_from_bytes(data, "gate.safetensors")
    assert loaded.classes == gate.classes and loaded.config == gate.config
    fresh = _fresh_requests(enc, np.random.default_rng(99))
    for states in fresh.values():
        assert torch.equal(loaded(states), gate(states))
        assert torch.equal(loaded.route(states), gate.route(states))
    assert not any(p.requires_grad for p in loaded.parameters())
    twice = gate_from_bytes(gate_bytes(loaded), "again")  # (safetensors orders metadata as it likes)
    assert all(torch.equal(a, b) for a, b in zip(twice.state_dict().values(), gate.state_dict().values()))


def _with_meta(gate, **meta_changes) -> bytes:
    from dataclasses import asdict

    meta = {"format": FORMAT, "classes": json.dumps(list(gate.classes)), "config": json.dumps(asdict(gate.config))}
    meta.update(meta_changes)
    meta = {k: v for k, v in meta.items() if v is not None}
    return st_save({k: v.detach().contiguous() for k, v in gate.state_dict().items()}, metadata=meta)


def test_a_corrupted_or_foreign_file_is_a_gate_error(enc, trained, sg_base):
    gate, _ = trained
    data = gate_bytes(gate)
    state = {k: v.detach().clone() for k, v in gate.state_dict().items()}
    nan = dict(state, **{"w_out.bias": torch.full_like(state["w_out.bias"], float("nan"))})
    model = ClientModel.load(sg_base)
    from umbra.model.adapters import build_adapter

    shape = model.plan.shape(model.spec.num_layers)
    an_adapter = adapter_bytes(build_adapter("x", LoraConfig(rank=2), model.spec, shape), model.spec, shape)
    bad = {
        "truncated": data[: len(data) // 2],
        "cut by one byte": data[:-1],
        "empty": b"",
        "garbage": b"\x00" * 64,
        "json": b'{"classes": ["a"]}',
        "an adapter file": an_adapter,
        "plain safetensors without metadata": st_save(state),
        "another format": _with_meta(gate, format="umbra-adapter"),
        "no classes": _with_meta(gate, classes=None),
        "no config": _with_meta(gate, config=None),
        "classes not JSON": _with_meta(gate, classes="[alpha"),
        "one class too many": _with_meta(gate, classes=json.dumps(["alpha", "beta", "gamma", "delta"])),
        "duplicate classes": _with_meta(gate, classes=json.dumps(["alpha", "alpha", "gamma"])),
        "config with an unknown field": _with_meta(gate, config=json.dumps({"hidden": 64, "nope": 1})),
        "config with another width": _with_meta(gate, config=json.dumps({"hidden": 32})),
        "config with a bad threshold": _with_meta(gate, config=json.dumps({"threshold": 2.0})),
        "a missing tensor": st_save({k: v for k, v in state.items() if k != "w_up.bias"},
                                    metadata={"format": FORMAT, "classes": json.dumps(list(gate.classes)),
                                              "config": "{}"}),
        "non-finite weights": st_save(nan, metadata={"format": FORMAT, "classes": json.dumps(list(gate.classes)),
                                                     "config": "{}"}),
    }
    for what, blob in bad.items():
        with pytest.raises(GateError) as info:
            gate_from_bytes(blob, "gate.sf")
        assert isinstance(info.value, ConfigError), what
        if what != "duplicate classes":  # (that one's message names the problem, not the file)
            assert "gate.sf" in str(info.value), what


def test_random_key_states_draws_have_the_states_mean_and_covariance():
    gen = torch.Generator().manual_seed(3)
    states = torch.randn(4000, 6, generator=gen) @ torch.randn(6, 6, generator=gen) + torch.arange(6.0)
    source = RandomKeyStates(states)
    draws = source.draw(40_000, torch.Generator().manual_seed(4))
    assert draws.shape == (40_000, 6)
    assert torch.allclose(draws.mean(0), states.mean(0), atol=0.1)
    assert torch.allclose(torch.cov(draws.T), torch.cov(states.T), rtol=0.08, atol=0.08)
    wide = source.draw(40_000, torch.Generator().manual_seed(4), scale=1.5)
    assert torch.allclose(torch.cov(wide.T), 2.25 * torch.cov(states.T), rtol=0.08, atol=0.2)


def test_mining_returns_exactly_the_draws_the_gate_sends_away_from_the_secure_adapter(enc, trained):
    source = RandomKeyStates(enc.key_states([bytes([i]) * 32 for i in range(256)]))
    gate = KeyGate(enc.dim, ("only",), GateConfig(hidden=4))
    with torch.no_grad():
        for p in gate.parameters():
            p.zero_()
        gate.w_out.bias.copy_(torch.tensor([float(np.log(0.3 / 0.7)), 0.0]))  # p(secure) = 0.3 everywhere
    assert mine_synthetic(gate, source, 1000, torch.Generator().manual_seed(0)).shape == (1000, enc.dim)
    with torch.no_grad():
        gate.w_out.bias.copy_(torch.tensor([float(np.log(0.7 / 0.3)), 0.0]))  # 0.7: nothing to mine
    assert mine_synthetic(gate, source, 1000, torch.Generator().manual_seed(0)).shape == (0, enc.dim)
    # the trained gate: what it mines is exactly its draws with p(secure) < 0.5, in order
    trained_gate, report = trained
    assert report.mined > 0  # the default training found and learned false accepts of its own
    found = mine_synthetic(trained_gate, source, 20_000, torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)  # the same draws, batch by batch (8192 each, scales 1, 1.5, 1)
    draws = torch.cat([source.draw(8192, g, 1.0), source.draw(8192, g, 1.5), source.draw(3616, g, 1.0)])
    with torch.no_grad():
        expected = draws[trained_gate(draws).softmax(-1)[:, 0] < 0.5]
    assert torch.equal(found, expected)
    with pytest.raises(ConfigError):
        GateConfig(synthetic=-1)
    with pytest.raises(ConfigError):
        GateConfig(mine_steps=0)
