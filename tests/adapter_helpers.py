"""Helpers of the adapter tests: adapters whose outputs are not zero (as after training), and a
few real training steps of an adapter on next-token loss through the split model."""

from __future__ import annotations

import torch

OUTPUT_WEIGHTS = (".b", ".up", ".gate")


def perturb(adapter, seed: int = 0, std: float = 0.2):
    """Give the adapter non-zero output weights (and a new revision), as training would."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in adapter.named_parameters():
            if name.endswith(OUTPUT_WEIGHTS) or name == "prompt":
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    adapter.touch()
    return adapter


def train_steps(adapter, encoder, middle, decoder, ids: torch.Tensor, steps: int = 5, lr: float = 0.05):
    """`steps` Adam steps of the adapter alone on next-token loss of ids [B,T] (middle in-process)."""
    from umbra.model.adapters import AdapterSet

    adapter.requires_grad_(True)
    opt = torch.optim.Adam(adapter.parameters(), lr=lr)
    pos = torch.arange(ids.shape[1])[None].expand(ids.shape[0], -1)
    losses = []
    for _ in range(steps):
        aset = AdapterSet([adapter], frozen=False)
        h = encoder(ids, pos, adapters=aset)
        h = middle(h, pos)
        logits = decoder(h, pos, adapters=aset)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    adapter.requires_grad_(False)
    adapter.touch()
    return losses
