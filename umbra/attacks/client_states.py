"""What a given client sends for given code: the split-layer states (encoder outputs, after its
private local path's `send` if it has one) of public-id blocks, the way the client computes them —
public ids mapped to its private ids through its permutation, positions 0..T-1, one prefill per
block.

The cloud never runs this for the real client (it has neither the table, π nor the tuned blocks):
it is how the attacker's shadow client makes its own training data (umbra/attack_grid/shadow.py),
how the oracle probe (oracle.py) reads the real client's states on held-out files, and how the
volume traffic (volume.py) is generated."""

from __future__ import annotations

import numpy as np
import torch

from umbra.errors import ConfigError


@torch.no_grad()
def client_states(encoder, permutation, blocks: np.ndarray, private_path=None, batch: int = 16) -> torch.Tensor:
    """[N,T] public ids -> [N,T,C] float32 states as sent by the client (`permutation`: a
    Permutation or None for public ids; `private_path`: the client's PrivatePath, if any)."""
    blocks = np.asarray(blocks, dtype=np.int64)
    if blocks.ndim != 2:
        raise ConfigError(f"blocks must be [N,T] public ids, got shape {list(blocks.shape)}")
    out = []
    was_training = encoder.training
    encoder.eval()
    try:
        for i in range(0, blocks.shape[0], batch):
            rows = blocks[i : i + batch]
            ids = torch.from_numpy(rows if permutation is None else permutation.to_private(rows))
            pos = torch.arange(ids.shape[1])[None].expand(ids.shape[0], -1)
            hidden = encoder(ids, pos)
            if private_path is not None:
                hidden = private_path.send(hidden, private_path.noise_for(ids))
            out.append(hidden.float())
    finally:
        encoder.train(was_training)
    return torch.cat(out) if out else torch.zeros(0, blocks.shape[1], 0)
