"""The adapters themselves: small nn.Modules holding only their own parameters, keyed by the
global index of the block they adapt. They never wrap or patch the model's layers: a forward
pass receives the adapters it should use (`AdapterSet`, selection.py), so two requests with
different sets never see each other's.

    LoraAdapter        blocks.<i>.<target>.a [r, in], .b [out, r]           (b = 0 at init)
    BottleneckAdapter  blocks.<i>.<sublayer>.down [m, C], .up [C, m]        (up = 0 at init)
    SoftPrompt         prompt [n, C]
    DeepPrompt         blocks.<i>.prompt [n, C], blocks.<i>.gate [H]        (gate = 0 at init)

Every adapter whose output weights (b, up, gate) are zero leaves the model's output bit-identical."""

from __future__ import annotations

import math
import secrets

import torch
from torch import nn

from umbra.errors import ConfigError
from umbra.model.adapters.config import (AdapterConfig, BottleneckConfig, DeepPromptConfig, Kind, LoraConfig,
                                         SoftPromptConfig, SplitShape)
from umbra.model.spec import ModelSpec


def _generator(seed: int | None) -> torch.Generator:
    gen = torch.Generator()
    if seed is None:
        gen.manual_seed(secrets.randbits(63))
    else:
        gen.manual_seed(seed)
    return gen


def linear_shapes(spec: ModelSpec) -> dict[str, tuple[int, int]]:
    """(out, in) of each adaptable Linear of a block."""
    c, q, kv, f = spec.hidden_size, spec.num_heads * spec.head_dim, spec.kv_dim, spec.intermediate_size
    return {"q_proj": (q, c), "k_proj": (kv, c), "v_proj": (kv, c), "o_proj": (c, q),
            "gate_proj": (f, c), "up_proj": (f, c), "down_proj": (c, f)}


class Adapter(nn.Module):
    """Base: a name, a config, the blocks it adapts and a revision that changes with its weights
    (caches built with one revision are not reused with another)."""

    kind: Kind

    def __init__(self, name: str, config: AdapterConfig, blocks: tuple[int, ...]):
        super().__init__()
        if not name or "/" in name or name.startswith("."):
            raise ConfigError(f"bad adapter name {name!r}")
        self.name, self.config, self.blocks = name, config.validate(), tuple(blocks)
        self.revision = secrets.token_hex(8)

    def touch(self) -> None:
        """Call after changing the weights in place (training): a new revision."""
        self.revision = secrets.token_hex(8)

    @property
    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


class _Pair(nn.Module):
    def __init__(self, first: torch.Tensor, second: torch.Tensor, names: tuple[str, str]):
        super().__init__()
        self.register_parameter(names[0], nn.Parameter(first))
        self.register_parameter(names[1], nn.Parameter(second))


class LoraAdapter(Adapter):
    kind = Kind.LORA

    def __init__(self, name: str, config: LoraConfig, spec: ModelSpec, blocks: tuple[int, ...],
                 dtype: torch.dtype = torch.float32):
        super().__init__(name, config, blocks)
        shapes, gen = linear_shapes(spec), _generator(config.init_seed)
        self.scale = config.scale
        self.layers = nn.ModuleDict()
        for i in self.blocks:
            per_target = nn.ModuleDict()
            for t in config.targets:
                fan_out, fan_in = shapes[t]
                bound = 1.0 / math.sqrt(fan_in)  # kaiming-uniform(a=√5), as peft initialises lora_A
                a = (torch.rand(config.rank, fan_in, generator=gen) * 2 - 1) * bound
                per_target[t] = _Pair(a.to(dtype), torch.zeros(fan_out, config.rank, dtype=dtype), ("a", "b"))
            self.layers[str(i)] = per_target


class BottleneckAdapter(Adapter):
    kind = Kind.BOTTLENECK

    def __init__(self, name: str, config: BottleneckConfig, spec: ModelSpec, blocks: tuple[int, ...],
                 dtype: torch.dtype = torch.float32):
        super().__init__(name, config, blocks)
        c, m, gen = spec.hidden_size, config.size, _generator(config.init_seed)
        self.layers = nn.ModuleDict()
        for i in self.blocks:
            per = nn.ModuleDict()
            for where in config.sublayers:
                down = torch.randn(m, c, generator=gen) / math.sqrt(c)
                per[where] = _Pair(down.to(dtype), torch.zeros(c, m, dtype=dtype), ("down", "up"))
            self.layers[str(i)] = per

    @staticmethod
    def apply(pair: _Pair, z: torch.Tensor) -> torch.Tensor:
        """up(gelu(down(z))) [.., C] — the residual the adapter adds to a sublayer's output z."""
        return torch.nn.functional.gelu(z @ pair.down.t()) @ pair.up.t()


class SoftPrompt(Adapter):
    kind = Kind.SOFT_PROMPT

    def __init__(self, name: str, config: SoftPromptConfig, spec: ModelSpec, dtype: torch.dtype = torch.float32):
        super().__init__(name, config, ())
        gen = _generator(config.init_seed)
        self.prompt = nn.Parameter((torch.randn(config.length, spec.hidden_size, generator=gen)
                                    * config.init_std).to(dtype))  # [n, C]

    @property
    def length(self) -> int:
        return self.prompt.shape[0]


class DeepPrompt(Adapter):
    """Per block i: prompt vectors P_i [n, C] whose keys and values are the block's own k/v
    projections of P_i (no rotary: they sit before every position), attended by every query in a
    separate softmax scaled per head by tanh(gate_i) — zero at init, so the block is unchanged."""

    kind = Kind.DEEP_PROMPT

    def __init__(self, name: str, config: DeepPromptConfig, spec: ModelSpec, blocks: tuple[int, ...],
                 dtype: torch.dtype = torch.float32):
        super().__init__(name, config, blocks)
        gen = _generator(config.init_seed)
        self.layers = nn.ModuleDict()
        for i in self.blocks:
            prompt = (torch.randn(config.length, spec.hidden_size, generator=gen) * config.init_std).to(dtype)
            self.layers[str(i)] = _Pair(prompt, torch.zeros(spec.num_heads, dtype=dtype), ("prompt", "gate"))


def build_adapter(name: str, config: AdapterConfig, spec: ModelSpec, shape: SplitShape,
                  dtype: torch.dtype = torch.float32, device: torch.device | None = None) -> Adapter:
    """A fresh adapter (its output weights zero) for a model of `spec` split as `shape`, on `device`
    (None: the CPU; the initial draws are made on the CPU either way, so they do not depend on it)."""
    config.validate()
    if isinstance(config, SoftPromptConfig):
        return SoftPrompt(name, config, spec, dtype).to(device=device)
    blocks = shape.blocks(config.placement)
    if not blocks:
        raise ConfigError(f"placement {config.placement.value} holds no blocks in this split")
    cls = {Kind.LORA: LoraAdapter, Kind.BOTTLENECK: BottleneckAdapter, Kind.DEEP_PROMPT: DeepPrompt}[config.kind]
    return cls(name, config, spec, blocks, dtype).to(device=device)

