"""Client traffic for the attack benchmark and tests, through any Middle wrapped in a
RecordingMiddle (so the cloud's view is recorded the same way as in production).

  inference_traffic  each block is one prompt: encoder(private ids) -> middle.forward (one
                     prefill per session), as the completion engine sends it;
  training_traffic   split fine-tuning steps (DESIGN §4 STuning): the client computes its loss
                     on its own head, backpropagates through its decoder, sends the gradient at
                     the middle's output (Middle.backward) and finishes through its encoder.
                     `lr = 0` records the gradients of the untuned client (the first step of a
                     tuning run); lr > 0 also updates the client blocks with SGD.

Both attach the public ids as truth to the recorded events (client-side knowledge, for scoring
only; RecordingMiddle never forwards it)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from umbra.errors import ValidationError
from umbra.privacy.attacks.clients import SimulatedClient
from umbra.privacy.attacks.recorder import RecordingMiddle


def _positions(b: int, t: int) -> torch.Tensor:
    return torch.arange(t)[None].expand(b, -1).contiguous()


async def inference_traffic(client: SimulatedClient, middle: RecordingMiddle, blocks: np.ndarray) -> None:
    """One session per block [T] of public ids: prefill, then close."""
    for row in blocks:
        ids = client.private(row[None])
        pos = _positions(1, ids.shape[1])
        with torch.no_grad():
            hidden = client.encoder(ids, pos)
        session = await middle.open_session()
        try:
            middle.attach_truth(row[None])
            await middle.forward(hidden, pos, session)
        finally:
            await middle.close(session)


async def training_traffic(client: SimulatedClient, middle: RecordingMiddle, blocks: np.ndarray,
                           batch_size: int = 4, lr: float = 0.0) -> list[float]:
    """Split fine-tuning steps over `blocks` [N,T]; returns the losses."""
    if batch_size < 1:
        raise ValidationError("batch_size must be >= 1")
    enc, dec = client.encoder, client.decoder
    params = [p for p in (*enc.parameters(), *dec.parameters())]
    for p in params:
        p.requires_grad_(True)
    losses = []
    session = await middle.open_session(training=True)
    try:
        for i in range(0, blocks.shape[0], batch_size):
            rows = blocks[i : i + batch_size]
            ids = client.private(rows)
            pos = _positions(*ids.shape)
            with torch.enable_grad():
                hidden = enc(ids, pos)
                middle.attach_truth(rows)
                m = await middle.forward(hidden.detach(), pos, session)
                m = m.detach().requires_grad_(True)
                logits = dec(m, pos)
                loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
                loss.backward()
                grad_in = await middle.backward(m.grad, session)
                hidden.backward(grad_in)
            if lr > 0:
                with torch.no_grad():
                    for p in params:
                        if p.grad is not None:
                            p.add_(p.grad, alpha=-lr)
            for p in params:
                p.grad = None
            losses.append(float(loss))
    finally:
        await middle.close(session)
        for p in params:
            p.requires_grad_(False)
    return losses
