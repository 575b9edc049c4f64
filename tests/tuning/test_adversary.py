"""STuning with an adversary in the loop: the penalty lowers what the in-loop probe reads from the
sent states, and what a fresh probe trained afterwards on held-out traffic reads; monitoring alone
changes nothing; the probe resumes exactly from a checkpoint."""

from __future__ import annotations

import pytest
import torch

from tests.tuning.conftest import tiny_config
from umbra.errors import ConfigError
from umbra.middle.local import LocalMiddle
from umbra.model.loader import load_middle
from umbra.tuning.adversary import AdversaryConfig, InLoopAdversary
from umbra.tuning.client import clean_client, defended_client, named_parameters
from umbra.tuning.config import TuneConfig
from umbra.tuning.data import TuneData
from umbra.tuning.loop import tune, model_ids

STEPS = 60


def _config(weight: float, **kw) -> TuneConfig:
    probe = AdversaryConfig(weight=weight, monitor=True, hidden=0, window=0, inner_steps=2, lr=3e-3)
    return tiny_config(steps=STEPS, checkpoint_every=100, adversary=probe, **kw)


def _data(base_dir, corpus_dir, config, split="train"):
    return TuneData.from_corpus(corpus_dir, base_dir, config, vocab_size=512, split=split)


def _fresh_probe_accuracy(client, base_dir, corpus_dir, config) -> float:
    """A probe trained AFTER tuning on the sent states of train blocks, scored on the test split."""
    attacker = InLoopAdversary(AdversaryConfig(monitor=True, hidden=0, window=0, lr=3e-3, seed=9), 64, 512)
    train, test = _data(base_dir, corpus_dir, config), _data(base_dir, corpus_dir, config, "test")

    def sent(blocks):
        ids = model_ids(client, blocks)
        with torch.no_grad():
            return client.encoder(ids, torch.arange(ids.shape[1]).expand(ids.shape[0], -1)), torch.from_numpy(blocks)

    x, y = sent(train.batch(0, 0, 64)[0])
    for _ in range(60):
        attacker.train_on(x, y)
    xt, yt = sent(test.batch(0, 0, 12)[0])
    attacker.train_on(xt, yt)  # its accuracy is taken before it learns from these
    return attacker.last_accuracy


async def test_the_penalty_lowers_what_probes_read(base_dir, corpus_dir):
    results = {}
    for weight in (0.0, 5.0):
        config = _config(weight)
        client = defended_client(base_dir, 1e9, seed=1)  # a table that keeps the public geometry: readable
        r = await tune(client, LocalMiddle(load_middle(base_dir)), _data(base_dir, corpus_dir, config), config)
        q = STEPS // 4
        results[weight] = (sum(r.probe_accuracy[-q:]) / q, _fresh_probe_accuracy(client, base_dir, corpus_dir, config),
                           sum(r.losses[-q:]) / q)
        assert len(r.probe_accuracy) == STEPS
    (in_loop_off, fresh_off, _), (in_loop_on, fresh_on, loss_on) = results[0.0], results[5.0]
    assert in_loop_off > 0.35 and in_loop_on < in_loop_off - 0.15, results
    assert fresh_on < fresh_off - 0.05, results
    assert loss_on < 5.5, results  # the model still learns


async def test_monitoring_alone_does_not_change_the_client(base_dir, corpus_dir):
    weights = []
    for adversary in (AdversaryConfig(), AdversaryConfig(monitor=True, hidden=16, window=1)):
        config = tiny_config(steps=4, adversary=adversary)
        client = clean_client(base_dir)
        await tune(client, LocalMiddle(load_middle(base_dir)), _data(base_dir, corpus_dir, config), config)
        weights.append({n: p.detach().clone() for n, p in named_parameters(client).items()})
    assert all(torch.equal(weights[0][n], weights[1][n]) for n in weights[0])


async def test_the_probe_resumes_exactly(base_dir, corpus_dir, tmp_path):
    probe = AdversaryConfig(weight=2.0, hidden=16, window=1)
    runs = []
    for stop in (None, 3):
        client = clean_client(base_dir)
        config = tiny_config(steps=6, adversary=probe, stop_at_step=stop)
        out = tmp_path / f"run-{stop}"
        data = _data(base_dir, corpus_dir, config)
        r = await tune(client, LocalMiddle(load_middle(base_dir)), data, config, out_dir=out)
        if stop is not None:
            r = await tune(client, LocalMiddle(load_middle(base_dir)), data, tiny_config(steps=6, adversary=probe),
                           out_dir=out, resume=True)
        runs.append((r.probe_accuracy[-3:], {n: p.detach().clone() for n, p in named_parameters(client).items()}))
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(runs[0][1][n], runs[1][1][n]) for n in runs[0][1])


def test_config_is_validated_and_round_trips():
    with pytest.raises(ConfigError, match="finite number"):
        AdversaryConfig(weight=-1).validate()
    with pytest.raises(ConfigError, match="inner_steps"):
        AdversaryConfig(inner_steps=0).validate()
    config = TuneConfig(adversary=AdversaryConfig(weight=3.0, hidden=8))
    assert config.to_dict()["adversary"]["enabled"] is True
    assert TuneConfig.from_dict(config.to_dict()) == config
    assert not AdversaryConfig(monitor=True).enabled and AdversaryConfig(monitor=True).active
