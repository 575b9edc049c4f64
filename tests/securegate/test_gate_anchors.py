"""The access gate's anchors (umbra/securegate/gate.py): a revealing route needs the request's state
on one of that adapter's valid keys' states, whatever the MLP says; a gate saved before anchors
loads and routes by the MLP and τ alone."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
import torch
from safetensors.torch import save as st_save

from umbra.errors import ConfigError
from umbra.securegate.gate import FORMAT, GateConfig, KeyGate, gate_bytes, gate_from_bytes


def test_a_revealing_route_needs_the_state_on_one_of_its_anchors():
    """A gate whose MLP sends everything to class 2 with confidence ~1: only states within
    anchor_cos of a class-2 anchor go there (a class-1 anchor does not count), the rest to the
    secure adapter; with anchor_cos 0 (or no anchors, a gate saved before them) the MLP decides."""
    gen = torch.Generator().manual_seed(3)
    gate = KeyGate(16, ("a", "b"), GateConfig(hidden=4), anchors=0)
    with torch.no_grad():
        for p in gate.parameters():
            p.zero_()
        gate.w_out.bias.copy_(torch.tensor([0.0, 0.0, 30.0]))
    keys = torch.randn(3, 16, generator=gen)
    gate.set_anchors(keys, torch.tensor([1, 2, 2]))
    others = torch.randn(200, 16, generator=gen)
    near = keys[2] + 1e-3 * torch.randn(5, 16, generator=gen)  # the same key's state, recomputed
    assert gate.route(keys).tolist() == [0, 2, 2]
    assert gate.route(near).tolist() == [2] * 5 and gate.route(others).tolist() == [0] * 200
    loaded = gate_from_bytes(gate_bytes(gate), "gate")
    assert torch.equal(loaded.anchors, gate.anchors) and loaded.route(keys).tolist() == [0, 2, 2]
    gate.config = GateConfig(hidden=4, anchor_cos=0.0)
    assert gate.route(others).tolist() == [2] * 200
    old = {k: v for k, v in gate.state_dict().items() if not k.startswith("anchor")}
    meta = {"format": FORMAT, "classes": json.dumps(["a", "b"]), "config": json.dumps(
        {k: v for k, v in asdict(GateConfig(hidden=4)).items() if k != "anchor_cos"})}
    before = gate_from_bytes(st_save({k: v.contiguous() for k, v in old.items()}, metadata=meta), "old gate")
    assert before.anchors.shape == (0, 16) and before.route(others).tolist() == [2] * 200
    with pytest.raises(ConfigError):
        GateConfig(anchor_cos=1.0)
