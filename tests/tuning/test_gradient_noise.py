"""Clip-and-noise of the gradient sent during STuning: the message is clipped per sequence and
noised from an unpredictable source, only the message changes (the decoder still learns from the
exact gradient), the accounting is the Gaussian mechanism's, and the knob reaches the loop."""

from __future__ import annotations

import math

import pytest
import torch

from tests.tuning.conftest import tiny_config
from umbra.errors import ConfigError
from umbra.middle.local import LocalMiddle
from umbra.model.loader import load_middle
from umbra.tuning.client import clean_client, named_parameters
from umbra.tuning.config import TuneConfig
from umbra.tuning.data import TuneData
from umbra.tuning.gradient_noise import GradientNoise
from umbra.tuning.loop import split_step, tune


def _grad(b=4, t=16, d=8, seed=0) -> torch.Tensor:
    return torch.randn(b, t, d, generator=torch.Generator().manual_seed(seed)) * 0.01


def test_off_sends_the_exact_gradient():
    g = _grad()
    assert GradientNoise().apply(g, torch.Generator()) is g
    assert not GradientNoise().enabled and GradientNoise().message_epsilon() == math.inf


def test_each_sequence_is_clipped_to_the_bound():
    g = _grad()
    g[1] *= 100  # one loud sequence
    norms = (g * g.shape[0]).flatten(1).norm(dim=1)
    clip = float(norms[0])  # the quiet ones sit near this; the loud one far above
    sent = GradientNoise(noise_multiplier=1e-9, clip_norm=clip).apply(g, torch.Generator().manual_seed(0))
    out = (sent * g.shape[0]).flatten(1).norm(dim=1)
    assert torch.all(out <= clip * (1 + 1e-4)), (out, clip)
    assert out[1] == pytest.approx(clip, rel=1e-4)  # scaled down to the bound, direction kept
    cos = torch.nn.functional.cosine_similarity(sent[1].flatten(), g[1].flatten(), dim=0)
    assert cos > 0.9999
    small = norms <= clip
    assert torch.allclose(sent[small], g[small], atol=1e-9)  # under the bound: untouched (up to 1e-9 noise)


def test_noise_has_the_stated_scale_and_depends_on_the_seed():
    g = torch.zeros(2, 64, 64)
    cfg = GradientNoise(noise_multiplier=0.5, clip_norm=2.0)
    a = cfg.apply(g, torch.Generator().manual_seed(1))
    b = cfg.apply(g, torch.Generator().manual_seed(1))
    c = cfg.apply(g, torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert float(a.std()) == pytest.approx(0.5 * 2.0 / 2, rel=0.05)  # σ·C, divided back by the batch
    assert float(a.mean()) == pytest.approx(0.0, abs=0.02)


def test_default_generators_are_unpredictable():
    cfg = GradientNoise(noise_multiplier=1.0)
    x = cfg.apply(torch.zeros(1, 4, 4), cfg.generator())
    y = cfg.apply(torch.zeros(1, 4, 4), cfg.generator())
    assert not torch.equal(x, y)
    assert cfg.generator(7).initial_seed() == 7


@pytest.mark.parametrize("bad", [dict(noise_multiplier=-1.0), dict(noise_multiplier=math.nan),
                                 dict(noise_multiplier=math.inf), dict(clip_norm=0.0), dict(clip_norm=-2.0)])
def test_bad_settings_are_rejected(bad):
    with pytest.raises(ConfigError):
        GradientNoise(**bad).validate()
    with pytest.raises(ConfigError):
        TuneConfig(gradient_noise=GradientNoise(**bad)).validate()


def test_message_epsilon_is_the_gaussian_rdp_bound():
    eps = [GradientNoise(noise_multiplier=s).message_epsilon(1e-5) for s in (0.5, 1.0, 2.0, 8.0)]
    assert all(a > b > 0 for a, b in zip(eps, eps[1:]))  # more noise, smaller ε
    cfg = GradientNoise(noise_multiplier=4.0)
    assert cfg.message_epsilon(1e-5, k=4) > cfg.message_epsilon(1e-5, k=1)  # messages compose
    # never looser than the plain RDP -> (ε, δ) conversion for noise multiplier σ/2 (sensitivity 2C)
    z = 4.0 / 2
    plain = min(a / (2 * z * z) + math.log(1e5) / (a - 1) for a in [1 + x / 10 for x in range(1, 2000)])
    assert cfg.message_epsilon(1e-5) <= plain + 1e-9
    with pytest.raises(ConfigError):
        cfg.message_epsilon(0.0)


def test_config_round_trip_and_old_checkpoints():
    cfg = TuneConfig(gradient_noise=GradientNoise(0.3, 0.02))
    assert TuneConfig.from_dict(cfg.to_dict()) == cfg
    old = TuneConfig().to_dict()
    del old["gradient_noise"]  # a checkpoint written before the knob existed
    assert TuneConfig.from_dict(old) == TuneConfig()


class _Capture(LocalMiddle):
    """LocalMiddle that keeps what the cloud would receive in backward."""

    def __init__(self, blocks):
        super().__init__(blocks)
        self.received: list[torch.Tensor] = []

    async def backward(self, grad_output, session):
        self.received.append(grad_output.detach().clone())
        return await super().backward(grad_output, session)


async def test_only_the_message_changes(base_dir):
    """Same client, same batch: with noise the cloud receives a different gradient and the
    encoder learns from the noisy reply, but the decoder's gradients are exactly the clean ones."""
    ids = torch.randint(5, 500, (2, 24), generator=torch.Generator().manual_seed(0))
    grads = []
    for noise in (None, GradientNoise(noise_multiplier=0.5, clip_norm=1e-3)):
        client = clean_client(base_dir)
        client.encoder.requires_grad_(True)
        client.decoder.requires_grad_(True)
        middle = _Capture(load_middle(base_dir))
        session = await middle.open_session(training=True)
        await split_step(client, middle, session, ids, noise, torch.Generator().manual_seed(0))
        grads.append(({n: p.grad.clone() for n, p in named_parameters(client).items() if p.grad is not None},
                      middle.received[0]))
    (clean, sent_clean), (noisy, sent_noisy) = grads
    assert not torch.equal(sent_clean, sent_noisy)
    dec = [n for n in clean if n.startswith("decoder.")]
    enc = [n for n in clean if n.startswith("encoder.stack.")]
    assert dec and enc
    assert all(torch.equal(clean[n], noisy[n]) for n in dec)
    assert not all(torch.equal(clean[n], noisy[n]) for n in enc)


async def test_split_step_refuses_noise_without_a_generator(base_dir):
    client = clean_client(base_dir)
    client.encoder.requires_grad_(True)
    client.decoder.requires_grad_(True)
    middle = LocalMiddle(load_middle(base_dir))
    session = await middle.open_session(training=True)
    with pytest.raises(ConfigError, match="generator"):
        await split_step(client, middle, session, torch.randint(5, 500, (1, 8)), GradientNoise(1.0), None)


async def test_tune_with_noise_is_reproducible_only_with_a_fixed_seed(base_dir, corpus_dir):
    config = tiny_config(steps=3, gradient_noise=GradientNoise(noise_multiplier=0.5, clip_norm=1e-3))
    data = TuneData.from_corpus(corpus_dir, base_dir, config, vocab_size=512)

    async def run(seed):
        client = clean_client(base_dir)
        await tune(client, LocalMiddle(load_middle(base_dir)), data, config, noise_seed=seed)
        return {n: p.detach().clone() for n, p in named_parameters(client).items()}

    a, b, c = await run(11), await run(11), await run(None)
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert not all(torch.equal(a[n], c[n]) for n in a if n.startswith("encoder.stack."))
