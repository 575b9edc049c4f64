"""One request's decoding, token by token: which id comes next and when the completion ends.

`Continuation` holds what a request has generated so far and applies, to each chosen id, every
rule that can end it — a stop token, the repetition stop, the text stop rules (completion_text.py),
the max_tokens budget and the deadline (a target: past it, the first token after which the text
shows a whole word ends the completion, within `StopConfig.deadline_grace`) — and, while
choosing, token healing's constraint (healing.py). Step-by-step decoding (`decode_plain`, here)
and speculative decoding (speculative.py) both feed it the logits of one position at a time in
the same order, so the two produce the same tokens from the same logits."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import torch

from umbra.engine.completion_text import CompletionText, TextStream
from umbra.engine.config import EngineConfig
from umbra.engine.healing import HealingConstraint
from umbra.engine.repetition import loop_cut
from umbra.engine.sampling import Sampler
from umbra.engine.tokenizer import ClientTokenizer


class Continuation:
    """What one request has generated so far; `take` each chosen id until it returns a stop reason."""

    def __init__(self, tokenizer: ClientTokenizer, stop_ids: frozenset[int] | set[int], allowed: torch.Tensor,
                 heal: str, prefix: str, suffix: str, cfg: EngineConfig, stream: TextStream | None,
                 deadline: float | None):
        self.tokenizer, self.stop_ids, self.cfg, self.heal, self.deadline = tokenizer, stop_ids, cfg, heal, deadline
        self.sampler = Sampler(cfg.sampling, allowed)
        # Under healing the first tokens must re-create the healed text (the document holds it):
        # only tokens consistent with it are eligible, not even a stop (healing.py).
        self.healing = HealingConstraint(tokenizer, heal, allowed)
        self.completion = CompletionText(prefix, suffix, cfg.stop, stream)
        self.generated: list[int] = []
        self.produced = ""  # the generated text, healed text included

    def choose(self, logits: torch.Tensor) -> int:
        """The next id from one position's logits [V], under the healing constraint."""
        return self.sampler(logits, self.healing.mask(self.produced))

    def verify(self, logits: torch.Tensor, draft: int | None) -> tuple[int, bool]:
        """The next id from one position's logits when `draft` was proposed there (speculative
        decoding; None: nothing was), and whether it is the draft: the id `choose` draws, kept
        draft or not. Greedy, that is the argmax compared. Sampled, it is the standard
        speculative-sampling rule (Leviathan et al. 2023, Chen et al. 2023) for a draft that is a
        point mass q — every draft here is a deterministic function of the ids so far: the draft
        is accepted with probability min(1, p(d) / q(d)) = p(d), and a rejection draws from the
        residual max(0, p - q), i.e. p without d, renormalised. Drawing x ~ p and accepting iff
        x = d realises exactly that, with the same draws, one per position, as step-by-step
        decoding: a seeded request samples the same tokens speculative or not."""
        choice = self.choose(logits)
        return choice, choice == draft

    def take(self, next_id: int) -> str | None:
        """Append `next_id`; the stop reason if the completion ends with it (a stop id is not appended)."""
        if next_id in self.stop_ids:
            return "eos"
        generated, heal = self.generated, self.heal
        generated.append(next_id)
        repetition = self.cfg.stop.repetition
        loop = loop_cut(generated, repetition) if repetition else None
        if loop is not None:  # keep one copy of the repeated unit
            return self.completion.feed(self.tokenizer.decode(generated[:loop])[len(heal):]) or "repetition"
        self.produced = self.tokenizer.decode(generated)
        reason = self.completion.feed(self.produced[len(heal):], at_limit=len(generated) >= self.cfg.stop.max_tokens)
        if reason is None and self.deadline is not None:
            reason = self._past_deadline()
        return reason

    def _past_deadline(self) -> str | None:
        """"deadline" once the deadline has passed and the text, cut short, shows a whole word or
        line, or once its grace (`StopConfig.deadline_grace`) has passed too; else None."""
        now = time.monotonic()
        if now < self.deadline:
            return None
        if now >= self.deadline + self.cfg.stop.deadline_grace or self.completion.shows_if_cut():
            return "deadline"
        return None

    def end(self, reason: str) -> str:
        return self.completion.end(reason)


async def decode_plain(cont: Continuation, logits: torch.Tensor, run: Callable[[list[int]], Awaitable[torch.Tensor]],
                       checkpoint: Callable[[], Awaitable[None]]) -> str:
    """Step-by-step decoding: one id, one forward (one cloud round trip) per generated token.
    `logits`: the prompt's last position; `run(ids)` feeds ids and returns the last logits.
    Returns the stop reason."""
    while True:
        next_id = cont.choose(logits)
        reason = cont.take(next_id)
        if reason is not None:
            return reason
        await checkpoint()
        logits = await run([next_id])

