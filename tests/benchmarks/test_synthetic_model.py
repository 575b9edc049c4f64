"""benchmarks/synthetic_model.py: the 1.5B shape is Qwen2.5-Coder-1.5B's config (1.54 B parameters),
and a small build is a complete model directory: Qwen FIM tokenizer within the vocabulary, shards
with an index, no shard splitting a layer, weights of the asked dtype that the client loads."""

from __future__ import annotations

import json

import torch
from safetensors import safe_open

from synthetic_model import SHAPES, build, checkpoint_groups
from umbra.engine import ClientModel
from umbra.model.spec import spec_from_config


def test_the_1_5b_shape_is_qwen2_5_coder_1_5b():
    from transformers import Qwen2Config

    cfg = SHAPES["qwen2.5-coder-1.5b"]
    spec = spec_from_config(Qwen2Config(**cfg))
    assert (spec.hidden_size, spec.num_layers, spec.num_heads, spec.num_kv_heads, spec.intermediate_size,
            spec.vocab_size, spec.head_dim) == (1536, 28, 12, 2, 8960, 151936, 128)
    assert spec.tie_word_embeddings and spec.qkv_bias and spec.sliding_windows == (None,) * 28
    assert cfg["rope_theta"] == 1e6 and spec.max_position_embeddings == 32768
    params = sum(torch.Size(s).numel() for group in checkpoint_groups(cfg) for _, s in group)
    assert params == 1_543_714_304  # Qwen2.5-Coder-1.5B's count (tied head counted once)


def test_a_small_build_is_a_sharded_model_directory_the_client_loads(tmp_path):
    d = build(tmp_path / "m", "small", torch.bfloat16, shard_bytes=50_000)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    shards = sorted({f for f in index["weight_map"].values()})
    assert len(shards) > 2 and shards == sorted(p.name for p in d.glob("model-*.safetensors"))
    layer_files: dict[str, set[str]] = {}
    for key, name in index["weight_map"].items():
        if key.startswith("model.layers."):
            layer_files.setdefault(key.split(".")[2], set()).add(name)
    assert len(layer_files) == 4 and all(len(f) == 1 for f in layer_files.values())  # never split
    with safe_open(str(d / shards[0]), framework="pt") as f:
        assert f.get_tensor("model.embed_tokens.weight").dtype == torch.bfloat16
    model = ClientModel.load(d, dtype=torch.bfloat16)
    assert model.fim.template.name == "qwen2.5-coder" and model.tokenizer.size <= model.spec.vocab_size == 2048
    ids = model.tokenizer.encode("def add(a, b):\n    return a + b\n")
    assert ids and max(ids) < model.tokenizer.size


def test_one_sides_build_writes_only_its_shards_and_serves_that_side(tmp_path):
    from umbra.model.loader import Checkpoint, load_part

    d = build(tmp_path / "client", "small", torch.bfloat16, shard_bytes=1, side="client")
    index = json.loads((d / "model.safetensors.index.json").read_text())["weight_map"]
    present = {p.name for p in d.glob("model-*.safetensors")}
    assert present < set(index.values())  # the middle's shards are named but absent
    assert index["model.layers.1.mlp.up_proj.weight"] not in present  # of 4 layers (E=1, D=2): the middle
    model = ClientModel.load(d, dtype=torch.bfloat16)
    assert {k for k in model.checkpoint.read_keys if k.startswith("model.layers.")} == {
        k for k in index if k.startswith(("model.layers.0.", "model.layers.2.", "model.layers.3."))}
    try:
        load_part(d, "middle", checkpoint=Checkpoint(d))
    except Exception as exc:
        assert "is missing" in str(exc)
    else:
        raise AssertionError("the middle loaded from a client-only directory")
