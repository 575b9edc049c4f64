"""Selection per request: an `AdapterSet` is the adapters one forward pass uses, passed down
through BlockStack -> Block -> Attention/MLP as an argument. Nothing is switched on a shared
module, so concurrent requests with different sets cannot see each other's adapters.

Where adapters overlap they are summed: LoRA deltas of the same Linear (their A stacked, their
scaled B side by side: one pair of matmuls whatever the count), bottleneck residuals of the same
sublayer, gated prompt attentions of the same block; soft prompts are concatenated in name order.

A set built with `frozen=True` (inference) precomputes those stacked tensors once, detached, and
is reused across requests. A training set (`frozen=False`) builds them, differentiable, on the first
block that asks and is meant for one forward pass: make a new one after each optimizer step."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import torch

from umbra.errors import ConfigError
from umbra.model.adapters.config import Placement, SplitShape
from umbra.model.adapters.modules import Adapter, BottleneckAdapter, DeepPrompt, LoraAdapter, SoftPrompt


# Projections that read the same input share one low-rank matmul: x @ [A_q; A_k; A_v]^T.
GROUPS = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "o_proj": "o",
          "gate_proj": "gate_up", "up_proj": "gate_up", "down_proj": "down"}


class LayerAdapters:
    """What one block applies for one request.

    LoRA per group of projections with a common input: A [R, in] stacks the A of every adapter
    and target of the group; each target keeps its rows' range and its scaled B^T [r, out], so a
    projection's delta is one fused `addmm(y, u[:, rows], s·B^T)` after one `u = x A^T` per group."""

    __slots__ = ("lora", "bottleneck", "prompts", "merge", "_merged")

    def __init__(self, merge: bool = False) -> None:
        self.lora: dict[str, tuple[torch.Tensor, dict[str, tuple[int, int, torch.Tensor]]]] = {}
        self.bottleneck: dict[str, list] = {}  # "attention" | "mlp" -> bottleneck pairs
        self.prompts: list[tuple[torch.Tensor, torch.Tensor]] = []  # (P [n,C], gate [H])
        self.merge = merge  # frozen small sets: LoRA folded into a copy of each adapted weight
        self._merged: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # target -> (base weight, W + s·B A)

    def linear(self, target: str, base: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """base(x) with this request's LoRA of `target` merged in (merge mode only)."""
        rows = self.lora.get(GROUPS[target])
        rows = rows and rows[1].get(target)
        if not rows:
            return base(x)
        cached = self._merged.get(target)
        if cached is None or cached[0] is not base.weight:
            lo, hi, bt = rows
            a = self.lora[GROUPS[target]][0][lo:hi]  # [r, in]
            with torch.no_grad():
                cached = (base.weight, torch.addmm(base.weight, bt.t(), a))  # W + (s·B) A   [out, in]
            self._merged[target] = cached
        return torch.nn.functional.linear(x, cached[1], base.bias)

    def low_rank(self, group: str, x: torch.Tensor) -> torch.Tensor | None:
        """u = x A^T [N, R] for the projections of `group` reading x [..,in]; None if none adapted."""
        entry = self.lora.get(group)
        return None if entry is None else x.reshape(-1, x.shape[-1]) @ entry[0].t()

    def add(self, target: str, u: torch.Tensor | None, y: torch.Tensor) -> torch.Tensor:
        """y = base(x) [..,out] plus the summed LoRA deltas of `target` (u from `low_rank`)."""
        if u is None:
            return y
        rows = self.lora[GROUPS[target]][1].get(target)
        if rows is None:
            return y
        lo, hi, bt = rows
        return torch.addmm(y.reshape(-1, y.shape[-1]), u[:, lo:hi], bt).view(y.shape)

    def project(self, target: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y plus the LoRA deltas of `target` alone (x: its input)."""
        return self.add(target, self.low_rank(GROUPS[target], x), y)

    def residual(self, sublayer: str, z: torch.Tensor) -> torch.Tensor:
        """A sublayer's output z [..,C] plus the summed bottleneck residuals there."""
        for pair in self.bottleneck.get(sublayer, ()):
            z = z + BottleneckAdapter.apply(pair, z)
        return z


MERGE_BYTES = 64 * 1024**2  # a frozen set merges its LoRAs when the merged weights take at most this


class AdapterSet:
    def __init__(self, adapters: Iterable[Adapter] = (), *, frozen: bool = True, merge_bytes: int = MERGE_BYTES):
        chosen = sorted(adapters, key=lambda a: a.name)
        names = [a.name for a in chosen]
        if len(set(names)) != len(names):
            raise ConfigError(f"an adapter set names one adapter twice: {names}")
        self.adapters: tuple[Adapter, ...] = tuple(chosen)
        self.frozen = frozen
        # Merging costs a copy of each adapted weight once per set and removes every per-token LoRA
        # op; worth it where those ops dominate (small models), not where the copy is large.
        self.merge = frozen and 0 < _lora_weight_bytes(self.adapters) <= merge_bytes
        self._layers: dict[int, LayerAdapters] | None = self._build() if frozen else None  # training: lazily
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
        if self._layers is None:
            self._layers = self._build()
        return self._layers.get(block)

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
        lora: dict[tuple[int, str], dict[str, list[tuple[torch.Tensor, torch.Tensor]]]] = {}
        with torch.no_grad() if self.frozen else contextlib.nullcontext():
            for adapter in self.adapters:
                for key, per in getattr(adapter, "layers", {}).items():
                    block = int(key)
                    lay = layers.setdefault(block, LayerAdapters(self.merge))
                    if isinstance(adapter, LoraAdapter):
                        for target, pair in per.items():
                            group = lora.setdefault((block, GROUPS[target]), {})
                            group.setdefault(target, []).append((pair.a, pair.b * adapter.scale))
                    elif isinstance(adapter, BottleneckAdapter):
                        for where, pair in per.items():
                            lay.bottleneck.setdefault(where, []).append(pair)
                    elif isinstance(adapter, DeepPrompt):
                        lay.prompts.append((per.prompt, per.gate))
            for (block, group), targets in lora.items():
                a_rows, ranges, start = [], {}, 0
                for target, pairs in targets.items():
                    a = torch.cat([p[0] for p in pairs]) if len(pairs) > 1 else pairs[0][0]  # [r, in]
                    bt = (torch.cat([p[1] for p in pairs], dim=1) if len(pairs) > 1 else pairs[0][1]).t()  # [r, out]
                    a_rows.append(a)
                    ranges[target] = (start, start + a.shape[0], bt.contiguous() if self.frozen else bt)
                    start += a.shape[0]
                a = torch.cat(a_rows) if len(a_rows) > 1 else a_rows[0]
                layers[block].lora[group] = (a.detach().contiguous() if self.frozen else a,
                                             {t: (lo, hi, bt.detach() if self.frozen else bt)
                                              for t, (lo, hi, bt) in ranges.items()})
        return layers


def _lora_weight_bytes(adapters: tuple[Adapter, ...]) -> int:
    """Bytes of the distinct base weights the set's LoRAs adapt (what merging would copy)."""
    adapted = {(int(block), target): pair.b.shape[0] * pair.a.shape[1] * pair.a.element_size()
               for a in adapters if isinstance(a, LoraAdapter) for block, per in a.layers.items()
               for target, pair in per.items()}
    return sum(adapted.values())


EMPTY = AdapterSet()
