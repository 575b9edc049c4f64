"""KV cache for a contiguous range of blocks, owned by one session on one side of the wire.

Both the client (encoder and decoder blocks) and the cloud (middle blocks) keep one per
session. `truncate(n)` rolls the cache back to its first n slots: that is all prefix reuse
needs, since a later request sharing n tokens with the cached ones only runs the rest."""

from __future__ import annotations

import torch

from umbra.errors import ValidationError

_MIN_CAPACITY = 128


class KVCache:
    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype):
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.length = 0  # slots filled (== tokens seen by this part of the model)
        self.batch = 0
        self.max_capacity: int | None = None  # growth stops here (the owner's sequence limit)
        self._k: list[torch.Tensor] = []  # per layer [B, KV, capacity, hd]
        self._v: list[torch.Tensor] = []

    @property
    def capacity(self) -> int:
        return self._k[0].shape[2] if self._k else 0

    @property
    def nbytes(self) -> int:  # every layer's k and v have one shape
        return 2 * len(self._k) * self._k[0].numel() * self._k[0].element_size() if self._k else 0

    def _new_capacity(self, needed: int, current: int) -> int:
        cap = max(_MIN_CAPACITY, needed, 2 * current)
        return min(cap, max(self.max_capacity, needed)) if self.max_capacity else cap

    def bytes_after(self, batch: int, needed: int) -> int:
        """nbytes once `reserve(batch, needed)` has run; computed without allocating anything
        (a budget check before the allocation)."""
        current = self.capacity if batch == self.batch else 0  # reserve() starts over on a new batch size
        if self._k and current and needed <= current:
            return self.nbytes
        cap = self._new_capacity(needed, current)
        per_slot = self.num_kv_heads * self.head_dim * torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * batch * cap * per_slot

    def reserve(self, batch: int, needed: int) -> None:
        """Make room for `needed` slots; keeps the filled prefix."""
        if self._k and batch != self.batch:
            if self.length:
                raise ValidationError(f"batch size changed from {self.batch} to {batch} mid-session")
            self._k, self._v = [], []
        self.batch = batch
        if needed <= self.capacity:
            return
        cap = self._new_capacity(needed, self.capacity)
        shape = (batch, self.num_kv_heads, cap, self.head_dim)
        new_k = [torch.zeros(shape, dtype=self.dtype) for _ in range(self.num_layers)]
        new_v = [torch.zeros(shape, dtype=self.dtype) for _ in range(self.num_layers)]
        for old, new in zip(self._k + self._v, new_k + new_v):
            new[:, :, : self.length] = old[:, :, : self.length]
        self._k, self._v = new_k, new_v

    def write(
        self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B,KV,T,hd] at slots [start, start+T) of `layer` (0-based within this
        cache); return views of all keys and values up to start+T: [B,KV,start+T,hd]."""
        end = start + k.shape[2]
        self._k[layer][:, :, start:end] = k
        self._v[layer][:, :, start:end] = v
        return self._k[layer][:, :, :end], self._v[layer][:, :, :end]

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValidationError(f"cannot truncate a cache of {self.length} slots to {length}")
        self.length = length

    def clear(self) -> None:
        self.length = 0
        self._k, self._v = [], []
