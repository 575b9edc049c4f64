"""tuning_traffic (umbra/attack_grid/traffic.py) made resumable: a benchmark's long tuning run
stopped part-way before the recorded window — or rerun over a window already run — with the same out_dir
returns the same losses, records the same traffic and leaves the same weights as a run never
stopped, gradient noise included (its seeded generator resumes where it stopped); the steps
before the window leave nothing in the recorder."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
import torch
from attack_world import build_world

from umbra.attack_grid.clients import Defence, build_client
from umbra.attack_grid.traffic import tuning_traffic
from umbra.attacks.recorder import RecordingMiddle
from umbra.middle.local import LocalMiddle
from umbra.tuning import TuneConfig, TuneData, tune
from umbra.tuning.client import named_parameters
from umbra.tuning.gradient_noise import GradientNoise

CONFIG = TuneConfig(steps=6, batch_size=2, context_length=32, lr=1e-3, warmup_steps=1, seed=5, checkpoint_every=2,
                    gradient_noise=GradientNoise(noise_multiplier=0.5, clip_norm=1.0))
DEFENCE = Defence(indvocab_epsilon=64.0, ltokenizer=True, stuning=True, gradient_noise=0.5)
RECORD_LAST = 2


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("traffic")
    public, _, _, _ = build_world(root)
    data = TuneData.from_corpus(root / "corpus", root / "model", CONFIG, split="train", langs=("python",))
    return public, data


def _traffic(world, out_dir=None):
    """A fresh client (as a new process builds it), tuned through a recording middle."""
    public, data = world
    client = build_client(public.dir, DEFENCE, public.plan, seed=1)
    rec = RecordingMiddle(LocalMiddle(public.middle))
    losses = asyncio.run(tuning_traffic(client, rec, data, CONFIG, record_last=RECORD_LAST, noise_seed=7,
                                        out_dir=out_dir))
    return client, rec.sequences(), losses


def _assert_same(a, b):
    (client_a, seqs_a, losses_a), (client_b, seqs_b, losses_b) = a, b
    assert losses_a == losses_b and len(losses_a) == CONFIG.steps
    assert len(seqs_a) == len(seqs_b) == RECORD_LAST * CONFIG.batch_size  # the window's steps only
    for x, y in zip(seqs_a, seqs_b):
        assert torch.equal(x.hidden, y.hidden)
    pa, pb = named_parameters(client_a), named_parameters(client_b)
    for name in pa:
        assert torch.equal(pa[name], pb[name]), name


@pytest.fixture(scope="module")
def uninterrupted(world):
    return _traffic(world)


def test_a_run_stopped_before_the_window_resumes_exactly(world, uninterrupted, tmp_path):
    public, data = world
    client = build_client(public.dir, DEFENCE, public.plan, seed=1)
    stopped = asyncio.run(tune(client, LocalMiddle(public.middle), data, replace(CONFIG, stop_at_step=3),
                               out_dir=tmp_path, noise_seed=7))
    assert stopped.state.step == 3 and not stopped.finished
    resumed = _traffic(world, tmp_path)
    _assert_same(uninterrupted, resumed)
    assert resumed[2][:3] == stopped.losses


def test_a_stale_window_is_rerun_whole(world, uninterrupted, tmp_path):
    once = _traffic(world, tmp_path)  # leaves the lead's checkpoint and a finished window behind
    _assert_same(uninterrupted, once)
    assert (tmp_path / "window").is_dir()
    _assert_same(uninterrupted, _traffic(world, tmp_path))


def test_the_noise_state_matters(world, uninterrupted, tmp_path):
    """Without its generator's state a resumed seeded run would replay the first noise draws: the
    checkpoint that lacks it is refused rather than resumed into other weights."""
    public, data = world
    client = build_client(public.dir, DEFENCE, public.plan, seed=1)
    asyncio.run(tune(client, LocalMiddle(public.middle), data, replace(CONFIG, stop_at_step=2), out_dir=tmp_path,
                     noise_seed=7))
    from umbra.tuning import checkpoint as ckpt

    path = tmp_path / ckpt.CHECKPOINT_NAME
    payload = torch.load(path, weights_only=False)
    assert "noise_generator" in payload["extra"]
    del payload["extra"]["noise_generator"]
    torch.save(payload, path)
    from umbra.errors import ConfigError

    with pytest.raises(ConfigError, match="gradient-noise state"):
        _traffic(world, tmp_path)


def test_an_unseeded_run_never_writes_its_noise_down(world, tmp_path):
    public, data = world
    client = build_client(public.dir, DEFENCE, public.plan, seed=1)
    asyncio.run(tune(client, LocalMiddle(public.middle), data, replace(CONFIG, stop_at_step=2), out_dir=tmp_path))
    from umbra.tuning import checkpoint as ckpt

    payload = torch.load(tmp_path / ckpt.CHECKPOINT_NAME, weights_only=False)
    assert "noise_generator" not in payload["extra"] and len(payload["extra"]["losses"]) == 2
