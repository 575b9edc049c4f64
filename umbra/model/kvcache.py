"""KV cache for a contiguous range of blocks, owned by one session on one side of the wire.

Both the client (encoder and decoder blocks) and the cloud (middle blocks) keep one per
session. `truncate(n)` rolls the cache back to its first n slots: that is all prefix reuse
needs, since a later request sharing n tokens with the cached ones only runs the rest."""

from __future__ import annotations

import torch

from umbra.errors import ValidationError

_MIN_CAPACITY = 128


class KVCache:
    """Keys and values of every layer in one tensor [layers, 2, B, KV, capacity, hd] (2: k then v),
    so a batched decode step reads a session's whole prefix with one view and stores its new slot
    with one write, and sessions gathered along B give each layer's keys of them all as one
    contiguous [rows, KV, slots, hd] (umbra/model/ragged_attention.py)."""

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device | None = None):  # None: the CPU
        self.device = device
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.length = 0  # slots filled (== tokens seen by this part of the model)
        self.batch = 0
        self.max_capacity: int | None = None  # growth stops here (the owner's sequence limit)
        self._kv: torch.Tensor | None = None  # [layers, 2, B, KV, capacity, hd]

    @property
    def capacity(self) -> int:
        return self._kv.shape[4] if self._kv is not None else 0

    @property
    def nbytes(self) -> int:
        return self._kv.numel() * self._kv.element_size() if self._kv is not None else 0

    def _new_capacity(self, needed: int, current: int) -> int:
        cap = max(_MIN_CAPACITY, needed, 2 * current)
        return min(cap, max(self.max_capacity, needed)) if self.max_capacity else cap

    def bytes_after(self, batch: int, needed: int) -> int:
        """nbytes once `reserve(batch, needed)` has run; computed without allocating anything
        (a budget check before the allocation)."""
        current = self.capacity if batch == self.batch else 0  # reserve() starts over on a new batch size
        if current and needed <= current:
            return self.nbytes
        cap = self._new_capacity(needed, current)
        per_slot = self.num_kv_heads * self.head_dim * torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * batch * cap * per_slot

    def reserve(self, batch: int, needed: int) -> None:
        """Make room for `needed` slots; keeps the filled prefix."""
        if self._kv is not None and batch != self.batch:
            if self.length:
                raise ValidationError(f"batch size changed from {self.batch} to {batch} mid-session")
            self._kv = None
        self.batch = batch
        if needed <= self.capacity:
            return
        cap = self._new_capacity(needed, self.capacity)
        new = torch.zeros(self.num_layers, 2, batch, self.num_kv_heads, cap, self.head_dim, dtype=self.dtype,
                          device=self.device)
        if self._kv is not None:
            new[:, :, :, :, : self.length] = self._kv[:, :, :, :, : self.length]
        self._kv = new

    def write(
        self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B,KV,T,hd] at slots [start, start+T) of `layer` (0-based within this
        cache); return views of all keys and values up to start+T: [B,KV,start+T,hd]."""
        end = start + k.shape[2]
        keys, values = self._kv[layer]  # [B,KV,cap,hd] each
        keys[:, :, start:end] = k
        values[:, :, start:end] = v
        return keys[:, :, :end], values[:, :, :end]

    def prefix(self, slots: int) -> torch.Tensor:
        """A view of the first `slots` slots of every layer: [layers, 2, B, KV, slots, hd]."""
        if slots > self.capacity:
            raise ValidationError(f"a cache of {self.capacity} slots has no prefix of {slots}")
        return self._kv[:, :, :, :, :slots]

    def layer_prefix(self, layer: int, slots: int) -> torch.Tensor:
        """A view of the first `slots` slots of one layer: [2, B, KV, slots, hd]."""
        return self.prefix(slots)[layer]

    def put_slot(self, slot: int, kv: torch.Tensor) -> None:
        """Store one slot of every layer, kv [layers, 2, B, KV, hd] (a batched decode step's keys
        and values, written once after its last layer)."""
        self._kv[:, :, :, :, slot] = kv

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValidationError(f"cannot truncate a cache of {self.length} slots to {length}")
        self.length = length

    def clear(self) -> None:
        self.length = 0
        self._kv = None
