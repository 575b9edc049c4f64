"""Learning-rate schedule: linear warmup then cosine decay, a pure function of the step."""

from __future__ import annotations

import math


def lr_at(step: int, peak: float, warmup: int, total: int, min_ratio: float) -> float:
    """Learning rate for optimizer step `step` (0-based)."""
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return peak * (min_ratio + (1.0 - min_ratio) * cosine)
