"""The Llama-architecture causal LM used as Umbra's embedded default code model."""

from __future__ import annotations

from transformers import LlamaConfig, LlamaForCausalLM

from umbra.data.tokenizer import EOS, PAD, SPECIAL_TOKENS
from umbra.errors import ConfigError
from umbra.training.config import ModelConfig

EOS_ID = SPECIAL_TOKENS.index(EOS)
PAD_ID = SPECIAL_TOKENS.index(PAD)
MAX_PARAMS = 30_000_000  # the embedded model's size ceiling
MIN_LAYERS = 6


def llama_config(cfg: ModelConfig) -> LlamaConfig:
    if cfg.hidden_size % cfg.num_heads or cfg.num_heads % cfg.num_kv_heads:
        raise ConfigError("hidden_size must divide by num_heads, num_heads by num_kv_heads")
    return LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.context_length,
        rope_theta=cfg.rope_theta,
        tie_word_embeddings=cfg.tie_embeddings,
        initializer_range=cfg.init_std,
        bos_token_id=EOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        hidden_act="silu",
        rms_norm_eps=1e-5,
        attention_bias=False,
        mlp_bias=False,
    )


def build_model(cfg: ModelConfig, enforce_limits: bool = True) -> LlamaForCausalLM:
    """A freshly initialised model (seed torch before calling for reproducible init)."""
    if enforce_limits and cfg.num_layers < MIN_LAYERS:
        raise ConfigError(f"the default model needs >= {MIN_LAYERS} layers, got {cfg.num_layers}")
    model = LlamaForCausalLM(llama_config(cfg))
    n = count_params(model)
    if enforce_limits and n > MAX_PARAMS:
        raise ConfigError(f"{n} parameters exceed the {MAX_PARAMS} ceiling")
    return model


def count_params(model) -> int:
    """Unique parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())
