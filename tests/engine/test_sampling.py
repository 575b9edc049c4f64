"""Sampler: greedy, seeded temperature/top-p sampling, and the mask of ids the model may emit."""

from __future__ import annotations

import pytest
import torch

from umbra.engine.config import SamplingConfig
from umbra.engine.sampling import Sampler, allowed_mask
from umbra.errors import ConfigError

V = 64


def _logits(seed=0):
    return torch.randn(V, generator=torch.Generator().manual_seed(seed))


def _draws(cfg, n=40, allowed=None):
    sampler = Sampler(cfg, torch.ones(V, dtype=torch.bool) if allowed is None else allowed)
    return [sampler(_logits(i)) for i in range(n)]


def test_greedy_is_argmax():
    assert _draws(SamplingConfig(temperature=0.0)) == [int(_logits(i).argmax()) for i in range(40)]


def test_same_seed_same_samples_other_seed_other_samples():
    cfg = SamplingConfig(temperature=1.0, top_p=0.95, seed=7)
    assert _draws(cfg) == _draws(cfg)
    assert _draws(cfg) != _draws(SamplingConfig(temperature=1.0, top_p=0.95, seed=8))
    assert len(set(_draws(cfg))) > 5  # it really samples


def test_top_p_keeps_only_the_nucleus():
    logits = torch.full((V,), -10.0)
    logits[3], logits[5] = 5.0, 4.9  # ~0.52 and ~0.48 of the mass
    sampler = Sampler(SamplingConfig(temperature=1.0, top_p=0.5, seed=1), torch.ones(V, dtype=torch.bool))
    assert {sampler(logits) for _ in range(50)} == {3}
    sampler = Sampler(SamplingConfig(temperature=1.0, top_p=0.99, seed=1), torch.ones(V, dtype=torch.bool))
    assert {sampler(logits) for _ in range(100)} == {3, 5}


def test_masked_ids_are_never_chosen():
    allowed = torch.ones(V, dtype=torch.bool)
    allowed[:32] = False
    for cfg in (SamplingConfig(), SamplingConfig(temperature=2.0, seed=3)):
        assert all(i >= 32 for i in _draws(cfg, 60, allowed))


def test_allowed_mask_bans_control_tokens_and_padded_vocab(client_model):
    tok, fmt = client_model.tokenizer, client_model.fim
    allowed = allowed_mask(client_model.spec.vocab_size, tok, fmt)
    assert tok.size < client_model.spec.vocab_size  # the tiny model pads its vocab
    assert not allowed[tok.size :].any()
    for control in (fmt.prefix_id, fmt.suffix_id, fmt.middle_id):
        assert not allowed[control]
    assert all(allowed[i] for i in fmt.stop_ids)
    assert allowed[tok.encode("return")].all()


@pytest.mark.parametrize("bad", [SamplingConfig(temperature=-1), SamplingConfig(top_p=0.0), SamplingConfig(top_p=1.5)])
def test_config_validation(bad):
    with pytest.raises(ConfigError):
        bad.validate()
