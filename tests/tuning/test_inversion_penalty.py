"""The inversion penalty of STuning: the simulated attacker's probability of the true token, its
re-indexing into private ids, and that tuning with it leaves the encoder's states harder to invert
by the public codebook than the same tuning without it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.tuning.conftest import tiny_config
from umbra.errors import ConfigError
from umbra.middle.local import LocalMiddle
from umbra.model.loader import load_middle
from umbra.privacy.ltokenizer import Permutation
from umbra.tuning.client import clean_client, defended_client
from umbra.tuning.config import TuneConfig
from umbra.tuning.data import TuneData
from umbra.tuning.inversion_penalty import InversionPenalty, model_order, own_codebook, penalty
from umbra.tuning.loop import tune


def test_penalty_is_the_attackers_probability_of_the_truth():
    book = F.normalize(torch.randn(10, 8, generator=torch.Generator().manual_seed(0)), dim=-1)
    ids = torch.tensor([[3, 7, 1]])
    on_target = book[ids].clone().requires_grad_(True)  # states exactly at their tokens' centroids
    p = penalty(on_target, ids, book, temperature=0.01)
    assert p.item() > 0.99
    p.backward()
    assert on_target.grad is not None and on_target.grad.abs().sum() > 0
    off = penalty(book[torch.tensor([[4, 2, 9]])], ids, book, temperature=0.01)
    assert off.item() < 0.01


def test_model_order_follows_the_permutation():
    book = torch.arange(12.0).reshape(6, 2)
    perm = Permutation(np.array([2, 0, 5, 1, 3, 4]))
    private = model_order(book, perm)
    for t in range(6):  # row π(t) of the private codebook is the centroid of public token t
        assert torch.equal(private[int(perm.to_private(np.array([t]))[0])], book[t])
    assert model_order(book, None) is book


@pytest.mark.parametrize("bad", [dict(weight=-1.0), dict(weight=float("inf")), dict(temperature=0.0),
                                 dict(codebook_blocks=0)])
def test_bad_settings_are_rejected(bad):
    with pytest.raises(ConfigError):
        TuneConfig(inversion_penalty=InversionPenalty(**bad)).validate()


def test_config_round_trip():
    cfg = TuneConfig(inversion_penalty=InversionPenalty(weight=3.0, temperature=0.1))
    assert TuneConfig.from_dict(cfg.to_dict()) == cfg


async def test_tuning_with_the_penalty_leaves_states_harder_to_invert(base_dir, corpus_dir):
    config = tiny_config(steps=16, lr=5e-3)
    data = TuneData.from_corpus(corpus_dir, base_dir, config, vocab_size=512)
    blocks, _, _ = data.batch(0, 0, 4)
    book = own_codebook(base_dir, data, InversionPenalty(codebook_blocks=4))
    assert book.shape == (512, 64) and torch.allclose(book.norm(dim=-1), torch.ones(512))

    async def tuned(weight: float) -> float:
        client = defended_client(base_dir, 1e4, seed="penalty-test")  # high ε: states close to public
        cfg = TuneConfig(**{**config.to_dict(), "fim": config.fim,
                            "inversion_penalty": InversionPenalty(weight=weight, temperature=0.05),
                            "gradient_noise": config.gradient_noise})
        await tune(client, LocalMiddle(load_middle(base_dir)), data, cfg, codebook=book)
        ids = torch.from_numpy(np.asarray(client.permutation.to_private(blocks)))
        pos = torch.arange(ids.shape[1]).expand_as(ids)
        with torch.no_grad():
            return penalty(client.encoder(ids, pos), ids, model_order(book, client.permutation), 0.05).item()

    plain, guarded = await tuned(0.0), await tuned(50.0)
    assert guarded < plain * 0.7, (guarded, plain)

    with pytest.raises(ConfigError, match="codebook"):
        cfg = TuneConfig(**{**config.to_dict(), "fim": config.fim, "gradient_noise": config.gradient_noise,
                            "inversion_penalty": InversionPenalty(weight=1.0)})
        await tune(clean_client(base_dir), LocalMiddle(load_middle(base_dir)), data, cfg)
