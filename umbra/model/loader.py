"""Load parts of a local Hugging Face causal-LM directory, each from only its own tensors.

`Checkpoint` reads single-file or sharded safetensors lazily: a tensor is read from disk only
when asked for, so the cloud never materializes the embedding table, the final norm or the
head, and the client never reads a middle block."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import torch
from safetensors import safe_open
from torch import nn

from umbra.errors import ModelLoadError
from umbra.model.parts import ClientDecoder, ClientEncoder, MiddleBlocks, SplitPlan
from umbra.model.spec import ModelSpec, load_spec

PartName = Literal["encoder", "middle", "decoder"]
_PART_CLASSES = {"encoder": ClientEncoder, "middle": MiddleBlocks, "decoder": ClientDecoder}


class Checkpoint:
    """Key -> file map of a model directory's safetensors, read lazily."""

    def __init__(self, model_dir: str | Path):
        self.dir = Path(model_dir)
        index = self.dir / "model.safetensors.index.json"
        if index.is_file():
            weight_map = json.loads(index.read_text())["weight_map"]
            self.files = {k: self.dir / f for k, f in weight_map.items()}
        else:
            single = self.dir / "model.safetensors"
            if not single.is_file():
                raise ModelLoadError(f"{self.dir} has no safetensors weights")
            with safe_open(str(single), framework="pt") as f:
                self.files = {k: single for k in f.keys()}
        self.read_keys: list[str] = []  # every key actually read, for audits and tests

    def __contains__(self, key: str) -> bool:
        return key in self.files

    def get(self, key: str) -> torch.Tensor:
        if key not in self.files:
            raise ModelLoadError(f"tensor {key!r} missing from {self.dir}")
        with safe_open(str(self.files[key]), framework="pt") as f:
            tensor = f.get_tensor(key)
        self.read_keys.append(key)
        return tensor


def _checkpoint_key(part: PartName, local_key: str, spec: ModelSpec, module: nn.Module, ckpt: Checkpoint) -> str:
    """Map a part's state-dict key to the Hugging Face checkpoint key."""
    if local_key.startswith("stack.layers."):
        rest = local_key[len("stack.layers.") :]
        i, tail = rest.split(".", 1)
        return module.stack.hf_prefix(int(i)) + tail
    if local_key == "embed_tokens.weight":
        return "model.embed_tokens.weight"
    if local_key == "norm.weight":
        return "model.norm.weight"
    if local_key == "lm_head.weight":
        if spec.tie_word_embeddings or "lm_head.weight" not in ckpt:
            return "model.embed_tokens.weight"
        return "lm_head.weight"
    raise ModelLoadError(f"no checkpoint key for {part} parameter {local_key!r}")


def load_part(
    model_dir: str | Path,
    part: PartName,
    plan: SplitPlan | None = None,
    dtype: torch.dtype = torch.float32,
    spec: ModelSpec | None = None,
    checkpoint: Checkpoint | None = None,
    device: torch.device | None = None,
) -> nn.Module:
    """Build one part on the meta device and fill it from the checkpoint (its keys only), its
    tensors on `device` (None: the CPU, where the checkpoint is read)."""
    spec = spec or load_spec(model_dir)
    plan = plan or SplitPlan.default(spec.num_layers)
    plan.validate(spec.num_layers)
    ckpt = checkpoint or Checkpoint(model_dir)
    with torch.device("meta"):
        module = _PART_CLASSES[part](spec, plan)
    state = {}
    for key, param in module.state_dict().items():
        tensor = ckpt.get(_checkpoint_key(part, key, spec, module, ckpt))
        if tuple(tensor.shape) != tuple(param.shape):
            raise ModelLoadError(f"{key}: checkpoint shape {tuple(tensor.shape)} != {tuple(param.shape)}")
        state[key] = tensor.to(device=device, dtype=dtype)
    module.load_state_dict(state, assign=True, strict=True)
    module.stack.inv_freq = spec.rope_inv_freq.clone().to(device=device)
    return module.eval().requires_grad_(False)


def load_client(model_dir, plan=None, dtype=torch.float32) -> tuple[ClientEncoder, ClientDecoder]:
    spec = load_spec(model_dir)
    ckpt = Checkpoint(model_dir)
    enc = load_part(model_dir, "encoder", plan, dtype, spec, ckpt)
    dec = load_part(model_dir, "decoder", plan, dtype, spec, ckpt)
    return enc, dec


def load_middle(model_dir, plan=None, dtype=torch.float32) -> MiddleBlocks:
    return load_part(model_dir, "middle", plan, dtype)
