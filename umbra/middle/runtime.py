"""MiddleRuntime: the middle blocks plus their sessions, synchronous and transport-free.

The cloud service wraps it with auth, budgets and eviction; `LocalMiddle` wraps it for
in-process use. All input validation of hidden states happens here, once, for both."""

from __future__ import annotations

import math
import secrets
import time
from dataclasses import dataclass, field

import torch

from umbra.errors import SessionError, ValidationError
from umbra.model.adapters.selection import AdapterSet
from umbra.model.kvcache import KVCache
from umbra.model.parts import MiddleBlocks
from umbra.model.transfer import Transfer


@dataclass
class SessionState:
    training: bool
    cache: KVCache | None  # inference sessions only
    saved: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None  # training: last inputs
    created: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)

    @property
    def length(self) -> int:
        return self.cache.length if self.cache is not None else 0

    @property
    def nbytes(self) -> int:
        if self.cache is not None:
            return self.cache.nbytes
        return sum(t.numel() * t.element_size() for t in (self.saved or ()) if t is not None)


class MiddleRuntime:
    def __init__(self, blocks: MiddleBlocks, max_seq_len: int | None = None):
        self.blocks = blocks
        self.hidden_size = blocks.spec.hidden_size
        self.dtype = next(blocks.parameters()).dtype
        self.device = next(blocks.parameters()).device  # frames arrive and leave on the CPU; cast at the edge
        self.transfer = Transfer(self.device)  # that edge: pinned buffers on CUDA (umbra/model/transfer.py)
        self.max_seq_len = max_seq_len or blocks.spec.max_position_embeddings
        self.sessions: dict[str, SessionState] = {}

    # -- sessions ---------------------------------------------------------------------------
    def create(self, training: bool = False) -> str:
        sid = secrets.token_urlsafe(16)
        cache = None if training else self.blocks.stack.new_cache(self.dtype)
        if cache is not None:
            cache.max_capacity = self.max_seq_len  # never reserve slots the session cannot use
        self.sessions[sid] = SessionState(training=training, cache=cache)
        return sid

    def get(self, sid: str) -> SessionState:
        state = self.sessions.get(sid)
        if state is None:
            raise SessionError(f"unknown session {sid[:8]}…")
        state.last_used = time.monotonic()
        return state

    def close(self, sid: str) -> None:
        if self.sessions.pop(sid, None) is None:
            raise SessionError(f"unknown session {sid[:8]}…")

    def truncate(self, sid: str, length: int) -> None:
        state = self.get(sid)
        if state.cache is None:
            raise ValidationError("truncate applies to inference sessions only")
        state.cache.truncate(length)

    # -- compute ----------------------------------------------------------------------------
    def validate(self, state: SessionState, hidden, positions, key_padding) -> None:
        if hidden.dim() != 3 or hidden.shape[-1] != self.hidden_size:
            raise ValidationError(
                f"hidden states must be [B,T,{self.hidden_size}], got {list(hidden.shape)}"
            )
        b, t, _ = hidden.shape
        if b < 1 or t < 1:
            raise ValidationError("hidden states must hold at least one position")
        if not hidden.is_floating_point():
            raise ValidationError(f"hidden states must be floating point, got {hidden.dtype}")
        if tuple(positions.shape) != (b, t) or positions.dtype != torch.int64:
            raise ValidationError(f"positions must be int64 [{b},{t}], got {positions.dtype} {list(positions.shape)}")
        # few ops: this runs on every decode step (a lone position is read back as is)
        low, high = (positions.item(),) * 2 if positions.numel() == 1 else map(int, torch.aminmax(positions))
        if low < 0 or high >= self.max_seq_len:
            raise ValidationError(f"positions must lie in [0, {self.max_seq_len})")
        if state.length + t > self.max_seq_len:
            raise ValidationError(f"session would exceed the maximum sequence length {self.max_seq_len}")
        if not math.isfinite(hidden.abs().max().item()):  # max propagates NaN; fewer ops than isfinite().all()
            raise ValidationError("hidden states contain NaN or Inf")
        if key_padding is not None and tuple(key_padding.shape) != (b, state.length + t):
            raise ValidationError(f"key_padding must be [{b},{state.length + t}]")

    def forward(self, sid: str, hidden: torch.Tensor, positions: torch.Tensor,
                key_padding: torch.Tensor | None = None, adapters: AdapterSet | None = None) -> torch.Tensor:
        """`adapters`: the cloud's own adapters for this caller's session (umbra/middle/lora_store.py), if any."""
        state = self.get(sid)
        self.validate(state, hidden, positions, key_padding)
        x, positions = self.transfer.to_device(hidden, self.dtype), self.transfer.to_device(positions)
        key_padding = None if key_padding is None else self.transfer.to_device(key_padding)
        if state.training:
            state.saved = (x, positions, key_padding)
        with torch.no_grad():
            y = self.blocks(x, positions, state.cache, key_padding, adapters)
        return self.transfer.to_host(y, hidden)

    def backward(self, sid: str, grad_out: torch.Tensor, adapters: AdapterSet | None = None) -> torch.Tensor:
        """Recompute the last forward with autograd and return d loss / d input."""
        state = self.get(sid)
        if not state.training or state.saved is None:
            raise ValidationError("backward needs a training session with a forward before it")
        x, positions, key_padding = state.saved
        if tuple(grad_out.shape) != tuple(x.shape):
            raise ValidationError(f"gradient must be {list(x.shape)}, got {list(grad_out.shape)}")
        if not torch.isfinite(grad_out).all():
            raise ValidationError("gradient contains NaN or Inf")
        x = x.detach().requires_grad_(True)
        with torch.enable_grad():
            y = self.blocks(x, positions, None, key_padding, adapters)
            y.backward(grad_out.to(y.device, y.dtype))
        state.saved = None
        return x.grad.to(grad_out.device, grad_out.dtype)
