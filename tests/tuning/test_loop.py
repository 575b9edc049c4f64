"""The STuning loop: one code path through LocalMiddle and the real cloud service gives the same
client weights for the same seed; labels are private; only client parameters move."""

from __future__ import annotations

import pytest
import torch

from server.launch import local_cloud_thread
from tests.tuning.conftest import tiny_config
from umbra.errors import ConfigError
from umbra.middle.local import LocalMiddle
from umbra.middle.remote import RemoteMiddle
from umbra.model.loader import load_middle
from umbra.privacy.bundle import BundleConfig, init_bundle, load_bundle
from umbra.tuning.client import EMBEDDING, clean_client, named_parameters
from umbra.tuning.data import TuneData
from umbra.tuning.loop import tune


@pytest.fixture
def bundle_dir(base_dir, tmp_path, keystore):
    out = tmp_path / "bundle"
    init_bundle(base_dir, BundleConfig(epsilon=32.0), out, store=keystore)
    return out


def _data(base_dir, corpus_dir, config):
    return TuneData.from_corpus(corpus_dir, base_dir, config, vocab_size=512)


def _snapshot(client) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in named_parameters(client).items()}


async def test_local_and_remote_middle_give_the_same_weights(base_dir, corpus_dir, bundle_dir, keystore):
    config = tiny_config()
    local_client = load_bundle(bundle_dir, store=keystore)
    remote_client = load_bundle(bundle_dir, store=keystore)
    before = _snapshot(local_client)
    local = await tune(local_client, LocalMiddle(load_middle(base_dir)), _data(base_dir, corpus_dir, config), config)
    with local_cloud_thread(base_dir, settings={"torch_threads": 1}) as cloud:
        middle = RemoteMiddle(cloud.base_url, cloud.token, hidden_size=64)
        try:
            remote = await tune(remote_client, middle, _data(base_dir, corpus_dir, config), config)
            sent = middle.stats.bytes_sent
        finally:
            await middle.aclose()
    assert local.finished and remote.finished and len(local.losses) == 5
    assert local.state.tokens_seen == 5 * 2 * 32 and sent > 5 * 2 * (2 * 32 * 64 * 4)  # hidden + grad frames
    a, b = _snapshot(local_client), _snapshot(remote_client)
    worst = max((a[n] - b[n]).abs().max().item() for n in a)
    assert worst == 0.0, worst  # bit-identical: fp32 wire, one compute thread on both sides
    assert local.losses == remote.losses
    assert torch.equal(a[EMBEDDING], before[EMBEDDING])  # the INDVocab table is frozen by default
    moved = [n for n in a if not torch.equal(a[n], before[n])]
    assert "decoder.lm_head.weight" in moved and "decoder.norm.weight" in moved
    assert any(n.startswith("encoder.stack.") for n in moved) and any(n.startswith("decoder.stack.") for n in moved)
    assert all(not p.requires_grad for p in named_parameters(local_client).values())


async def test_tuning_lowers_the_loss_and_can_train_the_table(base_dir, corpus_dir, bundle_dir, keystore):
    config = tiny_config(steps=12, train_embedding=True)
    client = load_bundle(bundle_dir, store=keystore)
    table = client.encoder.embed_tokens.weight.detach().clone()
    result = await tune(client, LocalMiddle(load_middle(base_dir)), _data(base_dir, corpus_dir, config), config)
    assert sum(result.losses[-3:]) < sum(result.losses[:3])
    assert not torch.equal(client.encoder.embed_tokens.weight, table)


async def test_private_labels_equal_the_public_model_at_infinite_epsilon(base_dir, corpus_dir, tmp_path, keystore):
    """With ε = ∞ the bundle is the public model relabelled by π: STuning it is fClean up to
    float summation order — same losses, same blocks, LM head rows permuted."""
    out = tmp_path / "inf"
    init_bundle(base_dir, BundleConfig(epsilon=float("inf")), out, store=keystore)
    config = tiny_config(steps=3)
    private = load_bundle(out, store=keystore)
    public = clean_client(base_dir)
    r1 = await tune(private, LocalMiddle(load_middle(base_dir)), _data(base_dir, corpus_dir, config), config)
    r2 = await tune(public, LocalMiddle(load_middle(base_dir)), _data(base_dir, corpus_dir, config), config)
    assert r1.losses == pytest.approx(r2.losses, abs=1e-5)
    head = private.decoder.lm_head.weight[torch.from_numpy(private.permutation.forward.copy())]
    assert torch.allclose(head, public.decoder.lm_head.weight, atol=1e-5)
    assert torch.allclose(private.decoder.stack.layers[0].mlp.up_proj.weight,
                          public.decoder.stack.layers[0].mlp.up_proj.weight, atol=1e-5)


async def test_bad_settings_are_config_errors(base_dir, corpus_dir, bundle_dir, keystore, tmp_path):
    client = load_bundle(bundle_dir, store=keystore)
    middle = LocalMiddle(load_middle(base_dir))
    data = _data(base_dir, corpus_dir, tiny_config())
    with pytest.raises(ConfigError, match="context_length 4096 exceeds"):
        await tune(client, middle, data, tiny_config(context_length=4096))
    with pytest.raises(ConfigError, match="steps must be >= 1"):
        await tune(client, middle, data, tiny_config(steps=0))
    with pytest.raises(ConfigError, match="resume needs"):
        await tune(client, middle, data, tiny_config(), resume=True)
    with pytest.raises(ConfigError, match="no tuning checkpoint"):
        await tune(client, middle, data, tiny_config(), out_dir=tmp_path / "none", resume=True)
