"""The access gate inside a real bundle (umbra/securegate/gate.py with bundle_access.py): the key
position's state is position 0 of `[KEY] prompt` through the bundle's encoder, the gating pass
never touches the Middle (with a key or without), and the bundle's gate file matches its manifest
and routes its keys. The gate's training and routing alone: test_gate.py."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
import torch

from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig
from umbra.model.adapters import BottleneckConfig, LoraConfig
from umbra.privacy.bundle import BundleConfig, init_bundle, load_bundle
from umbra.privacy.bundle_adapters import add_adapter, bundle_shape
from umbra.privacy.manifest import Manifest
from umbra.securegate.bundle_access import add_revealing_adapter, create_key
from umbra.securegate.gate import KEY_CLASSES, GateConfig, KeyEncoder, gate_from_bytes
from umbra.securegate.key_embedding import key_embeddings

from .helpers import SMALL_GATE, make_adapter


class RaisingMiddle:
    """A Middle (umbra/middle/protocol.py) that must never be called."""

    def __init__(self, hidden_size: int):
        self.hidden_size = hidden_size
        self.calls: list[str] = []

    def _no(self, name):
        self.calls.append(name)
        raise RuntimeError(f"the gating pass called Middle.{name}")

    async def open_session(self, *, training: bool = False) -> str:
        self._no("open_session")

    async def forward(self, hidden, positions, session, key_padding=None):
        self._no("forward")

    async def backward(self, grad_out, session):
        self._no("backward")

    async def truncate(self, session, length):
        self._no("truncate")

    async def close(self, session):
        self._no("close")

    async def aclose(self):
        self._no("aclose")


@pytest.fixture(scope="module")
def bundle(sg_base, sg_tmp, stores, needles):
    store = stores()
    out = sg_tmp("sg-gate-bundle") / "bundle"
    init_bundle(sg_base, BundleConfig(epsilon=13.0), out, store=store)
    add_adapter(out, make_adapter(out, "secure", BottleneckConfig(size=8), seed=1), role="secure")
    team = make_adapter(out, "team", LoraConfig(rank=4), seed=2)
    needles.adapter(team, bundle_dir=out)
    k1 = needles.key(add_revealing_adapter(out, team, "team-1", store, gate_config=GateConfig(**SMALL_GATE)))
    k2 = needles.key(create_key(out, "team-2", "team", store, gate_config=GateConfig(**SMALL_GATE)))
    needles.sealed_in(out)
    return out, store, (k1, k2)


def test_the_key_state_is_position_0_of_key_then_prompt(bundle):
    """With causal attention, the encoder's output at the key position of `[KEY] prompt` is the
    gating pass's state, whatever the prompt and its length."""
    out, store, (k1, _) = bundle
    b = load_bundle(out, store=store)
    enc = KeyEncoder(b.encoder, b.manifest.bundle_id)
    alone = enc.key_states([k1.secret])[0]
    emb = key_embeddings([k1.secret], b.manifest.bundle_id, enc.dim, enc.scale)[0]
    gen = torch.Generator().manual_seed(5)
    for length in (1, 7, 40):
        prompt = torch.randint(0, b.spec.vocab_size, (1, length), generator=gen)
        embeds = torch.cat([emb[None, None], b.encoder.embed(prompt)], dim=1)
        with torch.no_grad():
            states = b.encoder(None, torch.arange(length + 1)[None], embeds=embeds)
        assert torch.allclose(states[0, 0], alone, atol=1e-5, rtol=1e-5), length
        # and the prompt after the key does see the key (the state at the last position differs)
        with torch.no_grad():
            no_key = b.encoder(prompt, torch.arange(length)[None])
        assert not torch.allclose(states[0, -1], no_key[0, -1], atol=1e-3)
    # the state is the encoder's, not the raw embedding
    assert not torch.allclose(alone, emb.float(), atol=1e-3)


def test_the_gating_pass_never_calls_the_middle(bundle, sg_base, stores):
    out, store, (k1, k2) = bundle
    from umbra.middle.protocol import Middle

    model = ClientModel.from_bundle(out, sg_base, store=store)
    middle = RaisingMiddle(model.spec.hidden_size)
    assert isinstance(middle, Middle)
    engine = CompletionEngine.split(model, middle, EngineConfig(stop=StopConfig(max_tokens=4)))
    for language in ("python", None, "go"):
        route, adapters = engine.route(language)
        assert route.revealing == "team" and "team" in adapters.names and route.access == "revealing: team"
    assert model.unlock() == "team"
    # a user without a key runs the same pass (the empty key), still without the Middle
    bare = stores()
    perm_entries = [n for n in store.list() if n.startswith("bundle/")]
    for name in perm_entries:
        bare.set(name, store.get(name))
    nokey = ClientModel.from_bundle(out, sg_base, store=bare)
    engine2 = CompletionEngine.split(nokey, middle, EngineConfig(stop=StopConfig(max_tokens=4)))
    route, adapters = engine2.route("python")
    assert route.revealing is None and route.access == "secure" and "secure" in adapters.names
    assert middle.calls == []
    # the positive control: a completion does call it (so the Middle above would have noticed)
    with pytest.raises(RuntimeError, match="Middle"):
        asyncio.run(engine.complete("def f(x):\n    return ", "\n", language="python"))
    assert middle.calls


def test_the_bundle_gate_file_matches_the_manifest_and_routes_its_keys(bundle):
    out, store, (k1, k2) = bundle
    m = Manifest.read(out)
    gate_entry = m.access["gate"]
    data = (out / gate_entry["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == gate_entry["sha256"]
    gate = gate_from_bytes(data, gate_entry["file"])
    assert list(gate.classes) == gate_entry["classes"] == ["team"]
    assert gate_entry["report"]["accuracy"] == {c: 1.0 for c in KEY_CLASSES}
    enc = KeyEncoder(load_bundle(out, store=store).encoder, m.bundle_id)
    assert gate.route(enc.key_states([k1.secret, k2.secret])).tolist() == [1, 1]
    assert gate.route(enc.key_states([b""])).tolist() == [0]
    spec, shape = bundle_shape(out, m)
    assert spec.hidden_size == enc.dim


