"""Runners: the one thing the completion engine calls to turn token ids into next-token logits.

A runner owns the KV caches of one completion session and feeds ids at positions
[length, length + T). Two implementations share the contract:

SplitRunner       ClientEncoder -> any Middle (LocalMiddle, RemoteMiddle) -> ClientDecoder,
                  with client KV caches for the encoder and decoder blocks and one middle
                  session; the production path.
MonolithicRunner  encoder + MiddleBlocks + decoder in-process with no seam: the "monolithic
                  lean loop" baseline for benchmarks and `umbra complete --local`.

If a step fails or is cancelled half-way (e.g. while awaiting the cloud), the parts may hold
different lengths; the runner remembers its last consistent length and rolls every part back
to it before the next call."""

from __future__ import annotations

from typing import Protocol

import torch

from umbra.errors import UmbraError
from umbra.middle.protocol import Middle
from umbra.model.parts import ClientDecoder, ClientEncoder, MiddleBlocks


class Runner(Protocol):
    length: int  # tokens cached consistently by every part of the model

    async def run(self, ids: list[int]) -> torch.Tensor:
        """Feed `ids` after the cached tokens; return the last position's logits [V] (fp32)."""
        ...

    async def truncate(self, length: int) -> None:
        """Keep only the first `length` cached tokens."""
        ...

    async def reset(self) -> None:
        """Forget everything (a fresh middle session); used after the cloud evicted ours."""
        ...

    async def close(self) -> None: ...


def _positions(start: int, n: int) -> torch.Tensor:
    return torch.arange(start, start + n, dtype=torch.int64)[None]  # [1,T]


class SplitRunner:
    def __init__(self, encoder: ClientEncoder, decoder: ClientDecoder, middle: Middle):
        self.encoder, self.decoder, self.middle = encoder, decoder, middle
        self.enc_cache = encoder.stack.new_cache()
        self.dec_cache = decoder.stack.new_cache()
        self.session: str | None = None
        self.length = 0
        self._dirty = False  # a step started but did not finish: parts may disagree on length

    async def _sync(self) -> None:
        if self.session is None:
            self.session = await self.middle.open_session()
        if self._dirty:
            await self._truncate_parts(self.length)
            self._dirty = False

    async def _truncate_parts(self, length: int) -> None:
        self.enc_cache.truncate(min(length, self.enc_cache.length))
        self.dec_cache.truncate(min(length, self.dec_cache.length))
        await self.middle.truncate(self.session, length)

    async def run(self, ids: list[int]) -> torch.Tensor:
        await self._sync()
        start, n = self.length, len(ids)
        pos = _positions(start, n)
        self._dirty = True
        with torch.no_grad():
            hidden = self.encoder(torch.tensor([ids], dtype=torch.int64), pos, self.enc_cache)
        hidden = await self.middle.forward(hidden, pos, self.session)
        with torch.no_grad():
            logits = self.decoder(hidden, pos, self.dec_cache, last_only=True)
        self.length = start + n
        self._dirty = False
        return logits[0, -1].float()

    async def truncate(self, length: int) -> None:
        await self._sync()
        if length < self.length:
            await self._truncate_parts(length)
            self.length = length

    async def reset(self) -> None:
        old, self.session = self.session, None
        self.enc_cache.clear()
        self.dec_cache.clear()
        self.length, self._dirty = 0, False
        if old is not None:
            try:
                await self.middle.close(old)
            except UmbraError:  # the cloud already dropped it; nothing else to release
                pass

    async def close(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            await self.middle.close(session)


class MonolithicRunner:
    def __init__(self, encoder: ClientEncoder, middle: MiddleBlocks, decoder: ClientDecoder):
        self.parts = (encoder, middle, decoder)
        self.caches = tuple(p.stack.new_cache() for p in self.parts)
        self.length = 0

    async def run(self, ids: list[int]) -> torch.Tensor:
        encoder, middle, decoder = self.parts
        ce, cm, cd = self.caches
        for cache in self.caches:  # roll back a step that raised half-way
            cache.truncate(min(self.length, cache.length))
        pos = _positions(self.length, len(ids))
        with torch.no_grad():
            hidden = encoder(torch.tensor([ids], dtype=torch.int64), pos, ce)
            hidden = middle(hidden, pos, cm)
            logits = decoder(hidden, pos, cd, last_only=True)
        self.length += len(ids)
        return logits[0, -1].float()

    async def truncate(self, length: int) -> None:
        if length < self.length:
            for cache in self.caches:
                cache.truncate(min(length, cache.length))
            self.length = length

    async def reset(self) -> None:
        for cache in self.caches:
            cache.clear()
        self.length = 0

    async def close(self) -> None:
        await self.reset()
