"""What RemoteMiddle keeps per cloud session to recover it (the encoder outputs it sent, with
their positions and mask, so an evicted or lost session is re-prefilled transparently), and its
count of payload bytes on the wire."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import torch
from websockets.asyncio.client import ClientConnection


@dataclass
class WireStats:
    """Payload bytes on the wire (frames and JSON bodies; no HTTP/WS/TLS framing)."""

    bytes_sent: int = 0
    bytes_received: int = 0
    http_requests: int = 0
    ws_messages: int = 0  # stream messages sent
    reprefills: int = 0  # transparent recoveries after eviction / expiry / desync / a lost replica

    def reset(self) -> None:
        self.__init__()


@dataclass
class RemoteSession:
    training: bool
    route: str  # routing key sent as the balancer's routing header (remote.ROUTING_HEADER) with every request of this session
    remote: str | None = None  # cloud session id; None: (re)open and re-prefill before the next step
    chunks: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # sent (hidden, positions)
    key_padding: torch.Tensor | None = None  # latest full mask [B, length], if the caller used one
    ws: ClientConnection | None = None
    ws_opening: asyncio.Task | None = None  # the stream's upgrade under way after a step over HTTP
    dirty: bool = False  # a step was cancelled in flight: the cloud may hold more than `length`
    trim: bool = False  # truncated here, not yet on the cloud: the next frame is FORWARD_TRIM to `length`
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    length: int = 0  # positions in `chunks`
    trips: int = 0  # round trips to the cloud: HTTP requests, stream upgrades and stream steps

    def append(self, hidden: torch.Tensor, positions: torch.Tensor) -> None:
        self.chunks.append((hidden, positions))
        self.length += hidden.shape[1]

    def keep(self, length: int) -> None:
        kept, n = [], 0
        for h, p in self.chunks:
            if n >= length:
                break
            take = min(h.shape[1], length - n)
            kept.append((h[:, :take], p[:, :take]))
            n += take
        self.chunks, self.length = kept, n
        if self.key_padding is not None:
            self.key_padding = self.key_padding[:, :length]
