"""Tiny random Hugging Face models of each supported family, built in memory from configs and
saved to a temporary directory (nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path

import torch

FAMILIES = ["llama", "qwen2-untied", "qwen2-tied", "qwen2-sliding", "mistral"]


def tiny_config(family: str, num_layers: int = 6):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    common = dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
    )
    if family == "llama":
        return LlamaConfig(**common, attention_bias=True, tie_word_embeddings=False,
                           rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 64})
    if family == "qwen2-untied":
        return Qwen2Config(**common, tie_word_embeddings=False)
    if family == "qwen2-tied":
        return Qwen2Config(**common, tie_word_embeddings=True)
    if family == "qwen2-sliding":
        return Qwen2Config(**common, tie_word_embeddings=True, use_sliding_window=True, sliding_window=8,
                           max_window_layers=2)
    if family == "mistral":
        return MistralConfig(**common, sliding_window=8, tie_word_embeddings=False)
    raise ValueError(family)


def build_tiny_model(family: str, directory: Path, num_layers: int = 6, seed: int = 0, shard: bool = False):
    """Save a random tiny model of `family` to `directory`; return the transformers model."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = tiny_config(family, num_layers)
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():  # random init is tiny; widen it so logits actually differ across tokens
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.08)
    model.save_pretrained(directory, max_shard_size="100KB" if shard else "2GB")
    return model
