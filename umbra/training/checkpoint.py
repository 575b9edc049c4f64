"""Checkpoints that resume exactly: model, optimizer, data position and every RNG state."""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from umbra.errors import ConfigError

CHECKPOINT_NAME = "last.pt"


@dataclass
class TrainState:
    step: int = 0  # optimizer steps taken
    epoch: int = 0  # data position: epoch of the next batch
    block: int = 0  # data position: first block of the next batch within that epoch
    tokens_seen: int = 0  # training tokens consumed
    elapsed_s: float = 0.0  # training wall time summed over runs


def rng_states() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def restore_rng(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])


def save_checkpoint(path: Path, model, optimizer, state: TrainState, config: dict) -> Path:
    """Atomically write the checkpoint (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "state": asdict(state),
        "rng": rng_states(),
        "config": config,
    }
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: Path) -> dict:
    if not path.exists():
        raise ConfigError(f"no checkpoint at {path}")
    return torch.load(path, map_location="cpu", weights_only=False)


def restore(payload: dict, model, optimizer) -> TrainState:
    """Load model + optimizer + RNG states from a checkpoint payload; return the train state."""
    model.load_state_dict(payload["model"])
    if optimizer is not None:
        optimizer.load_state_dict(payload["optimizer"])
    restore_rng(payload["rng"])
    return TrainState(**payload["state"])
