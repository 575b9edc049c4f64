"""Depth up-scaling preserves the trained model's function exactly (and pads the vocabulary)."""

from __future__ import annotations

import pytest
import torch

from umbra.errors import ConfigError
from umbra.training.config import ModelConfig
from umbra.training.model import build_model
from umbra.training.upscale import UpscaleConfig, deepen, load_into, source_block, upscaled_state

_SHAPE = dict(hidden_size=32, num_heads=4, num_kv_heads=2, intermediate_size=64, context_length=64)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-block model with non-trivial weights, saved as a model directory."""
    torch.manual_seed(3)
    model = build_model(ModelConfig(vocab_size=600, num_layers=2, **_SHAPE), enforce_limits=False)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))  # norms off 1, so a wrong copy would show
    out = tmp_path_factory.mktemp("trained")
    model.save_pretrained(str(out), safe_serialization=True)
    return model, out


def test_deep_model_computes_the_trained_logits(trained):
    small, src = trained
    deep = build_model(ModelConfig(vocab_size=640, num_layers=4, **_SHAPE), enforce_limits=False)
    load_into(deep, upscaled_state(UpscaleConfig(src, factor=2, vocab_size=640)))
    ids = torch.randint(0, 600, (2, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = small(input_ids=ids).logits, deep(input_ids=ids).logits
    assert b.shape == (2, 48, 640)
    torch.testing.assert_close(b[..., :600], a, rtol=1e-5, atol=1e-5)
    emb = deep.model.embed_tokens.weight
    torch.testing.assert_close(emb[600:], small.model.embed_tokens.weight.mean(0).expand(40, -1))
    assert deep.lm_head.weight.data_ptr() == emb.data_ptr()  # still tied


def test_copies_write_nothing_but_keep_the_trained_inputs(trained):
    small, _ = trained
    state = deepen(small.state_dict(), factor=2)
    for j in range(4):
        i, is_copy = source_block(j, 2)
        assert (i, is_copy) == (j // 2, j % 2 == 1)
        for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight", "self_attn.q_proj.weight",
                     "mlp.gate_proj.weight", "input_layernorm.weight"):
            got, src = state[f"model.layers.{j}.{name}"], small.state_dict()[f"model.layers.{i}.{name}"]
            zeroed = is_copy and name in ("self_attn.o_proj.weight", "mlp.down_proj.weight")
            assert torch.equal(got, torch.zeros_like(src) if zeroed else src), (j, name)
    assert state["model.layers.1.mlp.down_proj.weight"].data_ptr() != state["model.layers.0.mlp.down_proj.weight"].data_ptr()


def test_a_state_that_does_not_fit_is_refused(trained):
    _, src = trained
    wrong = build_model(ModelConfig(vocab_size=600, num_layers=3, **_SHAPE), enforce_limits=False)
    with pytest.raises(ConfigError):
        load_into(wrong, upscaled_state(UpscaleConfig(src, factor=2)))
    with pytest.raises(ConfigError):
        deepen({}, factor=0)
