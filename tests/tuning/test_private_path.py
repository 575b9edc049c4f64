"""STuning with a private local path: through LocalMiddle and the real cloud service it gives
bit-identical weights (W included) for a fixed seed; W starts at zero and moves; the cloud gets
the lossy state; utility evaluation runs the same path; a run resumes exactly. The clean
residual: a step's gradients are the whole model's, its gate has its own learning rate, the cloud
receives the same message as without it, its table is the public one in the client's id order."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from server.launch import local_cloud_thread
from tests.tuning.conftest import tiny_config
from umbra.errors import ConfigError
from umbra.attacks.recorder import RecordingMiddle
from umbra.attacks.transcript import BackwardEvent, ForwardEvent
from umbra.middle.local import LocalMiddle
from umbra.middle.remote import RemoteMiddle
from umbra.model.loader import load_middle
from umbra.model.private_path import PrivatePath, split_logits
from umbra.model.private_path_config import PrivatePathConfig
from umbra.privacy.bundle import BundleConfig, init_bundle, load_bundle
from umbra.privacy.bundle_private_path import bundle_secret
from umbra.tuning.client import clean_client, defended_client, named_parameters, select_trainable
from umbra.tuning.data import TuneData
from umbra.tuning.evaluate import next_token
from umbra.tuning.loop import split_step, tune
from umbra.tuning.private_path import attach_private_path, prepare_for_tuning

PATH = PrivatePathConfig(enabled=True, noise=0.5, rank=16)
SECRET = b"tuning-test-secret-0123456789abc"
W = "private_path.local.weight"


def received(middle: RecordingMiddle) -> list[torch.Tensor]:
    """The hidden states the cloud received, one tensor per forward call."""
    return [e.hidden for e in middle.events if isinstance(e, ForwardEvent)]


def _data(base_dir, corpus_dir, config):
    return TuneData.from_corpus(corpus_dir, base_dir, config, vocab_size=512)


def _snapshot(client) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in named_parameters(client).items()}


async def test_local_and_remote_middle_give_the_same_weights(base_dir, corpus_dir, tmp_path, keystore):
    out = tmp_path / "bundle"
    init_bundle(base_dir, BundleConfig(epsilon=32.0), out, store=keystore)
    config = tiny_config(private_path=PATH)
    clients = [load_bundle(out, store=keystore) for _ in range(2)]
    for c in clients:
        prepare_for_tuning(c, config, bundle_secret(c.permutation, c.manifest.bundle_id))
    assert torch.count_nonzero(clients[0].private_path.local.weight) == 0
    local = await tune(clients[0], LocalMiddle(load_middle(base_dir)), _data(base_dir, corpus_dir, config), config)
    with local_cloud_thread(base_dir, settings={"torch_threads": 1}) as cloud:
        middle = RemoteMiddle(cloud.base_url, cloud.token, hidden_size=64)
        try:
            remote = await tune(clients[1], middle, _data(base_dir, corpus_dir, config), config)
        finally:
            await middle.aclose()
    a, b = _snapshot(clients[0]), _snapshot(clients[1])
    assert W in a and torch.count_nonzero(a[W]) > 0  # W trained with the rest of the client
    assert max((a[n] - b[n]).abs().max().item() for n in a) == 0.0
    assert local.losses == remote.losses
    assert not clients[0].private_path.training and not clients[0].private_path.local.weight.requires_grad


async def test_the_cloud_gets_the_lossy_state_and_evaluation_runs_the_path(base_dir, corpus_dir):
    config = tiny_config(steps=3, private_path=PATH)
    client = clean_client(base_dir)
    path = attach_private_path(client, PATH, SECRET)
    middle = RecordingMiddle(LocalMiddle(load_middle(base_dir)))
    data = _data(base_dir, corpus_dir, config)
    await tune(client, middle, data, config)
    ids = torch.from_numpy(data.batch(0, 0, 2)[0])
    positions = torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
    first_sent = received(middle)[0]  # step 1: the weights before any update
    assert torch.linalg.matrix_rank(first_sent.reshape(-1, 64)).item() == 16
    blocks = data.batch(0, 0, 4)[0]
    blocks_middle = load_middle(base_dir)
    with torch.no_grad():
        h = client.encoder(ids, positions)
        assert (path.send(h, path.noise_for(ids)) - h).abs().max() > 1e-2  # lossy
        logits = split_logits(client.encoder, blocks_middle, client.decoder, path, torch.from_numpy(blocks))
    target = torch.from_numpy(blocks[:, 1:])
    top1 = (logits[:, :-1].argmax(-1) == target).float().mean().item()
    metrics = next_token(client, blocks_middle, blocks, batch_size=2)
    assert metrics.top1 == pytest.approx(top1, abs=1e-9)
    client.private_path = None  # without the path the same client scores differently
    assert next_token(client, blocks_middle, blocks, batch_size=2).loss != pytest.approx(metrics.loss, abs=1e-6)


async def test_a_run_with_a_path_resumes_exactly(base_dir, corpus_dir, tmp_path):
    runs = []
    for stop in (None, 2):
        client = clean_client(base_dir)
        attach_private_path(client, PATH, SECRET)
        config = tiny_config(private_path=PATH, stop_at_step=stop)
        data, out = _data(base_dir, corpus_dir, config), tmp_path / f"run-{stop}"
        await tune(client, LocalMiddle(load_middle(base_dir)), data, config, out_dir=out)
        if stop is not None:
            fresh = clean_client(base_dir)
            attach_private_path(fresh, PATH, SECRET)
            await tune(fresh, LocalMiddle(load_middle(base_dir)), data, tiny_config(private_path=PATH), out_dir=out,
                       resume=True)
            client = fresh
        runs.append(_snapshot(client))
    assert all(torch.equal(runs[0][n], runs[1][n]) for n in runs[0])


async def test_the_path_and_the_config_must_agree(base_dir, corpus_dir):
    client = clean_client(base_dir)
    data = _data(base_dir, corpus_dir, tiny_config())
    attach_private_path(client, PATH, SECRET)
    with pytest.raises(ConfigError, match="disagree"):
        await tune(client, LocalMiddle(load_middle(base_dir)), data, tiny_config())
    assert prepare_for_tuning(client, tiny_config(), None).private_path == PATH  # the client's path wins
    with pytest.raises(ConfigError, match="cannot be changed"):
        prepare_for_tuning(client, tiny_config(private_path=PrivatePathConfig(enabled=True, noise=1.0)), None)
    with pytest.raises(ConfigError, match="already has"):
        attach_private_path(client, PATH, SECRET)
    with pytest.raises(ConfigError, match="needs its secret"):
        prepare_for_tuning(clean_client(base_dir), tiny_config(private_path=PATH), None)


# -- the clean residual -------------------------------------------------------------------------
CLEAN = PrivatePathConfig(enabled=True, residual="clean", noise=0.5, rank=16)


def _public_table(base_dir) -> torch.Tensor:
    return clean_client(base_dir).encoder.embed_tokens.weight.detach().clone()


async def test_a_clean_residual_step_gives_the_gradient_of_the_whole_model(base_dir, corpus_dir):
    """split_step's gradients (the middle's backward over the wire, −g⊙∂L/∂in on what was sent, the
    clean pass's own) equal autograd through split_logits in one graph."""
    config = tiny_config(private_path=CLEAN)
    ids = torch.from_numpy(_data(base_dir, corpus_dir, config).batch(0, 0, 2)[0])
    grads, first = [], defended_client(base_dir, 64.0, seed=b"clean-grad")
    attach_private_path(first, CLEAN, SECRET, _public_table(base_dir))
    with torch.no_grad():
        first.private_path.gate.uniform_(0.2, 1.5, generator=torch.Generator().manual_seed(0))
    for through_wire in (True, False):
        client = copy.deepcopy(first)  # the same π, table, gate
        trainable = select_trainable(client, train_embedding=False)
        middle_blocks = load_middle(base_dir)
        if through_wire:
            middle = LocalMiddle(middle_blocks)
            session = await middle.open_session(training=True)
            loss = await split_step(client, middle, session, ids)
        else:
            logits = split_logits(client.encoder, middle_blocks, client.decoder, client.private_path, ids)
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))
            loss.backward()
        grads.append({n: p.grad.clone() for n, p in trainable.items()})
    assert "private_path.gate" in grads[0] and grads[0]["private_path.gate"].abs().sum() > 0
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-5, rtol=1e-4), name


async def test_the_gate_has_its_own_learning_rate_and_the_message_is_unchanged(base_dir, corpus_dir):
    config = tiny_config(steps=3, private_path=CLEAN, gate_lr=0.05)
    client = defended_client(base_dir, 64.0, seed=b"clean-lr")
    path = attach_private_path(client, CLEAN, SECRET, _public_table(base_dir))
    data = _data(base_dir, corpus_dir, config)
    await tune(client, LocalMiddle(load_middle(base_dir)), data, config)
    moved = (path.gate.detach() - 1).abs().max().item()
    assert 0.01 < moved <= 3 * 0.05 + 1e-6  # AdamW moves it by about gate_lr per step (not the blocks' lr)
    # what the middle receives is the same with and without the clean residual, for the same weights
    local = PrivatePath(replace(CLEAN, residual="local"), 64, SECRET)
    seen = []
    for p in (path, local):
        client.private_path = p
        select_trainable(client, train_embedding=False)  # tune() left the client frozen
        middle = RecordingMiddle(LocalMiddle(load_middle(base_dir)))
        session = await middle.open_session(training=True)
        await split_step(client, middle, session, torch.from_numpy(data.batch(0, 0, 2)[0]))
        seen.append(received(middle)[0])
    assert torch.equal(seen[0], seen[1])


def test_the_clean_table_is_the_public_one_in_the_clients_order(base_dir):
    client = defended_client(base_dir, 64.0, seed=b"clean-rows")
    public = _public_table(base_dir)
    path = attach_private_path(client, CLEAN, SECRET, public)
    tokens = torch.arange(40)
    assert torch.equal(path.clean_embed[client.permutation.to_private(tokens)], public[tokens])
    assert not torch.equal(path.clean_embed, client.encoder.embed_tokens.weight)  # not the INDVocab table
    with pytest.raises(ConfigError, match="needs the base model's public embedding table"):
        attach_private_path(clean_client(base_dir), CLEAN, SECRET)
    with pytest.raises(ConfigError, match="not this client's base model"):
        attach_private_path(clean_client(base_dir), CLEAN, SECRET, public[:10])


class _ZeroBackward:
    """A middle whose backward returns a zero gradient: what forward-only tuning must equal."""

    def __init__(self, inner):
        self.inner = inner

    async def open_session(self, **kwargs):
        return await self.inner.open_session(**kwargs)

    async def forward(self, *args, **kwargs):
        return await self.inner.forward(*args, **kwargs)

    async def backward(self, grad_out, session):
        return torch.zeros_like(grad_out)


async def test_forward_only_sends_no_gradient_and_the_encoder_learns_through_the_clean_path(base_dir, corpus_dir):
    config = tiny_config(private_path=CLEAN, cloud_backward=False)
    ids = torch.from_numpy(_data(base_dir, corpus_dir, config).batch(0, 0, 2)[0])
    first = defended_client(base_dir, 64.0, seed=b"forward-only")
    attach_private_path(first, CLEAN, SECRET, _public_table(base_dir))
    grads = []
    for cloud_backward in (False, True):
        client = copy.deepcopy(first)
        trainable = select_trainable(client, train_embedding=False)
        inner = RecordingMiddle(LocalMiddle(load_middle(base_dir)))
        middle = inner if not cloud_backward else _ZeroBackward(inner)
        session = await middle.open_session(training=True)
        await split_step(client, middle, session, ids, cloud_backward=cloud_backward)
        if not cloud_backward:
            assert not any(isinstance(e, BackwardEvent) for e in inner.events) and received(inner)
        grads.append({n: p.grad.clone() for n, p in trainable.items() if p.grad is not None})
    # forward only = a cloud whose gradient is zero: the encoder's gradient is the clean pass's and
    # −g⊙∂L/∂in on what was sent, nothing from the middle
    assert grads[0].keys() == grads[1].keys() and any(n.startswith("encoder.") for n in grads[0])
    for name in grads[0]:
        assert torch.equal(grads[0][name], grads[1][name]), name
    # and tune() runs it: no backward reaches the cloud, the encoder moves
    client = copy.deepcopy(first)
    before = _snapshot(client)
    middle = RecordingMiddle(LocalMiddle(load_middle(base_dir)))
    await tune(client, middle, _data(base_dir, corpus_dir, config), config)
    assert not any(isinstance(e, BackwardEvent) for e in middle.events)
    after = _snapshot(client)
    assert any(not torch.equal(before[n], after[n]) for n in before if n.startswith("encoder."))


def test_forward_only_is_checked_and_leaves_earlier_records_unchanged():
    from umbra.tuning.config import TuneConfig
    from umbra.tuning.gradient_noise import GradientNoise

    assert "cloud_backward" not in TuneConfig().to_dict()  # every earlier record, key and checkpoint
    off = tiny_config(private_path=CLEAN, cloud_backward=False).validate()
    assert off.to_dict()["cloud_backward"] is False and TuneConfig.from_dict(off.to_dict()) == off
    with pytest.raises(ConfigError, match="needs the private local path"):
        tiny_config(cloud_backward=False).validate()
    with pytest.raises(ConfigError, match="sends none"):
        tiny_config(private_path=CLEAN, cloud_backward=False, gradient_noise=GradientNoise(0.1)).validate()
