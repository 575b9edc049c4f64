"""Attack (a): nearest-neighbour inversion of received split-layer states.

The cloud runs the PUBLIC encoder blocks itself and builds a codebook with one state per
vocabulary token, then labels every received state with its nearest codebook entry:

  isolated  the state of each token alone at position 0 (no context; position-independent,
            since a single token's attention to itself ignores RoPE);
  centroid  the mean public state of each token over public code (in context), falling back
            to the isolated state for tokens public code never shows.

Similarity is cosine by default: the next block RMS-normalizes its input, so the direction of a
state is what the model reads."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from umbra.attacks.public import PublicModel
from umbra.attacks.transcript import ObservedSequence
from umbra.errors import ConfigError


@dataclass(frozen=True)
class NearestConfig:
    codebook: str = "centroid"  # "centroid" (in-context means over public code) or "isolated"
    metric: str = "cosine"  # "cosine" or "l2"
    chunk: int = 2048  # received states compared at once (memory: chunk × V floats)

    def validate(self) -> None:
        if self.codebook not in ("centroid", "isolated"):
            raise ConfigError(f"codebook must be 'centroid' or 'isolated', got {self.codebook!r}")
        if self.metric not in ("cosine", "l2"):
            raise ConfigError(f"metric must be 'cosine' or 'l2', got {self.metric!r}")


@torch.no_grad()
def centroid_codebook(public: PublicModel, blocks: np.ndarray) -> torch.Tensor:
    """[V,C]: mean public state of each token over `blocks` [N,T]; isolated state if unseen."""
    book = public.isolated_states().clone()
    sums = torch.zeros_like(book)
    counts = torch.zeros(book.shape[0])
    ids = torch.from_numpy(blocks)
    for i in range(0, ids.shape[0], 32):
        x = ids[i : i + 32]
        s = public.states(x)
        sums.index_add_(0, x.reshape(-1), s.reshape(-1, s.shape[-1]))
        counts.index_add_(0, x.reshape(-1), torch.ones(x.numel()))
    seen = counts > 0
    book[seen] = sums[seen] / counts[seen, None]
    return book


class NearestNeighbour:
    name = "nearest"

    def __init__(self, public: PublicModel, config: NearestConfig = NearestConfig(),
                 public_blocks: np.ndarray | None = None):
        config.validate()
        self.config = config
        if config.codebook == "centroid":
            if public_blocks is None:
                raise ConfigError("the centroid codebook needs public code blocks")
            book = centroid_codebook(public, public_blocks)
        else:
            book = public.isolated_states().clone()
        n = min(public.tokenizer.size, public.vocab_size)  # ids past the tokenizer never occur
        self.book = book[:n]
        if config.metric == "cosine":
            self.book = torch.nn.functional.normalize(self.book, dim=-1)

    @torch.no_grad()
    def guess_states(self, states: torch.Tensor) -> np.ndarray:
        """[N,C] -> [N] public ids."""
        out = []
        for i in range(0, states.shape[0], self.config.chunk):
            x = states[i : i + self.config.chunk].float()
            if self.config.metric == "cosine":
                score = torch.nn.functional.normalize(x, dim=-1) @ self.book.T
            else:
                score = -torch.cdist(x, self.book)
            out.append(score.argmax(-1))
        return torch.cat(out).numpy().astype(np.int64) if out else np.zeros(0, dtype=np.int64)

    def run(self, sequences: list[ObservedSequence]) -> list[np.ndarray]:
        return [self.guess_states(s.hidden) for s in sequences]
