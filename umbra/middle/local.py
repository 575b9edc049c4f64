"""LocalMiddle: the Middle protocol over an in-process MiddleRuntime (tests, training, --local
comparisons). Compute runs inline; callers still await, so the code above is the same as for
the remote implementation."""

from __future__ import annotations

import torch

from umbra.middle.runtime import MiddleRuntime
from umbra.model.parts import MiddleBlocks


class LocalMiddle:
    def __init__(self, blocks: MiddleBlocks, max_seq_len: int | None = None):
        self.runtime = MiddleRuntime(blocks, max_seq_len)
        self.hidden_size = self.runtime.hidden_size

    async def open_session(self, *, training: bool = False) -> str:
        return self.runtime.create(training)

    async def forward(self, hidden, positions, session, key_padding=None) -> torch.Tensor:
        return self.runtime.forward(session, hidden, positions, key_padding)

    async def backward(self, grad_out, session) -> torch.Tensor:
        return self.runtime.backward(session, grad_out)

    async def truncate(self, session: str, length: int) -> None:
        self.runtime.truncate(session, length)

    async def close(self, session: str) -> None:
        self.runtime.close(session)

    def round_trips(self, session: str) -> int:
        """In process: no trip ever leaves the machine."""
        return 0

    async def aclose(self) -> None:
        self.runtime.sessions.clear()
