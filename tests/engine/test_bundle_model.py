"""ClientModel.from_bundle: completion with a client bundle (private ids, INDVocab table, permuted
head) in-process, through the real cloud service and through `umbra complete --bundle`."""

from __future__ import annotations

import json
import math
import subprocess

import pytest
import torch

from cli_helpers import umbra_in_process
from keyring_fixture import keystore, secret_service  # noqa: F401  (pytest fixtures)
from server.launch import local_cloud_thread
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig
from umbra.errors import ConfigError
from umbra.middle.local import LocalMiddle
from umbra.middle.remote import RemoteMiddle
from umbra.privacy.bundle import BundleConfig, init_bundle

PREFIX = "def greet(name):\n    message = 'hello ' + name\n    "
SUFFIX = "\n    return message\n"
CONFIG = EngineConfig(stop=StopConfig(max_tokens=8, multiline=True))


@pytest.fixture
def bundle_inf(tiny_dir, tmp_path, keystore):
    out = tmp_path / "bundle-inf"
    init_bundle(tiny_dir, BundleConfig(epsilon=math.inf), out, store=keystore)
    return out


@pytest.fixture
def bundle_eps(tiny_dir, tmp_path, keystore):
    out = tmp_path / "bundle-eps"
    init_bundle(tiny_dir, BundleConfig(epsilon=16.0), out, store=keystore)
    return out


def test_private_id_surface(bundle_inf, keystore, client_model):
    model = ClientModel.from_bundle(bundle_inf, store=keystore)
    perm, pub, tok = model.bundle.permutation, client_model.tokenizer, model.tokenizer
    assert tok.private and not pub.private and "forward" not in repr(tok) + repr(model)
    text = "def add(a, b):\n    return a + b\n"
    assert tok.encode(text) == perm.to_private(pub.encode(text))
    assert tok.decode(tok.encode(text)) == text
    assert tok.special_ids == frozenset(perm.to_private(sorted(pub.special_ids)))
    assert tok.eos_ids == frozenset(perm.to_private(sorted(pub.eos_ids)))
    assert (model.fim.prefix_id, model.fim.middle_id) == perm.to_private((client_model.fim.prefix_id,
                                                                          client_model.fim.middle_id))
    assert model.fim.stop_ids == frozenset(perm.to_private(sorted(client_model.fim.stop_ids)))
    v = model.spec.vocab_size
    private_mask, public_mask = tok.vocab_mask(v), pub.vocab_mask(v)
    assert torch.equal(private_mask[perm.to_private(torch.arange(v))], public_mask)
    assert model.checkpoint is None and model.plan == client_model.plan


async def test_infinite_epsilon_bundle_completes_like_the_public_model(bundle_inf, keystore, client_model):
    """At ε = ∞ the bundle is the public model relabelled by π: same text, tokens π(public)."""
    model = ClientModel.from_bundle(bundle_inf, store=keystore)
    plain = await CompletionEngine.split(client_model, LocalMiddle(client_model.load_middle()), CONFIG).complete(
        PREFIX, SUFFIX)
    private = await CompletionEngine.split(model, LocalMiddle(model.load_middle()), CONFIG).complete(PREFIX, SUFFIX)
    assert plain.generated_tokens > 0
    assert private.text == plain.text
    assert list(private.tokens) == model.bundle.permutation.to_private(list(plain.tokens))


async def test_bundle_through_the_real_cloud_matches_in_process(bundle_eps, keystore, tiny_dir):
    model = ClientModel.from_bundle(bundle_eps, store=keystore)
    local = await CompletionEngine.monolithic(model, CONFIG).complete(PREFIX, SUFFIX)
    with local_cloud_thread(tiny_dir, model.plan, settings={"torch_threads": 1}) as cloud:
        middle = RemoteMiddle(cloud.base_url, cloud.token, hidden_size=model.spec.hidden_size)
        try:
            info = await middle.connect()
            engine = CompletionEngine.split(model, middle, CONFIG, context_length=info["max_seq_len"])
            remote = await engine.complete(PREFIX, SUFFIX)
        finally:
            await middle.aclose()
    assert remote.text == local.text and remote.tokens == local.tokens and remote.generated_tokens > 0


def test_wrong_base_model_is_refused(bundle_eps, keystore, tmp_path):
    from tiny_models import build_tiny_model_dir

    other = tmp_path / "other-base"
    build_tiny_model_dir(other, family="qwen2-tied", style="starcoder", seed=7)
    model = ClientModel.from_bundle(bundle_eps, other, store=keystore)
    with pytest.raises(ConfigError, match="not the base model this bundle was made from"):
        model.load_middle()


def _umbra(*args, env=None) -> subprocess.CompletedProcess:
    """`umbra complete ARGS` in-process (tests/cli_helpers.py; env entries set to None are unset):
    the console program in a subprocess, with the cloud it starts as its child, is
    tests/cli/test_complete.py::test_split_through_a_self_started_cloud_prints_the_same_as_local."""
    return umbra_in_process("complete", *args, env=env)


def test_cli_bundle_split_through_a_self_started_cloud_equals_local(bundle_eps, keystore, tmp_path):
    src = tmp_path / "greet.py"
    src.write_text(PREFIX + SUFFIX)
    pos = f"{src}:3:5"
    gen = ["--max-tokens", "6", "--multiline", "--threads", "1", "--json", "--service", keystore.service]
    no_cloud = {"UMBRA_CLOUD_URL": None, "UMBRA_CLOUD_TOKEN": None}
    split = _umbra(pos, "--bundle", bundle_eps, *gen, env={**no_cloud, "UMBRA_BUNDLE": None})
    # UMBRA_BUNDLE names the bundle whatever the mode (complete_cmd's _load_model): read here on the
    # local path, so that one self-started cloud serves the test (each is a process with torch of its own)
    by_env = _umbra(pos, "--local", *gen, env={"UMBRA_BUNDLE": str(bundle_eps)})
    local = _umbra(pos, "--bundle", bundle_eps, "--local", *gen, env={"UMBRA_BUNDLE": None})
    for r in (split, by_env, local):
        assert r.returncode == 0, r.stderr
    a, b, c = (json.loads(r.stdout) for r in (split, by_env, local))
    assert a["completion"] == b["completion"] == c["completion"]
    assert a["generated_tokens"] == c["generated_tokens"] > 0 and a["template"] == "starcoder"
    assert (a["mode"], b["mode"], c["mode"]) == ("split", "monolithic", "monolithic")
    refused = _umbra(pos, "--bundle", bundle_eps, "-E", "1", "-D", "2", "--local", *gen)
    assert refused.returncode == 2 and "a bundle fixes the split" in refused.stderr
