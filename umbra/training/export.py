"""Export trained weights as a Hugging Face model directory (safetensors + configs + tokenizer)."""

from __future__ import annotations

import json
import os
import platform
import shutil
from pathlib import Path

from transformers import GenerationConfig

from umbra.errors import ConfigError
from umbra.training.checkpoint import load_checkpoint
from umbra.training.config import train_config_from_dict
from umbra.training.model import EOS_ID, PAD_ID, build_model
from umbra.training.runlog import read_schedule_changes

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
INIT_NAME = "init.json"  # in a run directory: how its weights began ({"init": "upscaled"|"scratch", "base_model"})
PROVENANCE_NAME = "training.json"  # where the weights come from; read by `umbra train card`
CURVES_NAME = "training_curves.png"


def cpu_name() -> str:
    """The CPU model as the kernel reports it (falls back to the platform's processor string)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def provenance(config: dict, state: dict, total_steps: int, schedule_changes: list[dict] = (),
               init: dict | None = None) -> dict:
    """What `training.json` records: the training config (paths dropped), the position reached,
    the budget changes made on resume, how the weights began (a run directory's init.json, when it
    has one) and the machine the export ran on (training and export run on the same machine here)."""
    return {
        **({"init": dict(init)} if init else {}),
        "config": {k: v for k, v in config.items() if not k.endswith("_dir")},
        "state": dict(state),
        "total_steps": total_steps,
        "schedule_changes": [c for c in schedule_changes if c["step"] <= state["step"]],
        "finished": state["step"] >= total_steps,
        "hardware": {"cpu": cpu_name(), "logical_cpus": os.cpu_count(), "torch_threads": config.get("threads")},
    }


def generation_config(max_new_tokens: int = 64) -> GenerationConfig:
    return GenerationConfig(bos_token_id=EOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
                            max_new_tokens=max_new_tokens, do_sample=False)


def export_model(model, export_dir: Path, tokenizer_dir: Path, provenance: dict | None = None,
                 curves: Path | None = None) -> Path:
    """save_pretrained the model (safetensors), its generation config and the tokenizer files;
    with `provenance`, also `training.json`, and the run's loss curves when `curves` exists."""
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
    if provenance is not None:
        (export_dir / PROVENANCE_NAME).write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n")
    if curves is not None and curves.exists():
        shutil.copy2(curves, export_dir / CURVES_NAME)
    return export_dir


def read_init(run_dir: Path) -> dict | None:
    """How a run directory's weights began (its init.json), or None when it has none."""
    init_file = run_dir / INIT_NAME
    return json.loads(init_file.read_text()) if init_file.is_file() else None


def export_checkpoint(checkpoint: Path, export_dir: Path, tokenizer_dir: Path) -> Path:
    """Rebuild the model recorded in a training checkpoint and export it, with its provenance
    and the loss curves of the run directory it sits in."""
    payload = load_checkpoint(checkpoint)
    cfg = train_config_from_dict(payload["config"])
    model = build_model(cfg.model, enforce_limits=False)
    model.load_state_dict(payload["model"])
    return export_model(model, export_dir, tokenizer_dir,
                        provenance(payload["config"], payload["state"], cfg.total_steps(),
                                   read_schedule_changes(checkpoint.parent), read_init(checkpoint.parent)),
                        checkpoint.parent / "curves.png")
