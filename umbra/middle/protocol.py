"""The contract of the middle blocks, whoever runs them.

A Middle behaves like the blocks [E, L-D) it replaces: hidden states in, hidden states out,
with a KV cache per session. `LocalMiddle` runs them in-process; `RemoteMiddle` runs them in
the cloud service. Sessions are opaque handles; a session is either for inference (KV cache,
prefix reuse by `truncate`) or for training (no cache; `backward` recomputes the forward of the
last `forward` call and returns the gradient at the middle's input).

`round_trips(session)` counts the session's trips to the cloud so far (each HTTP request, each
WebSocket upgrade and each stream step; 0 in process). It is part of every Middle in umbra/,
but not a runtime-checked member of the protocol: call it through `round_trips(middle, session)`,
which reads 0 from a Middle that does not count (a test's stand-in)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class Middle(Protocol):
    hidden_size: int  # C of hidden[B,T,C]

    async def open_session(self, *, training: bool = False) -> str:
        """Start a session; returns its handle."""
        ...

    async def forward(
        self,
        hidden: torch.Tensor,  # [B,T,C] encoder output
        positions: torch.Tensor,  # [B,T] int64 rotary positions
        session: str,
        key_padding: torch.Tensor | None = None,  # [B, cached+T] bool, True = real token
    ) -> torch.Tensor:  # [B,T,C] middle output, same dtype as `hidden`
        ...

    async def backward(self, grad_out: torch.Tensor, session: str) -> torch.Tensor:
        """grad at the middle's output [B,T,C] -> grad at its input [B,T,C] (training sessions)."""
        ...

    async def truncate(self, session: str, length: int) -> None:
        """Keep only the first `length` cached positions of an inference session."""
        ...

    async def close(self, session: str) -> None: ...

    async def aclose(self) -> None:
        """Release connections and sessions held by this Middle."""
        ...


def round_trips(middle: object, session: str | None) -> int:
    """`middle.round_trips(session)`, or 0 when there is no session or the Middle does not count."""
    count = getattr(middle, "round_trips", None)
    return 0 if session is None or count is None else int(count(session))
