"""Export trained weights as a Hugging Face model directory (safetensors + configs + tokenizer)."""

from __future__ import annotations

import shutil
from pathlib import Path

from transformers import GenerationConfig

from umbra.errors import ConfigError
from umbra.training.checkpoint import load_checkpoint
from umbra.training.config import ModelConfig
from umbra.training.model import EOS_ID, PAD_ID, build_model

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def generation_config(max_new_tokens: int = 64) -> GenerationConfig:
    return GenerationConfig(bos_token_id=EOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
                            max_new_tokens=max_new_tokens, do_sample=False)


def export_model(model, export_dir: Path, tokenizer_dir: Path) -> Path:
    """save_pretrained the model (safetensors), its generation config and the tokenizer files."""
    export_dir.mkdir(parents=True, exist_ok=True)
    model.config.architectures = ["LlamaForCausalLM"]
    model.save_pretrained(str(export_dir), safe_serialization=True)
    generation_config().save_pretrained(str(export_dir))
    if tokenizer_dir.resolve() != export_dir.resolve():
        for name in TOKENIZER_FILES:
            src = tokenizer_dir / name
            if not src.exists():
                raise ConfigError(f"tokenizer file {src} is missing")
            shutil.copy2(src, export_dir / name)
    return export_dir


def export_checkpoint(checkpoint: Path, export_dir: Path, tokenizer_dir: Path) -> Path:
    """Rebuild the model recorded in a training checkpoint and export it."""
    payload = load_checkpoint(checkpoint)
    model_cfg = ModelConfig(**payload["config"]["model"])
    model = build_model(model_cfg, enforce_limits=False)
    model.load_state_dict(payload["model"])
    return export_model(model, export_dir, tokenizer_dir)
