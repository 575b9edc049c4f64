"""Compact training checkpoints, small enough to carry across sessions in git.

A full checkpoint holds fp32 weights and both fp32 AdamW moments (12 bytes per parameter). The
compact form keeps what a resume cannot cheaply rebuild:

  * the weights in bfloat16 (2 bytes; the rounding is far below one late-schedule update's size),
  * the second moment `exp_avg_sq` in bfloat16 (2 bytes): it sets each weight's step size and
    losing it would make the next steps sign-sized jolts,
  * the step counters, the train state (step, data position), every RNG state and the config.

The first moment `exp_avg` is dropped by default and restored as zeros: with beta1 = 0.9 it is a
~10-step average, and starting it at zero only damps the first few updates after a resume
(AdamW's bias correction is already ~1 at the saved step). `keep_momentum` stores it in bf16.

`save_compact` writes the compact payload in parts of at most `part_bytes` plus a manifest with
each part's sha256; `restore_compact` verifies the parts and writes a full, resumable checkpoint."""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from umbra.errors import ConfigError
from umbra.training.checkpoint import load_checkpoint

MANIFEST = "compact.json"
_PART = "compact.pt.part-{:02d}"


@dataclass(frozen=True)
class CompactSpec:
    part_bytes: int = 44_000_000  # largest part file (git hosts refuse big blobs; keep < 45 MB)
    keep_momentum: bool = False  # also store exp_avg (bf16): +2 bytes per parameter


def _aliases(model_state: dict[str, torch.Tensor]) -> dict[str, str]:
    """Names whose tensor shares storage with an earlier name (tied embeddings): name -> first name."""
    first: dict[int, str] = {}
    out = {}
    for name, t in model_state.items():
        ptr = t.untyped_storage().data_ptr()
        if ptr in first:
            out[name] = first[ptr]
        else:
            first[ptr] = name
    return out


def compact_payload(payload: dict, spec: CompactSpec) -> dict:
    """A full checkpoint payload -> its compact form (bf16 tensors, no exp_avg unless kept)."""
    aliases = _aliases(payload["model"])
    model = {k: v.to(torch.bfloat16) for k, v in payload["model"].items() if k not in aliases}
    opt = payload["optimizer"]
    states = {}
    for idx, st in opt["state"].items():
        keep = {"step": st["step"], "exp_avg_sq": st["exp_avg_sq"].to(torch.bfloat16)}
        if spec.keep_momentum:
            keep["exp_avg"] = st["exp_avg"].to(torch.bfloat16)
        states[idx] = keep
    return {"model": model, "aliases": aliases, "optimizer": {"state": states, "param_groups": opt["param_groups"]},
            "state": payload["state"], "rng": payload["rng"], "config": payload["config"], "format": 1}


def expand_payload(compact: dict) -> dict:
    """The compact form -> a full checkpoint payload (fp32; a dropped exp_avg becomes zeros)."""
    if compact.get("format") != 1:
        raise ConfigError("not a compact checkpoint (format 1)")
    model = {k: v.float() for k, v in compact["model"].items()}
    for name, target in compact["aliases"].items():
        model[name] = model[target]
    states = {}
    for idx, st in compact["optimizer"]["state"].items():
        sq = st["exp_avg_sq"].float()
        avg = st["exp_avg"].float() if "exp_avg" in st else torch.zeros_like(sq)
        states[idx] = {"step": st["step"], "exp_avg": avg, "exp_avg_sq": sq}
    return {"model": model, "optimizer": {"state": states, "param_groups": compact["optimizer"]["param_groups"]},
            "state": compact["state"], "rng": compact["rng"], "config": compact["config"]}


def save_compact(checkpoint: Path, store: Path, spec: CompactSpec = CompactSpec()) -> dict:
    """Write the compact form of `checkpoint` into `store` (old parts replaced); return the manifest."""
    buf = io.BytesIO()
    torch.save(compact_payload(load_checkpoint(checkpoint), spec), buf)
    data = buf.getvalue()
    store.mkdir(parents=True, exist_ok=True)
    for old in store.glob("compact.pt.part-*"):
        old.unlink()
    parts = []
    for k, start in enumerate(range(0, len(data), spec.part_bytes)):
        chunk = data[start:start + spec.part_bytes]
        (store / _PART.format(k)).write_bytes(chunk)
        parts.append({"name": _PART.format(k), "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
    manifest = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "parts": parts,
                "keep_momentum": spec.keep_momentum}
    (store / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_compact(store: Path) -> dict:
    """The verified compact payload stored in `store`."""
    path = store / MANIFEST
    if not path.exists():
        raise ConfigError(f"no compact checkpoint in {store}")
    manifest = json.loads(path.read_text())
    data = b"".join((store / p["name"]).read_bytes() for p in manifest["parts"])
    if len(data) != manifest["bytes"] or hashlib.sha256(data).hexdigest() != manifest["sha256"]:
        raise ConfigError(f"the compact checkpoint in {store} is incomplete or corrupt")
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


def restore_compact(store: Path, checkpoint: Path) -> dict:
    """Rebuild a full, resumable checkpoint at `checkpoint` (atomically); return its train state."""
    payload = expand_payload(read_compact(store))
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    tmp = checkpoint.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, checkpoint)
    return payload["state"]


def main(argv: list[str] | None = None) -> int:
    """`python -m umbra.training.compact save|restore CHECKPOINT STORE` (scripts/pretrain-checkpoint)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m umbra.training.compact")
    p.add_argument("command", choices=("save", "restore"))
    p.add_argument("checkpoint", type=Path)
    p.add_argument("store", type=Path)
    p.add_argument("--keep-momentum", action="store_true", help="save: also store exp_avg (bf16)")
    args = p.parse_args(argv)
    if args.command == "save":
        m = save_compact(args.checkpoint, args.store, CompactSpec(keep_momentum=args.keep_momentum))
        print(json.dumps({"bytes": m["bytes"], "parts": len(m["parts"]), "sha256": m["sha256"]}))
    else:
        st = restore_compact(args.store, args.checkpoint)
        print(json.dumps({"checkpoint": str(args.checkpoint), "step": st["step"], "tokens_seen": st["tokens_seen"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
