"""Selection per request: an `AdapterSet` is the adapters one forward pass uses, passed down
through BlockStack -> Block -> Attention/MLP as an argument. Nothing is switched on a shared
module, so concurrent requests with different sets cannot see each other's adapters.

Where adapters overlap they are summed: LoRA deltas of the same Linear (their A stacked, their
scaled B side by side: one pair of matmuls whatever the count), bottleneck residuals of the same
sublayer, gated prompt attentions of the same block; soft prompts are concatenated in name order.

A set built with `frozen=True` (inference) precomputes those stacked tensors once, detached; a
training set (`frozen=False`) rebuilds them in every forward so gradients reach the adapters."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import torch

from umbra.errors import ConfigError
from umbra.model.adapters.config import Placement, SplitShape
from umbra.model.adapters.modules import Adapter, BottleneckAdapter, DeepPrompt, LoraAdapter, SoftPrompt


class LayerAdapters:
    """What one block applies for one request."""

    __slots__ = ("lora", "bottleneck", "prompts")

    def __init__(self) -> None:
        self.lora: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # target -> (A [R,in], s·B [out,R])
        self.bottleneck: dict[str, list] = {}  # "attention" | "mlp" -> bottleneck pairs
        self.prompts: list[tuple[torch.Tensor, torch.Tensor]] = []  # (P [n,C], gate [H])

    def project(self, target: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y = base(x) [..,out] plus the summed LoRA deltas of `target`."""
        ab = self.lora.get(target)
        return y if ab is None else y + (x @ ab[0].t()) @ ab[1].t()

    def residual(self, sublayer: str, z: torch.Tensor) -> torch.Tensor:
        """A sublayer's output z [..,C] plus the summed bottleneck residuals there."""
        for pair in self.bottleneck.get(sublayer, ()):
            z = z + BottleneckAdapter.apply(pair, z)
        return z


class AdapterSet:
    def __init__(self, adapters: Iterable[Adapter] = (), *, frozen: bool = True):
        chosen = sorted(adapters, key=lambda a: a.name)
        names = [a.name for a in chosen]
        if len(set(names)) != len(names):
            raise ConfigError(f"an adapter set names one adapter twice: {names}")
        self.adapters: tuple[Adapter, ...] = tuple(chosen)
        self.frozen = frozen
        self._layers: dict[int, LayerAdapters] | None = self._build() if frozen else None
        self._soft = [a for a in chosen if isinstance(a, SoftPrompt)]

    # -- identity ----------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.adapters)

    @property
    def key(self) -> tuple[tuple[str, str], ...]:
        """Identity of the whole set: names and weight revisions."""
        return tuple((a.name, a.revision) for a in self.adapters)

    def key_for(self, blocks: Iterable[int], *, soft_prompt: bool = False) -> tuple[tuple[str, str], ...]:
        """Identity of the adapters that change these blocks' outputs (and the soft prompt, if asked):
        a KV cache of these blocks built under one key is valid under the same key only."""
        wanted = set(blocks)
        return tuple((a.name, a.revision) for a in self.adapters
                     if wanted.intersection(a.blocks) or (soft_prompt and isinstance(a, SoftPrompt)))

    def __bool__(self) -> bool:
        return bool(self.adapters)

    def __len__(self) -> int:
        return len(self.adapters)

    def __repr__(self) -> str:
        return f"AdapterSet({', '.join(self.names) or '∅'})"

    # -- what the model reads ----------------------------------------------------------------
    def layer(self, block: int) -> LayerAdapters | None:
        """The adapters of global block `block`, or None."""
        layers = self._layers if self._layers is not None else self._build()
        return layers.get(block)

    @property
    def soft_prompt(self) -> torch.Tensor | None:
        """The prompt vectors [n, C] prepended at the input, or None."""
        if not self._soft:
            return None
        p = torch.cat([a.prompt for a in self._soft]) if len(self._soft) > 1 else self._soft[0].prompt
        return p.detach() if self.frozen else p

    @property
    def prompt_length(self) -> int:
        return sum(a.length for a in self._soft)

    @property
    def blocks(self) -> frozenset[int]:
        return frozenset(i for a in self.adapters for i in a.blocks)

    def check_client(self, shape: SplitShape) -> "AdapterSet":
        """ConfigError if any adapter would sit on the cloud's (middle) blocks."""
        middle = set(shape.blocks(Placement.MIDDLE))
        bad = [a.name for a in self.adapters if middle.intersection(a.blocks)]
        if bad:
            raise ConfigError(f"adapter(s) {', '.join(bad)} sit on the cloud's blocks; the client cannot run them")
        return self

    # -- building ----------------------------------------------------------------------------
    def _build(self) -> dict[int, LayerAdapters]:
        layers: dict[int, LayerAdapters] = {}
        lora: dict[tuple[int, str], list[tuple[torch.Tensor, torch.Tensor]]] = {}
        with torch.no_grad() if self.frozen else contextlib.nullcontext():
            for adapter in self.adapters:
                for key, per in getattr(adapter, "layers", {}).items():
                    block = int(key)
                    lay = layers.setdefault(block, LayerAdapters())
                    if isinstance(adapter, LoraAdapter):
                        for target, pair in per.items():
                            lora.setdefault((block, target), []).append((pair.a, pair.b * adapter.scale))
                    elif isinstance(adapter, BottleneckAdapter):
                        for where, pair in per.items():
                            lay.bottleneck.setdefault(where, []).append(pair)
                    elif isinstance(adapter, DeepPrompt):
                        lay.prompts.append((per.prompt, per.gate))
            for (block, target), pairs in lora.items():
                a = pairs[0][0] if len(pairs) == 1 else torch.cat([p[0] for p in pairs])
                b = pairs[0][1] if len(pairs) == 1 else torch.cat([p[1] for p in pairs], dim=1)
                layers[block].lora[target] = (a.detach(), b.detach()) if self.frozen else (a, b)
        return layers


EMPTY = AdapterSet()
