"""Speculative split decoding: several tokens per cloud round trip, the same output.

Step-by-step decoding pays one round trip to the middle per token. Here the client drafts k
tokens itself and sends them, behind the token just chosen, as ONE forward of k + 1 positions;
the client's decoder then reads the logits of every position in order, choosing each token as
step-by-step decoding would (`Continuation.choose`: the same sampler, the same healing
constraint), and keeps drafts while they equal that choice. The first disagreeing choice is the
"plus one" token; the rejected drafts are dropped from every cache, the client's and the middle
session's (`drop`, a truncate). So the tokens are those of step-by-step decoding, only the
number of trips changes. A draft that token healing forbids is never the choice, so it is a
rejection like any other.

Drafts, in this order, until k are drafted:
  prompt lookup  the ids that followed the latest earlier occurrence of the last n-gram
                 (n = ngram .. min_ngram) in the prompt (prefix and suffix) and the tokens so far;
  draft model    the client's own blocks with the middle skipped (encoder -> decoder, greedy),
                 with caches of their own that follow the session's ids by common prefix;
  padding        the last drafted id repeated, so that every frame has k + 1 positions.
The draft model drafts position j only while its measured acceptance p gives p**j >= min_acceptance:
a poor drafter costs client compute, not frame size.

What the cloud sees (invariant 8, DESIGN.md): every verify frame carries k + 1 positions, whatever
the acceptance; near the end of the context window, where k + 1 no longer fit, frames of one
position (a function of the position alone). Whether a request speculates depends on the mode,
on greedy sampling and on the measured trip latency (`LinkClock`: the link and the load), never
on the acceptance. The truncation points do reveal how many drafts were accepted: that is the
leak invariant 8 asks to measure and document.

Only greedy requests speculate (temperature 0): with sampling the choice of one position would
need the standard speculative-sampling acceptance rule to keep the distribution, which is not
implemented; a sampled request decodes step by step.

Exactness holds to the float: the verify forward computes k + 1 positions in one batch, whose
kernels may round differently from k + 1 single steps (measured ~1e-5 on logits); a greedy
choice can differ only where two logits are that close — the same sensitivity the prompt's
chunking and prefix reuse already have."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
import torch

from umbra.engine.config import SpeculationConfig
from umbra.engine.decoding import Continuation
from umbra.engine.draft import DraftModel
from umbra.model.adapters.selection import AdapterSet

_EWMA = 0.2  # weight of the newest observation in the running means


@dataclass
class SpeculationCounts:
    """Counts of one request's speculation (no ids): frames and drafts per source."""

    frames: int = 0  # verify frames sent (each one round trip, plus one for a truncate)
    lookup_drafted: int = 0
    lookup_accepted: int = 0
    model_drafted: int = 0
    model_accepted: int = 0
    padded: int = 0  # positions that carried padding, not a draft


class LinkClock:
    """The running mean of a decode trip's latency (a step or a verify frame), shared by an
    engine's sessions: what `auto` decides on."""

    def __init__(self) -> None:
        self.trip_ms: float | None = None

    def observe(self, seconds: float) -> None:
        ms = seconds * 1000.0
        self.trip_ms = ms if self.trip_ms is None else (1 - _EWMA) * self.trip_ms + _EWMA * ms


def prompt_lookup(seq: list[int], k: int, ngram: int, min_ngram: int) -> list[int]:
    """Up to k ids that followed the latest earlier occurrence of seq's last n ids (longest n first)."""
    arr = np.asarray(seq, dtype=np.int64)
    for n in range(min(ngram, len(seq) - 1), min_ngram - 1, -1):
        tail = arr[-n:]
        windows = np.lib.stride_tricks.sliding_window_view(arr[:-1], n)  # every earlier n-gram
        hits = np.flatnonzero((windows == tail).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return seq[start : start + k]
    return []


class Speculator:
    """Speculative decoding for one completion session (its draft model's caches follow the session)."""

    def __init__(self, draft: DraftModel | None, clock: LinkClock):
        self.draft = draft
        self.clock = clock
        self.model_acceptance = 0.5  # running mean of the draft model's per-position acceptance

    def wanted(self, cfg: SpeculationConfig, greedy: bool, private: bool = False, remote: bool = True) -> bool:
        """Does this request speculate? (mode, greedy, the privacy mode, whether the middle is
        across a link and the link's measured trip: never acceptance). `private`: a client bundle
        is in force — the accepted lengths the next frame shows may depend on the language or a
        held key (invariant 7, not yet measured: docs/privacy/speculation.md), so "auto" does not
        speculate there; "on" does. `remote`: the middle is reached through round trips (an
        in-process middle has none to save, and its step time is the machine's load, so "auto"
        leaves it step by step)."""
        if not greedy or cfg.mode == "off":
            return False
        if cfg.mode == "on":
            return True
        return (remote and not private and self.clock.trip_ms is not None
                and self.clock.trip_ms >= cfg.min_trip_ms)

    async def decode(self, cfg: SpeculationConfig, cont: Continuation, logits: torch.Tensor, prompt: list[int],
                     adapters: AdapterSet, run: Callable[[list[int], bool], Awaitable[torch.Tensor]],
                     drop: Callable[[int], Awaitable[None]], room: Callable[[], int],
                     checkpoint: Callable[[], Awaitable[None]], counts: SpeculationCounts) -> str:
        """Decode from the prompt's last logits; returns the stop reason. `run(ids, every)` feeds
        ids (every: all positions' logits [T,V]); `drop(n)` removes the last n cached positions;
        `room()`: positions left in the context window."""
        k = cfg.k
        pending = cont.choose(logits)  # chosen, not yet fed
        reason = cont.take(pending)
        while reason is None:
            await checkpoint()
            if room() < k + 1:  # the window's end: plain steps, sized by the position alone
                logits = await self._timed(run, [pending], False)
                pending = cont.choose(logits)
                reason = cont.take(pending)
                continue
            drafts, sources = await self._drafts(cfg, prompt + cont.generated, adapters, checkpoint)
            for source in sources:
                if source is None:
                    counts.padded += 1
                else:
                    _count(counts, source, drafted=True)
            all_logits = await self._timed(run, [pending, *drafts], True)
            counts.frames += 1
            for i in range(k + 1):
                choice = cont.choose(all_logits[i])
                hit = i < k and choice == drafts[i]
                if i < k and sources[i] is not None:
                    _count(counts, sources[i], accepted=hit)
                    if sources[i] == "model":
                        self.model_acceptance = (1 - _EWMA) * self.model_acceptance + _EWMA * float(hit)
                reason = cont.take(choice)
                if reason is not None:
                    break
                if not hit:
                    if i < k:  # the caches hold pending + k drafts: keep pending + the i accepted
                        await drop(k - i)
                    pending = choice
                    break
        return reason

    async def _timed(self, run, ids: list[int], every: bool) -> torch.Tensor:
        t0 = time.perf_counter()
        out = await run(ids, every)
        self.clock.observe(time.perf_counter() - t0)
        return out

    async def _drafts(self, cfg: SpeculationConfig, seq: list[int], adapters: AdapterSet,
                      checkpoint: Callable[[], Awaitable[None]]) -> tuple[list[int], list[str | None]]:
        """k draft ids continuing seq, and each one's source ("lookup", "model", None = padding)."""
        k = cfg.k
        ids = prompt_lookup(seq, k, cfg.ngram, cfg.min_ngram) if cfg.lookup else []
        sources: list[str | None] = ["lookup"] * len(ids)
        if len(ids) < k and cfg.draft_model and self.draft is not None:
            n = min(k - len(ids), self._model_positions(cfg))
            more = await self.draft.extend(seq + ids, n, adapters, checkpoint)
            ids, sources = ids + more, sources + ["model"] * len(more)
        fill = ids[-1] if ids else seq[-1]
        sources += [None] * (k - len(ids))
        ids += [fill] * (k - len(ids))
        return ids, sources

    def _model_positions(self, cfg: SpeculationConfig) -> int:
        """Positions worth drafting with the model: j while p**j >= min_acceptance (1 .. k)."""
        p = min(self.model_acceptance, 0.999)
        if p <= 0:
            return 1
        return max(1, min(cfg.k, int(math.log(cfg.min_acceptance) / math.log(p))))


def _count(counts: SpeculationCounts, source: str, drafted: bool = False, accepted: bool = False) -> None:
    if drafted:
        setattr(counts, f"{source}_drafted", getattr(counts, f"{source}_drafted") + 1)
    if accepted:
        setattr(counts, f"{source}_accepted", getattr(counts, f"{source}_accepted") + 1)
