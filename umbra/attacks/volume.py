"""Traffic at volume for the decipherment attack (decipher.py): what the cloud receives from a
client that sent N blocks, without running the middle (the attack reads only split-layer states).

A cloud serves a client for months; the attack grid sends 64 prompts × 128 tokens (8 192
positions). `volume_traffic(encoder, permutation, blocks)` gives the states of any number of
blocks as ObservedSequences — one prefill per block, every position fresh and real — with the
truth (public ids) attached for scoring, exactly as `inference_traffic` records them but without
a RecordingMiddle (the states the cloud receives are the encoder's outputs, `send` of a private
path included). `times(blocks, k)` picks k× a base count of blocks."""

from __future__ import annotations

import numpy as np
import torch

from umbra.attacks.client_states import client_states
from umbra.attacks.transcript import ObservedSequence
from umbra.errors import ConfigError

GRID_PROMPTS = 64  # prompts of the attack grid (1×)
GRID_LENGTH = 128  # tokens per prompt


def volume_traffic(encoder, permutation, blocks: np.ndarray, private_path=None, batch: int = 64,
                   dtype: torch.dtype = torch.float32) -> list[ObservedSequence]:
    """[N,T] public ids -> N ObservedSequences of the client's split-layer states (`dtype`: float16
    halves the memory of 100× traffic; the attacks compute in float32)."""
    blocks = np.asarray(blocks, dtype=np.int64)
    if blocks.ndim != 2 or blocks.shape[0] == 0:
        raise ConfigError("volume traffic needs a non-empty [N,T] block of public ids")
    out = []
    t = blocks.shape[1]
    positions = torch.arange(t)
    ones = np.ones(t, dtype=bool)
    for i in range(0, blocks.shape[0], batch):
        rows = blocks[i : i + batch]
        states = client_states(encoder, permutation, rows, private_path, batch=batch).to(dtype)
        for row, h in zip(rows, states):
            out.append(ObservedSequence(hidden=h.clone(), positions=positions, fresh=ones, real=ones,
                                        truth=row.copy(), session=f"volume-{len(out)}"))
    return out


def times(blocks: np.ndarray, k: float, base: int = GRID_PROMPTS) -> np.ndarray:
    """The first round(k·base) blocks (k = 1, 10, 100: the grid's traffic and 10×, 100× of it)."""
    n = int(round(k * base))
    if n < 1 or n > len(blocks):
        raise ConfigError(f"{k}× needs {n} blocks, have {len(blocks)}")
    return np.asarray(blocks[:n])
