"""STuning checkpoints that resume exactly and never hold π.

The pattern of umbra.training.checkpoint (weights, optimizer, data position and every RNG state,
atomically replaced) with one rule added: every vocab-indexed tensor — the LM head, the
embedding table when it is trained, AND their AdamW moments — is stored in PUBLIC row order,
and is put back into private order in memory on resume. Row order is the only way π could
reach these files (the client blocks' weights are invariant to it), so a checkpoint, like the
bundle, can be read by anyone without learning π. Files are written 0600 via temp + rename."""

from __future__ import annotations

import io
from dataclasses import asdict
from pathlib import Path

import torch

from umbra.errors import ConfigError
from umbra.privacy.ltokenizer import private_rows
from umbra.atomic import write_atomic
from umbra.training.checkpoint import TrainState, restore_rng, rng_states
from umbra.tuning.client import VOCAB_INDEXED, Tunable, public_copy

CHECKPOINT_NAME = "tune.pt"
FORMAT = "umbra-tune-checkpoint/v1"


def _public_optimizer_state(optimizer: torch.optim.Optimizer, names: list[str], perm) -> dict:
    """optimizer.state_dict() with vocab-indexed moments in public order (a copy)."""
    sd = optimizer.state_dict()
    state = {}
    for idx, slots in sd["state"].items():
        name = names[idx]
        state[idx] = {k: public_copy(name, v, perm) if torch.is_tensor(v) and v.dim() >= 1 else v
                      for k, v in slots.items()}
    return {"state": state, "param_groups": sd["param_groups"]}


def save(path: Path, client: Tunable, trainable: dict[str, torch.nn.Parameter], optimizer, state: TrainState,
         config: dict, fingerprints: dict, extra: dict | None = None) -> Path:
    """`extra`: more run state to resume (the in-loop adversary's probe, which predicts public ids:
    no π in it)."""
    perm = client.permutation
    names = list(trainable)
    payload = {
        "format": FORMAT,
        "params": {n: public_copy(n, p, perm) for n, p in trainable.items()},
        "optimizer": _public_optimizer_state(optimizer, names, perm),
        "param_names": names,
        "state": asdict(state),
        "rng": rng_states(),
        "config": config,
        "fingerprints": fingerprints,  # client (public-order table hash) and data
    }
    if extra:
        payload["extra"] = extra
    buf = io.BytesIO()
    torch.save(payload, buf)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, buf.getvalue())
    return path


def load(path: Path) -> dict:
    if not path.is_file():
        raise ConfigError(f"no tuning checkpoint at {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch raises several types on a corrupt file
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ConfigError(f"{path} is not an Umbra tuning checkpoint")
    return payload


def restore(payload: dict, client: Tunable, trainable: dict[str, torch.nn.Parameter], optimizer) -> TrainState:
    """Weights, optimizer moments (back to private order) and RNG states; returns the position."""
    names = list(trainable)
    if payload["param_names"] != names:
        raise ConfigError("the checkpoint trained other parameters (was --train-embedding changed?)")
    perm = client.permutation

    def private(name: str, t: torch.Tensor) -> torch.Tensor:
        return private_rows(t, perm) if name in VOCAB_INDEXED and perm is not None else t

    with torch.no_grad():
        for name, p in trainable.items():
            saved = payload["params"][name]
            if saved.shape != p.shape:
                raise ConfigError(f"checkpoint tensor {name} has shape {tuple(saved.shape)}, the client {tuple(p.shape)}")
            p.copy_(private(name, saved))
    opt = payload["optimizer"]
    state = {idx: {k: private(names[idx], v) if torch.is_tensor(v) and v.dim() >= 1 else v for k, v in slots.items()}
             for idx, slots in opt["state"].items()}
    optimizer.load_state_dict({"state": state, "param_groups": opt["param_groups"]})
    restore_rng(payload["rng"])
    return TrainState(**payload["state"])
