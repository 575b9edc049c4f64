"""Validation metrics: mean next-token loss and top-1 accuracy per language."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LangMetrics:
    loss: float  # mean cross-entropy (nats) over predicted tokens
    top1: float  # share of next tokens predicted exactly
    tokens: int  # predicted tokens


def _autocast(bf16: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


@torch.no_grad()
def evaluate_blocks(model, blocks: np.ndarray, batch_size: int, bf16: bool) -> LangMetrics:
    """Loss and accuracy of next-token prediction inside each block."""
    was_training = model.training
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for i in range(0, len(blocks), batch_size):
        ids = torch.from_numpy(blocks[i:i + batch_size].astype(np.int64))
        with _autocast(bf16):
            logits = model(input_ids=ids).logits
        logits = logits[:, :-1].float()
        target = ids[:, 1:]
        loss_sum += F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1),
                                    reduction="sum").item()
        correct += (logits.argmax(-1) == target).sum().item()
        count += target.numel()
    model.train(was_training)
    if count == 0:
        return LangMetrics(float("nan"), float("nan"), 0)
    return LangMetrics(loss_sum / count, correct / count, count)


def evaluate_languages(model, blocks_by_lang: dict[str, np.ndarray], batch_size: int,
                       bf16: bool) -> dict[str, LangMetrics]:
    return {lang: evaluate_blocks(model, b, batch_size, bf16) for lang, b in blocks_by_lang.items()}
