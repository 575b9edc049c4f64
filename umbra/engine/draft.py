"""The draft model of speculative decoding: the client's own blocks with the middle skipped.

The encoder's output goes straight into the decoder (the "client blocks alone" control of
DESIGN.md §5, umbra/middle/skip.py) on caches of its own, in process: drafting sends nothing
anywhere. Its caches follow the session's ids by common prefix, like the session's own, so a
draft after an accepted frame or a new keystroke runs only the new ids. It runs without the
private path's noise (nothing is sent, and a draft only has to be often right).

Under a bundle whose private path has the clean residual (`umbra tune`'s default), the decoder
was tuned to read h_c + g ⊙ (y − sent), h_c being the encoder over the clean table: with the
middle the identity (y = sent) that is h_c, so the draft's encoder runs over the clean table too,
never over the INDVocab table (whose states only the middle's path makes sense of)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import torch

from umbra.engine.runner import _Parts, common_prefix
from umbra.model.adapters.selection import AdapterSet
from umbra.model.parts import ClientDecoder, ClientEncoder
from umbra.model.private_path import PrivatePath


class SkipRunner(_Parts):
    """Encoder -> decoder, the middle the identity (also client_only.py's runner). With a private
    path that has the clean residual, the encoder reads the path's clean table (above)."""

    def __init__(self, encoder: ClientEncoder, decoder: ClientDecoder, private_path: PrivatePath | None = None):
        super().__init__(encoder, decoder)  # no private path here: nothing is sent, so no noise
        clean = private_path is not None and private_path.config.clean
        self.table = private_path.clean_embed if clean else None  # [V, d] or None

    async def _step(self, hidden_in: torch.Tensor | None, ids: list[int] | None, start: int,
                    every: bool = False, last: int | None = None) -> torch.Tensor:
        if self.table is not None and ids is not None:  # h_c: the encoder over the clean table
            hidden_in = self.table[torch.tensor(ids)][None].to(self.encoder.embed_tokens.weight.dtype)  # [1, T, d]
            ids = None
        return await super()._step(hidden_in, ids, start, every, last)

    async def _mid_forward(self, hidden, pos):
        return hidden

    async def _mid_truncate(self, total: int) -> None:
        pass

    async def reset(self) -> None:
        self._forget()

    async def close(self) -> None:
        self._forget()


class DraftModel:
    def __init__(self, encoder: ClientEncoder, decoder: ClientDecoder, allowed: torch.Tensor,
                 chunk: int = 256, private_path: PrivatePath | None = None):
        self.runner = SkipRunner(encoder, decoder, private_path)
        self.allowed = allowed  # bool [V]: ids a completion may contain
        self.chunk = chunk  # ids per forward while catching up (a cancellation point between)
        self._cached: list[int] = []  # ids whose KV the draft caches hold

    async def extend(self, seq: list[int], n: int, adapters: AdapterSet,
                     checkpoint: Callable[[], Awaitable[None]]) -> list[int]:
        """n greedy ids continuing `seq` (n >= 1, seq non-empty)."""
        await self.runner.use(adapters)
        self._cached = self._cached[: self.runner.length]  # after a cancelled step
        common = min(common_prefix(self._cached, seq), len(seq) - 1)
        await self.runner.truncate(common)
        del self._cached[common:]
        logits = None
        for start in range(common, len(seq), self.chunk):
            await checkpoint()
            logits = await self._run(seq[start : start + self.chunk])
        out: list[int] = []
        while True:
            out.append(int(torch.argmax(logits.masked_fill(~self.allowed, float("-inf")))))
            if len(out) == n:
                return out
            logits = await self._run(out[-1:])

    async def _run(self, ids: list[int]) -> torch.Tensor:
        logits = await self.runner.run(ids)
        self._cached.extend(ids)
        return logits
