"""Function-preserving depth up-scaling of a trained Llama model (e.g. 8 -> 16 blocks).

Block `factor*i` of the deep model is trained block `i`; blocks `factor*i+1 .. factor*i+factor-1`
are copies of it whose attention output projection (o_proj) and MLP down projection (down_proj)
are zero, so each copy adds nothing to the residual stream: at initialisation the deep model
computes exactly the trained model's hidden states and logits. The copies' other weights (q, k,
v, gate, up, norms) start from trained values, and their zeroed outputs receive gradients from
the first step on, so the copies learn quickly from a well-conditioned start.

The vocabulary can grow at the same time (new rows: the mean embedding, vocab_ext.py); the
logits of the old ids are then still exactly the trained model's."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from umbra.errors import ConfigError
from umbra.training.vocab_ext import pad_embedding

_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
ZEROED_IN_COPIES = ("self_attn.o_proj.weight", "mlp.down_proj.weight")  # the blocks' residual writers
EMBEDDING = "model.embed_tokens.weight"
LM_HEAD = "lm_head.weight"


@dataclass(frozen=True)
class UpscaleConfig:
    source_dir: Path  # trained model directory (model.safetensors + config.json)
    factor: int = 2  # deep blocks per trained block: num_layers = factor * source layers
    vocab_size: int | None = None  # deep model's vocabulary (None: the source's); new rows = mean


def source_block(deep_index: int, factor: int) -> tuple[int, bool]:
    """(trained block a deep block comes from, whether it is a zero-output copy)."""
    return deep_index // factor, deep_index % factor != 0


def split_layers(state: dict[str, torch.Tensor]) -> tuple[dict[int, dict[str, torch.Tensor]], dict[str, torch.Tensor]]:
    """A state dict -> ({block index: {name within the block: tensor}}, the non-block tensors)."""
    blocks: dict[int, dict[str, torch.Tensor]] = {}
    rest: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        m = _LAYER.match(name)
        if m:
            blocks.setdefault(int(m.group(1)), {})[m.group(2)] = tensor
        else:
            rest[name] = tensor
    if sorted(blocks) != list(range(len(blocks))):
        raise ConfigError("the model's blocks are not numbered 0..L-1")
    return blocks, rest


def copy_block(block: dict[str, torch.Tensor], zero_output: bool) -> dict[str, torch.Tensor]:
    """A fresh copy of one block's tensors; with `zero_output`, o_proj [C, H*hd] and
    down_proj [C, I] are zero, so the block maps the residual stream x to x."""
    out = {name: t.detach().clone() for name, t in block.items()}
    if zero_output:
        for name in ZEROED_IN_COPIES:
            if name not in out:
                raise ConfigError(f"block lacks {name}: not a Llama block")
            out[name].zero_()
    return out


def deepen(state: dict[str, torch.Tensor], factor: int) -> dict[str, torch.Tensor]:
    """L-block state dict -> factor*L-block state dict (function-preserving)."""
    if factor < 1:
        raise ConfigError(f"upscale factor must be >= 1, got {factor}")
    blocks, rest = split_layers(state)
    out = {name: t.detach().clone() for name, t in rest.items()}
    for j in range(factor * len(blocks)):
        i, is_copy = source_block(j, factor)
        for name, t in copy_block(blocks[i], is_copy).items():
            out[f"model.layers.{j}.{name}"] = t
    return out


def widen_vocab(state: dict[str, torch.Tensor], vocab_size: int) -> dict[str, torch.Tensor]:
    """Pad the embedding [V, C] (and an untied LM head [V, C]) to vocab_size rows (mean rows)."""
    out = dict(state)
    for name in (EMBEDDING, LM_HEAD):
        if name in out:
            out[name] = pad_embedding(out[name], vocab_size)
    return out


def upscaled_state(cfg: UpscaleConfig) -> dict[str, torch.Tensor]:
    """The deep model's initial state dict, from the trained model on disk (fp32)."""
    path = cfg.source_dir / "model.safetensors"
    if not path.exists():
        raise ConfigError(f"no trained model at {cfg.source_dir}")
    state = {k: v.float() for k, v in load_file(str(path)).items()}
    state = deepen(state, cfg.factor)
    return widen_vocab(state, cfg.vocab_size) if cfg.vocab_size else state


def load_into(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load `state` into a freshly built deep model; the tied LM head may be absent from it."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = getattr(model.config, "tie_word_embeddings", False)
    missing = [m for m in missing if not (tied and m == LM_HEAD)]
    if missing or unexpected:
        raise ConfigError(f"state does not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
