"""BlockStack: a contiguous run of transformer blocks [first, last) with its own KV cache.

The encoder, the middle and the decoder are each one stack. A stack only knows its own
blocks: masks come from its own cache length, and each block writes to its own slot of the
stack's cache (global layer indices never leak into the cache)."""

from __future__ import annotations

import torch
from torch import nn

from umbra.errors import ValidationError
from umbra.model.adapters.selection import AdapterSet
from umbra.model.kvcache import KVCache
from umbra.model.layers import Block, attention_mask
from umbra.model.rope import rope_cos_sin
from umbra.model.spec import ModelSpec


class BlockStack(nn.Module):
    def __init__(self, spec: ModelSpec, first: int, last: int):
        super().__init__()
        if not 0 <= first <= last <= spec.num_layers:
            raise ValidationError(f"bad block range [{first}, {last}) for {spec.num_layers} layers")
        self.spec, self.first, self.last = spec, first, last
        self.layers = nn.ModuleList(Block(spec, i) for i in range(first, last))
        self.register_buffer("inv_freq", spec.rope_inv_freq.clone(), persistent=False)

    def new_cache(self, dtype: torch.dtype | None = None) -> KVCache:
        """A cache in `dtype` (None: the blocks'), on the blocks' device."""
        first = next(self.parameters())
        return KVCache(len(self.layers), self.spec.num_kv_heads, self.spec.head_dim, dtype or first.dtype,
                       first.device)

    def forward(
        self,
        x: torch.Tensor,  # [B,T,C]
        positions: torch.Tensor,  # [B,T] int64, explicit rotary positions
        cache: KVCache | None = None,
        key_padding: torch.Tensor | None = None,  # [B, cached+T] bool, True = real token
        adapters: AdapterSet | None = None,  # this request's adapters (only those on these blocks act)
    ) -> torch.Tensor:
        b, t, _ = x.shape
        start = cache.length if cache is not None else 0
        if cache is not None:
            cache.reserve(b, start + t)
        cos, sin = rope_cos_sin(self.inv_freq, positions, self.spec.rope_attention_scaling, x.dtype)
        masks: dict[int | None, torch.Tensor | None] = {}
        for i, block in enumerate(self.layers):
            if block.window not in masks:
                masks[block.window] = attention_mask(start, t, block.window, key_padding, x.device)
            lay = adapters.layer(block.layer_idx) if adapters else None
            x = block(x, cos, sin, masks[block.window], cache, i, start, lay)
        if cache is not None:
            cache.length = start + t
        return x

    def hf_prefix(self, i: int) -> str:
        """Checkpoint key prefix of local block i."""
        return f"model.layers.{self.first + i}."
