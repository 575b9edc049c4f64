"""Next-token top-1 accuracy and perplexity over packed blocks of held-out code."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

LogitsFn = Callable[[torch.Tensor], torch.Tensor]  # ids [B,T] -> logits [B,T,V]


@dataclass(frozen=True)
class NextTokenMetrics:
    loss: float  # mean cross-entropy in nats over predicted tokens
    top1: float  # share of next tokens predicted exactly
    tokens: int  # predicted tokens

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss) if math.isfinite(self.loss) else float("nan")


@torch.no_grad()
def next_token_metrics(logits_fn: LogitsFn, blocks: np.ndarray, batch_size: int = 8) -> NextTokenMetrics:
    """Predict token t+1 from tokens ≤ t inside each block [N, T] of token ids."""
    loss_sum, correct, count = 0.0, 0, 0
    for i in range(0, len(blocks), batch_size):
        ids = torch.from_numpy(blocks[i : i + batch_size].astype(np.int64))
        logits = logits_fn(ids)[:, :-1].float()  # [B,T-1,V]
        target = ids[:, 1:]
        loss_sum += F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1), reduction="sum").item()
        correct += (logits.argmax(-1) == target).sum().item()
        count += target.numel()
    if count == 0:
        return NextTokenMetrics(float("nan"), float("nan"), 0)
    return NextTokenMetrics(loss_sum / count, correct / count, count)


def lean_logits_fn(encoder, middle_blocks, decoder) -> LogitsFn:
    """The whole model as one function, with the project's own blocks (no caches)."""

    def run(ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
        return decoder(middle_blocks(encoder(ids, positions), positions), positions)

    return run
