"""Load parts of a local Hugging Face causal-LM directory, each from only its own tensors.

`Checkpoint` reads single-file or sharded safetensors lazily: a tensor is read from disk only
when asked for, so the cloud never materializes the embedding table, the final norm or the
head, and the client never reads a middle block; a shard holding none of a part's tensors may
be absent from the directory (`check_part` names the one a part needs and lacks).

A part is read tensor by tensor, each cast to the asked dtype (and moved to the device) before
the next is read, straight into the module (`assign`): memory holds the part once, plus one
tensor in the checkpoint's dtype."""

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

    def _file(self, key: str) -> Path:
        if key not in self.files:
            raise ModelLoadError(f"tensor {key!r} missing from {self.dir}")
        path = self.files[key]
        if not path.is_file():
            raise ModelLoadError(f"shard {path.name} (holding {key!r}) is missing from {self.dir}")
        return path

    def shape(self, key: str) -> tuple[int, ...]:
        """A tensor's shape from its shard's header, without reading the tensor."""
        with safe_open(str(self._file(key)), framework="pt") as f:
            return tuple(f.get_slice(key).get_shape())

    def get(self, key: str) -> torch.Tensor:
        with safe_open(str(self._file(key)), framework="pt") as f:
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


def _skeleton(part: PartName, spec: ModelSpec, plan: SplitPlan) -> nn.Module:
    plan.validate(spec.num_layers)
    with torch.device("meta"):
        return _PART_CLASSES[part](spec, plan)


def check_part(model_dir: str | Path, part: PartName, plan: SplitPlan | None = None,
               spec: ModelSpec | None = None, checkpoint: Checkpoint | None = None) -> int:
    """Every tensor of `part` present, in a shard that is there, of the shape config.json gives it
    (shard headers only, no tensor read): ModelLoadError naming the first that is not. Returns the
    part's element count."""
    spec = spec or load_spec(model_dir)
    plan = plan or SplitPlan.default(spec.num_layers)
    ckpt = checkpoint or Checkpoint(model_dir)
    module = _skeleton(part, spec, plan)
    count = 0
    for key, param in module.state_dict().items():
        ckpt_key = _checkpoint_key(part, key, spec, module, ckpt)
        shape = ckpt.shape(ckpt_key)
        if shape != tuple(param.shape):
            raise ModelLoadError(f"{ckpt_key} in {ckpt.files[ckpt_key].name}: shape {shape} disagrees with "
                                 f"config.json ({tuple(param.shape)})")
        count += param.numel()
    return count


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
    ckpt = checkpoint or Checkpoint(model_dir)
    check_part(model_dir, part, plan, spec, ckpt)  # a missing shard or a wrong shape before any read
    module = _skeleton(part, spec, plan)
    state = {}
    for key, param in module.state_dict().items():
        tensor = ckpt.get(_checkpoint_key(part, key, spec, module, ckpt))
        state[key] = tensor.to(device=device, dtype=dtype)  # one tensor at a time: never the part twice
        del tensor
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
