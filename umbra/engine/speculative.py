"""Speculative split decoding: several tokens per cloud round trip, the same output.

Step-by-step decoding pays one round trip to the middle per token. Here the client drafts k
tokens itself and sends them, behind the token just chosen, as ONE forward of k + 1 positions;
the client's decoder then reads the logits of every position in order, choosing each token as
step-by-step decoding would (`Continuation.verify`: the same sampler, the same healing
constraint), and keeps drafts while they are that choice. The first disagreeing choice is the
"plus one" token; the rejected drafts are dropped from every cache, the client's and the middle
session's (`drop`, a truncate that travels in the next frame). The first frame of a request
carries the prompt's new ids (the edit) ahead of its k drafts: the prefill and the first verify
are one trip. Greedy: the tokens are those of step-by-step decoding, only the number of trips
changes. Sampled (temperature > 0): the standard speculative-sampling rule for point-mass drafts
(decoding.py, `Continuation.verify`), drawn with step-by-step decoding's own draws: the same
distribution and, with a seed, the same tokens. A draft that token healing forbids is never the
choice.

Drafts, until k are drafted, each from the source with more expected accepted tokens:
  prompt lookup  the ids that followed the latest earlier occurrence of the last n-gram
                 (n = ngram .. min_ngram, else a one-id match: n = 1) in the prompt (prefix and
                 suffix) and the tokens so far — a run, expected to yield the running mean of
                 what runs of its n yielded (`DraftStats.run`);
  draft model    one id from the client's own blocks with the middle skipped (encoder -> decoder,
                 greedy), with caches of their own that follow the session's ids by common
                 prefix — expected to yield p + p**2 + ... over the positions it may still draft,
                 p its running per-position acceptance;
  padding        the last drafted id repeated, so that every frame has its size; also in the
                 positions past the max_tokens budget, which no completion could use.
After a model id the choice is made again (a lookup may match now). The draft model drafts at
most j positions per frame while p**j >= min_acceptance: a poor drafter costs client compute,
not frame size. The running means are the engine's (shared by its sessions, like the link clock):
a plain model's skip-middle drafts are rarely right and its lookups copy long runs, a tuned
bundle's the other way round (docs/benchmarks.md), and a session is too short to learn that.

k climbs a ladder (`SpeculationConfig.rungs`: k, 2k, ... k_max): after a frame whose drafts were
all accepted the next frame has twice as many, after any rejection k again. Under a client bundle
the ladder is off: every frame has k drafts (a fixed k), so the sizes of the frames are one
sequence whatever the acceptance, whatever the language and whether an access key is held
(invariant 7: the decoder-side expert and access adapter change the tokens, so the acceptance).
Near the context window's end a frame carries what still fits, then single positions.

What the cloud sees (invariants 7 and 8, DESIGN.md): a frame's size is the prompt's new ids + k for
the first, then rung + 1, where the rung is a function of the truncates the cloud already saw (a
frame left whole is followed by no truncate) — under a bundle always k + 1 — and near the
window's end a function of the position. Whether a request speculates depends on the mode, on
the measured trip latency (`LinkClock`: the link and the load) and whether the middle is across a
link, never on the acceptance, the language or a held key. The truncation points (and the number
of frames) do reveal how many drafts were accepted and how long the completion is: that is the
leak invariant 8 asks to measure and document (docs/privacy/speculation.md).

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


def prompt_lookup(seq: list[int], k: int, ngram: int, min_ngram: int) -> tuple[list[int], int]:
    """Up to k ids that followed the latest earlier occurrence of seq's last n ids (longest n
    first, n = ngram .. min_ngram), and that n (0: no match)."""
    arr = np.asarray(seq, dtype=np.int64)
    for n in range(min(ngram, len(seq) - 1), min_ngram - 1, -1):
        tail = arr[-n:]
        windows = np.lib.stride_tricks.sliding_window_view(arr[:-1], n)  # every earlier n-gram
        hits = np.flatnonzero((windows == tail).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return seq[start : start + k], n
    return [], 0


@dataclass
class Drafts:
    """One frame's k drafts: the ids, each one's source ("lookup", "model", None = padding) and
    the lookup runs in it as (offset, length, n)."""

    ids: list[int]
    sources: list[str | None]
    runs: list[tuple[int, int, int]]


class DraftStats:
    """What the drafts yielded, as running means (no ids): the draft model's per-position
    acceptance and the accepted tokens of a lookup run by the n it matched. An engine's sessions
    share one (a session is too short to learn its model's drafting)."""

    def __init__(self, model_acceptance: float = 0.5, run_prior: float = 1.0):
        self.model_acceptance = model_acceptance  # p: the draft model's per-position acceptance
        self.run_prior = run_prior  # expected accepted tokens of a lookup run never measured
        self.run: dict[int, float] = {}  # n -> accepted tokens of a run whose start was verified

    def lookup_expected(self, n: int, length: int) -> float:
        return min(self.run.get(n, self.run_prior), float(length))

    def model_expected(self, positions: int) -> float:
        """p + p**2 + ... + p**positions: the expected accepted drafts of a model run."""
        p = min(self.model_acceptance, 0.999)
        return p * (1 - p**positions) / (1 - p)

    def learn(self, drafts: Drafts, verified: int, accepted: int) -> None:
        """After a frame whose first `verified` drafts were checked, the first `accepted` right."""
        for i in range(verified):
            if drafts.sources[i] == "model":
                self.model_acceptance = (1 - _EWMA) * self.model_acceptance + _EWMA * float(i < accepted)
        for offset, length, n in drafts.runs:
            if offset < verified:
                got = max(0, min(accepted - offset, length))
                self.run[n] = (1 - _EWMA) * self.run.get(n, self.run_prior) + _EWMA * got


class Speculator:
    """Speculative decoding for one completion session (its draft model's caches follow the session)."""

    def __init__(self, draft: DraftModel | None, clock: LinkClock, stats: DraftStats | None = None):
        self.draft = draft
        self.clock = clock
        self.stats = stats if stats is not None else DraftStats()  # the engine's, shared

    def wanted(self, cfg: SpeculationConfig, greedy: bool, private: bool = False, remote: bool = True) -> bool:
        """Does this request speculate? (mode, whether the middle is across a link and the
        link's measured trip: never acceptance, the language or a held key). `private`: a client
        bundle is in force; it speculates alike (its frames have a fixed k: `decode`). `remote`:
        the middle is reached through round trips (an in-process middle has none to save, and its
        step time is the machine's load, so "auto" leaves it step by step)."""
        if cfg.mode == "off":
            return False
        if cfg.mode == "on":
            return True
        return remote and self.clock.trip_ms is not None and self.clock.trip_ms >= cfg.min_trip_ms

    @staticmethod
    def ladder(cfg: SpeculationConfig, private: bool) -> tuple[int, ...]:
        """Drafts per frame: the ladder, or under a client bundle k alone (a fixed frame size)."""
        return (cfg.k,) if private else cfg.rungs

    async def decode(self, cfg: SpeculationConfig, cont: Continuation, head: list[int], prompt: list[int],
                     adapters: AdapterSet, run: Callable[[list[int], int], Awaitable[torch.Tensor]],
                     drop: Callable[[int], Awaitable[None]], room: Callable[[], int],
                     checkpoint: Callable[[], Awaitable[None]], counts: SpeculationCounts,
                     private: bool = False) -> str:
        """Decode after `prompt`, whose last ids `head` are not yet fed (the prompt's last chunk:
        they head the first frame, so its prefill and the first verify are one trip); returns the
        stop reason. `run(ids, n)` feeds ids (n: the last n positions' logits [n,V], 0: the last's
        [V]); `drop(n)`
        removes the last n cached positions; `room()`: positions left in the context window;
        `private`: a client bundle is in force (a fixed k per frame)."""
        rungs, rung = self.ladder(cfg, private), 0
        while True:
            await checkpoint()
            k = min(rungs[rung], room() - len(head))  # near the window's end: what still fits (the position's)
            if k < 1:  # the window's end: plain steps, sized by the position alone
                logits = await self._timed(run, head, 0)
                choice = cont.choose(logits)
                reason = cont.take(choice)
                if reason is not None:
                    return reason
                head = [choice]
                continue
            # drafts continue everything chosen so far (prompt + generated ends with the head);
            # past the max_tokens budget a draft could never be used: padding instead (same frame)
            useful = cont.cfg.stop.max_tokens - len(cont.generated) - 1
            drafts = await self._drafts(cfg, k, prompt + cont.generated, adapters, checkpoint, useful)
            for source in drafts.sources:
                if source is None:
                    counts.padded += 1
                else:
                    _count(counts, source, drafted=True)
            all_logits = await self._timed(run, [*head, *drafts.ids], k + 1)  # the head's last position on
            counts.frames += 1
            for i in range(k + 1):
                choice, hit = cont.verify(all_logits[i], drafts.ids[i] if i < k else None)
                if i < k and drafts.sources[i] is not None:
                    _count(counts, drafts.sources[i], accepted=hit)
                reason = cont.take(choice)
                if reason is not None:
                    self.stats.learn(drafts, min(i + 1, k), i + hit)
                    return reason
                if not hit:
                    self.stats.learn(drafts, min(i + 1, k), i)
                    if i < k:  # the caches hold head + k drafts: keep head + the i accepted
                        await drop(k - i)
                    # every draft accepted (no trim in the next frame): up one rung; else the first
                    rung = min(rung + 1, len(rungs) - 1) if i == k else 0
                    head = [choice]  # chosen, not yet fed
                    break

    async def _timed(self, run, ids: list[int], every: bool) -> torch.Tensor:
        t0 = time.perf_counter()
        out = await run(ids, every)
        self.clock.observe(time.perf_counter() - t0)
        return out

    async def _drafts(self, cfg: SpeculationConfig, k: int, seq: list[int], adapters: AdapterSet,
                      checkpoint: Callable[[], Awaitable[None]], useful: int | None = None) -> Drafts:
        """k positions continuing seq: up to `useful` drafts (k when None; fewer where the
        max_tokens budget ends the completion first), each at its point the lookup run (n-grams of
        ngram .. min_ngram, else a one-id match) or one draft-model id (while its acceptance makes
        that position worth it), whichever is expected to yield more accepted tokens
        (`DraftStats`); then padding."""
        out = Drafts([], [], [])
        stats = self.stats
        useful = k if useful is None else max(0, min(useful, k))
        budget = self._model_positions(cfg, useful) if cfg.draft_model and self.draft is not None and useful else 0
        while len(out.ids) < useful:
            want = useful - len(out.ids)
            more, n = self._lookup(cfg, seq + out.ids, want)
            if more and (budget == 0 or stats.lookup_expected(n, len(more)) >= stats.model_expected(min(budget, want))):
                out.runs.append((len(out.ids), len(more), n))
                source = "lookup"
            elif budget > 0:
                more, source, budget = await self.draft.extend(seq + out.ids, 1, adapters, checkpoint), "model", budget - 1
            else:
                break
            out.ids += more
            out.sources += [source] * len(more)
        fill = out.ids[-1] if out.ids else seq[-1]
        out.sources += [None] * (k - len(out.ids))
        out.ids += [fill] * (k - len(out.ids))
        return out

    @staticmethod
    def _lookup(cfg: SpeculationConfig, seq: list[int], k: int) -> tuple[list[int], int]:
        """The lookup run and its n: ngram .. min_ngram, else a one-id match (better than padding)."""
        if not cfg.lookup:
            return [], 0
        more, n = prompt_lookup(seq, k, cfg.ngram, cfg.min_ngram)
        if not more and cfg.min_ngram > 1:
            more, n = prompt_lookup(seq, k, 1, 1)
        return more, n

    def _model_positions(self, cfg: SpeculationConfig, k: int) -> int:
        """Positions worth drafting with the model: j while p**j >= min_acceptance (1 .. k)."""
        p = min(self.stats.model_acceptance, 0.999)
        if p <= 0:
            return 1
        return max(1, min(k, int(math.log(cfg.min_acceptance) / math.log(p))))


def _count(counts: SpeculationCounts, source: str, drafted: bool = False, accepted: bool = False) -> None:
    if drafted:
        setattr(counts, f"{source}_drafted", getattr(counts, f"{source}_drafted") + 1)
    if accepted:
        setattr(counts, f"{source}_accepted", getattr(counts, f"{source}_accepted") + 1)
