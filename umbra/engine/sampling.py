"""Next-token choice: greedy, or temperature + top-p (nucleus) sampling from a seeded generator.

Only ids the completion may contain are eligible: control tokens (FIM markers, padding that is
not a stop) and ids beyond the tokenizer's vocabulary (models often pad their embedding table)
are masked out. Stop tokens stay eligible — choosing one ends the completion."""

from __future__ import annotations

import torch

from umbra.engine.config import SamplingConfig
from umbra.engine.fim import FimFormat
from umbra.engine.tokenizer import ClientTokenizer


def allowed_mask(vocab_size: int, tok: ClientTokenizer, fmt: FimFormat) -> torch.Tensor:
    """bool [vocab_size]: True where the model may emit the id."""
    allowed = tok.vocab_mask(vocab_size)
    banned = [i for i in tok.special_ids if i < vocab_size and i not in fmt.stop_ids]
    if banned:
        allowed[banned] = False
    stops = [i for i in fmt.stop_ids if i < vocab_size]
    allowed[stops] = True
    return allowed


class Sampler:
    """One per request: a fixed seed gives the same tokens for the same logits."""

    def __init__(self, cfg: SamplingConfig, allowed: torch.Tensor):
        self.cfg = cfg
        self.allowed = allowed
        self.generator = torch.Generator()
        if cfg.seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(cfg.seed)

    def __call__(self, logits: torch.Tensor, allowed: torch.Tensor | None = None) -> int:
        """logits [V] (last position) -> the chosen id; `allowed` narrows the eligible ids for
        this one call (token healing), else the request's own mask applies."""
        if self.cfg.greedy:
            masked = logits.float().masked_fill(~(self.allowed if allowed is None else allowed), float("-inf"))
            return int(torch.argmax(masked))
        return int(torch.multinomial(self.probs(logits, allowed), 1, generator=self.generator))

    def probs(self, logits: torch.Tensor, allowed: torch.Tensor | None = None) -> torch.Tensor:
        """The distribution [V] a sampled choice draws from (temperature, top-p, the masks)."""
        logits = logits.float().masked_fill(~(self.allowed if allowed is None else allowed), float("-inf"))
        probs = torch.softmax(logits / self.cfg.temperature, dim=-1)
        return _top_p(probs, self.cfg.top_p) if self.cfg.top_p < 1.0 else probs


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely ids whose mass reaches top_p (at least one)."""
    sorted_probs, order = torch.sort(probs, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    keep_sorted = mass_before < top_p
    keep_sorted[0] = True
    keep = torch.zeros_like(keep_sorted).scatter(0, order, keep_sorted)
    kept = probs * keep
    return kept / kept.sum()
