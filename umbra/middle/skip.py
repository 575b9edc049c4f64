"""The middle skipped: the client's own blocks alone, nothing sent anywhere.

The control every private mode is held against (issue 17, docs/privacy/frontier.md): the
client's encoder output goes straight into its decoder. `SkipBlocks` stands where
`MiddleBlocks` stands (whole-model evaluation, `umbra.evaluation.next_token.lean_logits_fn`);
`SkipMiddle` speaks the Middle protocol, so the tuning loop trains the same client parameters
with the same data, steps and schedule as through a cloud — only the middle is the identity.
Its backward is the identity too: the gradient at the middle's output is the gradient at its
input. No hidden state leaves the process; there is nothing to record."""

from __future__ import annotations

import secrets

import torch
from torch import nn

from umbra.errors import SessionError, ValidationError


class SkipBlocks(nn.Module):
    """The identity in place of MiddleBlocks: x [B,T,C] -> x."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache=None, key_padding=None,
                adapters=None) -> torch.Tensor:
        if x.shape[-1] != self.hidden_size:
            raise ValidationError(f"hidden size {x.shape[-1]}, expected {self.hidden_size}")
        return x


class SkipMiddle:
    """The Middle protocol with no middle: forward and backward are the identity."""

    def __init__(self, hidden_size: int):
        self.hidden_size = hidden_size
        self._sessions: dict[str, bool] = {}  # handle -> training

    async def open_session(self, *, training: bool = False) -> str:
        sid = secrets.token_urlsafe(16)
        self._sessions[sid] = training
        return sid

    def _check(self, session: str) -> bool:
        if session not in self._sessions:
            raise SessionError(f"unknown session {session[:8]}…")
        return self._sessions[session]

    async def forward(self, hidden: torch.Tensor, positions: torch.Tensor, session: str,
                      key_padding: torch.Tensor | None = None) -> torch.Tensor:
        self._check(session)
        if hidden.dim() != 3 or hidden.shape[-1] != self.hidden_size:
            raise ValidationError(f"hidden states must be [B,T,{self.hidden_size}], got {tuple(hidden.shape)}")
        return hidden.clone()

    async def backward(self, grad_out: torch.Tensor, session: str) -> torch.Tensor:
        if not self._check(session):
            raise SessionError("backward needs a training session")
        return grad_out.clone()

    async def truncate(self, session: str, length: int) -> None:
        self._check(session)

    async def close(self, session: str) -> None:
        self._sessions.pop(session, None)

    def round_trips(self, session: str) -> int:
        return 0  # nothing is sent anywhere

    async def aclose(self) -> None:
        self._sessions.clear()
