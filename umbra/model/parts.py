"""The three parts of a split model and the plan that cuts it.

    ClientEncoder : embed_tokens + blocks [0, E)            (client)
    MiddleBlocks  : blocks [E, L-D)                          (cloud)
    ClientDecoder : blocks [L-D, L) + final norm + LM head   (client)

Each part is an nn.Module whose parameters are exactly the weights it needs; `loader.py`
fills them from the checkpoint without ever reading another part's tensors."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from umbra.errors import ConfigError
from umbra.model.adapters.config import SplitShape
from umbra.model.adapters.selection import AdapterSet
from umbra.model.kvcache import KVCache
from umbra.model.layers import RMSNorm
from umbra.model.spec import ModelSpec
from umbra.model.stack import BlockStack


@dataclass(frozen=True)
class SplitPlan:
    encoder_blocks: int  # E: blocks run on the client before the wire
    decoder_blocks: int  # D: blocks run on the client after the wire

    @staticmethod
    def default(num_layers: int) -> "SplitPlan":
        """One encoder block; two decoder blocks under 12 layers (NOIR's shape for small models);
        from 12 layers up D = max(1, L // 8 - 1), so from 16 layers up the client holds at most
        1/8 of the blocks (16: E=1 D=1; 24: D=2; 32: D=3) and its per-keystroke work stays small."""
        return SplitPlan(1, 2 if num_layers < 12 else max(1, num_layers // 8 - 1))

    def validate(self, num_layers: int) -> None:
        if self.encoder_blocks < 1 or self.decoder_blocks < 1:
            raise ConfigError("the client must hold at least one encoder and one decoder block")
        if self.encoder_blocks + self.decoder_blocks >= num_layers:
            raise ConfigError(
                f"split E={self.encoder_blocks}, D={self.decoder_blocks} leaves no middle block "
                f"in a {num_layers}-layer model"
            )

    def middle_range(self, num_layers: int) -> tuple[int, int]:
        self.validate(num_layers)
        return self.encoder_blocks, num_layers - self.decoder_blocks

    def shape(self, num_layers: int) -> SplitShape:
        """The split as adapter placement sees it."""
        self.validate(num_layers)
        return SplitShape(num_layers, self.encoder_blocks, self.decoder_blocks)


class ClientEncoder(nn.Module):
    def __init__(self, spec: ModelSpec, plan: SplitPlan):
        super().__init__()
        self.spec = spec
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.stack = BlockStack(spec, 0, plan.encoder_blocks)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B,T] -> embeddings [B,T,C]."""
        return self.embed_tokens(ids)

    def forward(
        self,
        ids: torch.Tensor | None,  # [B,T] (or None when `embeds` is given)
        positions: torch.Tensor,  # [B,T]
        cache: KVCache | None = None,
        embeds: torch.Tensor | None = None,  # [B,T,C], e.g. with a soft prompt prepended
        key_padding: torch.Tensor | None = None,
        adapters: AdapterSet | None = None,  # encoder-placed adapters act here (opt-in placement)
    ) -> torch.Tensor:
        x = self.embed(ids) if embeds is None else embeds
        return self.stack(x, positions, cache, key_padding, adapters)


class MiddleBlocks(nn.Module):
    def __init__(self, spec: ModelSpec, plan: SplitPlan):
        super().__init__()
        self.spec = spec
        first, last = plan.middle_range(spec.num_layers)
        self.stack = BlockStack(spec, first, last)

    def forward(self, x, positions, cache=None, key_padding=None, adapters: AdapterSet | None = None):
        return self.stack(x, positions, cache, key_padding, adapters)


class ClientDecoder(nn.Module):
    def __init__(self, spec: ModelSpec, plan: SplitPlan):
        super().__init__()
        self.spec = spec
        self.stack = BlockStack(spec, spec.num_layers - plan.decoder_blocks, spec.num_layers)
        self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)

    def forward(
        self,
        x: torch.Tensor,  # [B,T,C] from the middle
        positions: torch.Tensor,
        cache: KVCache | None = None,
        key_padding: torch.Tensor | None = None,
        last_only: bool = False,  # only the last position's logits (decoding)
        adapters: AdapterSet | None = None,  # experts and access adapters act here by default
        last: int | None = None,  # only the last `last` positions' logits (a speculative verify)
    ) -> torch.Tensor:
        x = self.stack(x, positions, cache, key_padding, adapters)
        if last_only:
            x = x[:, -1:]
        elif last is not None:
            x = x[:, -last:]
        return self.lm_head(self.norm(x))  # [B,T|1|last,V]
