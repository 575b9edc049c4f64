"""Each part reads and holds exactly its own tensors from the checkpoint."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from umbra.errors import ConfigError, ModelLoadError
from umbra.model.loader import Checkpoint, load_part
from umbra.model.parts import SplitPlan
from umbra.model.spec import load_spec


def all_keys(d) -> set[str]:
    keys = set()
    for f in d.glob("*.safetensors"):
        with safe_open(str(f), framework="pt") as fh:
            keys |= set(fh.keys())
    return keys


@pytest.mark.parametrize("family", ["llama", "qwen2-tied", "mistral"])
def test_cloud_reads_only_middle_blocks_and_client_never_does(family, tiny_model_dirs):
    d = tiny_model_dirs[family]
    plan = SplitPlan.default(6)  # E=1, D=2 -> middle = blocks 1..3
    ckpt = Checkpoint(d)
    middle = load_part(d, "middle", plan, checkpoint=ckpt)
    middle_keys = {k for k in all_keys(d) if any(k.startswith(f"model.layers.{i}.") for i in (1, 2, 3))}
    assert set(ckpt.read_keys) == middle_keys
    assert not any("embed" in k or "norm.weight" == k.split("model.")[-1] or "lm_head" in k for k in ckpt.read_keys)
    # the module holds exactly those tensors, nothing else
    held = {f"model.layers.{middle.stack.first + int(k.split('.')[2])}.{k.split('.', 3)[3]}"
            for k in middle.state_dict()}
    assert held == middle_keys

    client_ckpt = Checkpoint(d)
    enc = load_part(d, "encoder", plan, checkpoint=client_ckpt)
    dec = load_part(d, "decoder", plan, checkpoint=client_ckpt)
    assert not set(client_ckpt.read_keys) & middle_keys
    assert "model.embed_tokens.weight" in client_ckpt.read_keys
    assert {k.split(".")[0] for k in enc.state_dict()} == {"embed_tokens", "stack"}
    assert {k.split(".")[0] for k in dec.state_dict()} == {"stack", "norm", "lm_head"}


def test_tied_head_reuses_embedding(tiny_model_dirs):
    d = tiny_model_dirs["qwen2-tied"]
    assert "lm_head.weight" not in all_keys(d)
    enc = load_part(d, "encoder")
    dec = load_part(d, "decoder")
    assert torch.equal(dec.lm_head.weight, enc.embed_tokens.weight)


def test_default_plan_keeps_small_models_noir_shaped_and_deep_clients_at_an_eighth():
    assert SplitPlan.default(6) == SplitPlan(1, 2)
    assert SplitPlan.default(8) == SplitPlan(1, 2)  # umbra-code-tiny: unchanged
    assert SplitPlan.default(12) == SplitPlan(1, 1)
    assert SplitPlan.default(16) == SplitPlan(1, 1)  # the deep default model: 2 of 16 blocks
    assert SplitPlan.default(24) == SplitPlan(1, 2)
    assert SplitPlan.default(28) == SplitPlan(1, 2)
    for layers in range(16, 65):
        plan = SplitPlan.default(layers)
        assert plan.encoder_blocks + plan.decoder_blocks <= layers / 8, layers
        plan.validate(layers)


def test_plan_without_middle_is_rejected(tiny_model_dirs):
    with pytest.raises(ConfigError):
        load_part(tiny_model_dirs["llama"], "middle", SplitPlan(3, 3))


def test_unsupported_family_is_rejected(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    with pytest.raises(ModelLoadError):
        load_spec(tmp_path)


def test_missing_weights_are_a_clear_error(tmp_path, tiny_model_dirs):
    (tmp_path / "config.json").write_text((tiny_model_dirs["llama"] / "config.json").read_text())
    with pytest.raises(ModelLoadError):
        load_part(tmp_path, "encoder")
