"""Runners: the one thing the completion engine calls to turn token ids into next-token logits.

A runner owns the KV caches of one completion session and feeds ids at positions after the
cached ones. Two implementations share the contract (and `_Parts`, the cache bookkeeping):

SplitRunner       ClientEncoder -> any Middle (LocalMiddle, RemoteMiddle) -> ClientDecoder,
                  with client KV caches for the encoder and decoder blocks and one middle
                  session; the production path.
MonolithicRunner  encoder + MiddleBlocks + decoder in-process with no seam: the "monolithic
                  lean loop" baseline for benchmarks and `umbra complete --local`.

Adapters (`use(adapters)` before a request): the caches hold the states of one adapter set. A
request with another set invalidates what that set changes and nothing more. A change on the
decoder side only (the default placement: experts, access adapters) rebuilds the decoder cache
from the middle's outputs, which the runner keeps: nothing is sent again, so the cloud cannot
tell that the set changed. A change of encoder-side adapters or of the soft prompt resets every
part. A soft prompt occupies the first `prompt_length` positions of the session: it is run (and
sent) once, truncation never cuts it, and `length` counts the token positions after it.

If a step fails or is cancelled half-way (e.g. while awaiting the cloud), the parts may hold
different lengths; the runner remembers its last consistent length and rolls every part back
to it before the next call. A truncation cancelled half-way counts as done: the parts not yet
cut are cut before the next call (so no part is ever asked to grow back).

A private local path (umbra/model/private_path.py), when the model has one, runs here exactly as
STuning trained it: each step sends `path.send(h, z)` — z from the session's keyed noise stream,
which is extended, truncated and reset with the caches, so a re-sent prefix carries the same
noise — and feeds the decoder `y + W·h` at the same positions; `mid_out` keeps that decoder
input, so a decoder-side adapter change rebuilds from it without sending anything. With the
clean residual the encoder blocks also run over the clean table, before the middle is awaited,
with a KV cache of their own (`clean_cache`) that is truncated, cleared and rolled back with the
encoder's; the decoder gets `h_c + g ⊙ (y − sent)`, and what is sent is the same as without it."""

from __future__ import annotations

import abc
import hashlib
from typing import Protocol

import torch

from umbra.errors import UmbraError
from umbra.middle.protocol import Middle, round_trips
from umbra.model.adapters.selection import EMPTY, AdapterSet
from umbra.model.parts import ClientDecoder, ClientEncoder, MiddleBlocks
from umbra.model.prefix_noise import embed_entries
from umbra.model.private_path import PrivatePath


class Runner(Protocol):
    length: int  # tokens cached consistently by every part of the model (after the soft prompt)
    prompt_length: int  # positions the active soft prompt occupies before them

    @property
    def round_trips(self) -> int:
        """Round trips to the cloud over this runner's life (every middle session it used)."""
        ...

    async def use(self, adapters: AdapterSet) -> None:
        """Serve the next calls with `adapters`, invalidating the caches they change."""
        ...

    async def run(self, ids: list[int], every: bool = False, last: int | None = None) -> torch.Tensor:
        """Feed `ids` after the cached tokens; return the last position's logits [V] (fp32), or
        every position's [T, V] when `every`, or the last `last` positions' [last, V]
        (speculative verification)."""
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


class HiddenBuffer:
    """The middle's outputs [1, S, C] of the cached positions, grown by doubling."""

    def __init__(self) -> None:
        self._data: torch.Tensor | None = None
        self.length = 0

    def write(self, start: int, hidden: torch.Tensor) -> None:  # hidden [1,T,C]
        end = start + hidden.shape[1]
        if self._data is None or end > self._data.shape[1] or self._data.dtype != hidden.dtype:
            cap = max(128, end, 2 * (self._data.shape[1] if self._data is not None else 0))
            new = hidden.new_zeros(1, cap, hidden.shape[2])
            if self._data is not None:
                new[:, : self.length] = self._data[:, : self.length]
            self._data = new
        self._data[:, start:end] = hidden
        self.length = end

    def view(self) -> torch.Tensor:
        return self._data[:, : self.length]

    def truncate(self, length: int) -> None:
        self.length = min(self.length, length)


class _Parts(abc.ABC):
    """Cache bookkeeping shared by both runners; subclasses supply the middle."""

    def __init__(self, encoder: ClientEncoder, decoder: ClientDecoder, private_path: PrivatePath | None = None):
        self.encoder, self.decoder = encoder, decoder
        self.path = private_path
        self.noise = private_path.stream() if private_path is not None else None  # keyed, per position
        self.enc_cache = encoder.stack.new_cache()
        # the clean residual's own pass of the encoder blocks over the clean table: a cache of its own
        self.clean_cache = encoder.stack.new_cache() if private_path is not None and private_path.config.clean else None
        self.dec_cache = decoder.stack.new_cache()
        self.mid_out = HiddenBuffer()  # the decoder's input, to rebuild its cache when its adapters change
        self._enc_blocks = range(encoder.stack.first, encoder.stack.last)
        self._dec_blocks = range(decoder.stack.first, decoder.stack.last)
        self.adapters: AdapterSet = EMPTY
        self._enc_key: tuple = ()  # adapters (and soft prompt) the encoder-side caches were built with
        self._dec_key: tuple = ()  # adapters the decoder cache was built with
        self.prompt_length = 0  # positions of the soft prompt, once it has been run
        self.length = 0
        self._dirty = False  # a step started but did not finish: parts may disagree on length

    # -- the middle (subclasses) ---------------------------------------------------------------
    async def _mid_ready(self) -> None:
        """Make sure the middle can take a step (SplitRunner opens its session here)."""

    @abc.abstractmethod
    async def _mid_forward(self, hidden: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The middle's output [1,T,C] for the encoder's output at positions `pos`."""

    @abc.abstractmethod
    async def _mid_truncate(self, total: int) -> None:
        """Keep the middle's first `total` cached positions."""

    # -- shared --------------------------------------------------------------------------------
    def _total(self) -> int:
        return self.prompt_length + self.length

    def _clean_caches(self) -> list:
        return [] if self.clean_cache is None else [self.clean_cache]

    async def _truncate_parts(self, total: int) -> None:
        for cache in [self.enc_cache, *self._clean_caches()]:
            cache.truncate(min(total, cache.length))
        self.dec_cache.truncate(min(total, self.dec_cache.length))
        self.mid_out.truncate(total)
        if self.noise is not None:
            self.noise.truncate(total)
        await self._mid_truncate(total)

    async def _sync(self) -> None:
        await self._mid_ready()
        if self._dirty:
            await self._truncate_parts(self._total())
            self._dirty = False

    async def use(self, adapters: AdapterSet) -> None:
        enc_key = adapters.key_for(self._enc_blocks, soft_prompt=True)
        dec_key = adapters.key_for(self._dec_blocks)
        await self._sync()
        if enc_key != self._enc_key:  # what the encoder sends changes: every part starts over
            self._forget()
            self._dirty = True  # until the middle is emptied too (see `truncate`)
            await self._mid_truncate(0)
            self._dirty = False
        elif dec_key != self._dec_key and self._total():  # decoder side only: rebuild it locally
            self.dec_cache.clear()
            pos = _positions(0, self._total())
            with torch.no_grad():
                self.decoder.stack(self.mid_out.view(), pos, self.dec_cache, adapters=adapters)
        self.adapters, self._enc_key, self._dec_key = adapters, enc_key, dec_key

    async def _step(self, hidden_in: torch.Tensor | None, ids: list[int] | None, start: int,
                    every: bool = False, last: int | None = None) -> torch.Tensor:
        """Run positions [start, start+T) through every part; the last position's logits [1,1,V]
        (every position's [1,T,V] when `every`, the last `last` positions' with `last`)."""
        n = hidden_in.shape[1] if hidden_in is not None else len(ids)
        pos = _positions(start, n)
        with torch.no_grad():
            x = torch.tensor([ids], dtype=torch.int64) if ids is not None else None
            hidden = self.encoder(x, pos, self.enc_cache, embeds=hidden_in, adapters=self.adapters)
            sent = hidden if self.path is None else self.path.send(hidden, self._noise(hidden_in, ids, start))
            clean = None if self.clean_cache is None else self.path.clean_hidden(
                self.encoder, x, pos, self.clean_cache, embeds=hidden_in, adapters=self.adapters)
        out = await self._mid_forward(sent, pos)
        with torch.no_grad():
            dec_in = out if self.path is None else self.path.decoder_input(out, hidden, sent=sent, clean=clean)
        self.mid_out.write(start, dec_in)
        with torch.no_grad():
            return self.decoder(dec_in, pos, self.dec_cache, last_only=not every and last is None,
                                adapters=self.adapters, last=None if every else last)

    def _noise(self, hidden_in: torch.Tensor | None, ids: list[int] | None, start: int) -> torch.Tensor | None:
        """The keyed noise of positions [start, start+T) ([1,T,width]); None without noise."""
        if self.noise is None:
            return None
        self.noise.truncate(start)  # a step that failed after drawing left positions beyond it
        if self.noise.length != start:
            raise UmbraError(f"the noise stream holds {self.noise.length} positions, the step starts at {start}")
        if ids is not None:
            z = self.noise.extend_ids(ids)
        else:  # soft-prompt positions: named by the prompt's bytes and their index
            digest = hashlib.sha256(hidden_in.detach().float().contiguous().cpu().numpy().tobytes()).digest()
            z = self.noise.extend(embed_entries(digest, hidden_in.shape[1]))
        return torch.from_numpy(z).float()[None]

    async def run(self, ids: list[int], every: bool = False, last: int | None = None) -> torch.Tensor:
        await self._sync()
        self._dirty = True
        soft = self.adapters.soft_prompt
        if soft is not None and self.prompt_length == 0:  # first use of this prompt: run it once
            await self._step(soft[None].to(self.encoder.embed_tokens.weight.dtype), None, 0)
            self.prompt_length = soft.shape[0]
        logits = await self._step(None, ids, self._total(), every, last)
        self.length += len(ids)
        self._dirty = False
        return logits[0].float() if every or last is not None else logits[0, -1].float()

    async def truncate(self, length: int) -> None:
        await self._sync()
        if length < self.length:
            # `length` is what every part holds from now on: cancelled while the middle truncates,
            # the parts are cut to it by the next call's `_sync` (never one left longer than the rest)
            self.length, self._dirty = length, True
            await self._truncate_parts(self.prompt_length + length)
            self._dirty = False

    def _forget(self) -> None:
        """Empty every client-side cache; the adapter set stays (the next run starts from its prompt)."""
        for cache in [self.enc_cache, *self._clean_caches()]:
            cache.clear()
        self.dec_cache.clear()
        self.mid_out.truncate(0)
        if self.noise is not None:
            self.noise.truncate(0)
        self.prompt_length = self.length = 0
        self._dirty = False


class SplitRunner(_Parts):
    def __init__(self, encoder: ClientEncoder, decoder: ClientDecoder, middle: Middle,
                 private_path: PrivatePath | None = None):
        super().__init__(encoder, decoder, private_path)
        self.middle = middle
        self.session: str | None = None
        self._past_trips = 0  # round trips of the middle sessions this runner no longer holds

    @property
    def round_trips(self) -> int:
        return self._past_trips + round_trips(self.middle, self.session)

    async def _mid_ready(self) -> None:
        if self.session is None:
            self.session = await self.middle.open_session()

    async def _mid_forward(self, hidden, pos):
        return await self.middle.forward(hidden, pos, self.session)

    async def _mid_truncate(self, total: int) -> None:
        await self.middle.truncate(self.session, total)

    async def reset(self) -> None:
        self._past_trips = self.round_trips
        old, self.session = self.session, None
        self._forget()
        if old is not None:
            try:
                await self.middle.close(old)
            except UmbraError:  # the cloud already dropped it; nothing else to release
                pass

    async def close(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            await self.middle.close(session)


class MonolithicRunner(_Parts):
    def __init__(self, encoder: ClientEncoder, middle: MiddleBlocks, decoder: ClientDecoder,
                 private_path: PrivatePath | None = None):
        super().__init__(encoder, decoder, private_path)
        self.middle = middle
        self.mid_cache = middle.stack.new_cache()
        self.round_trips = 0  # nothing leaves the process

    async def _mid_forward(self, hidden, pos):
        with torch.no_grad():
            return self.middle(hidden, pos, self.mid_cache)

    async def _mid_truncate(self, total: int) -> None:
        self.mid_cache.truncate(min(total, self.mid_cache.length))

    async def reset(self) -> None:
        self.mid_cache.clear()
        self._forget()

    async def close(self) -> None:
        await self.reset()


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists (what a cache can keep)."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
