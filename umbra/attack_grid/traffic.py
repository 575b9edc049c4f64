"""Client traffic for the attack benchmark and tests, through any Middle wrapped in a
RecordingMiddle (so the cloud's view is recorded the same way as in production).

  inference_traffic  each block is one prompt: encoder(private ids) -> middle.forward (one
                     prefill per session), as the completion engine sends it;
  tuning_traffic     the split fine-tuning loop itself (umbra.tuning.tune, DESIGN §4 STuning):
                     the client computes its loss on its own head, backpropagates through its
                     decoder, sends the gradient at the middle's output (Middle.backward) and
                     finishes through its encoder — and updates its blocks (AdamW).

Both attach the public ids as truth to the recorded events (client-side knowledge, for scoring
only; RecordingMiddle never forwards it)."""

from __future__ import annotations

import numpy as np
import torch

from umbra.attack_grid.clients import SimulatedClient
from umbra.attacks.recorder import RecordingMiddle, truth_from_encoder
from umbra.errors import ValidationError


def _positions(b: int, t: int) -> torch.Tensor:
    return torch.arange(t)[None].expand(b, -1).contiguous()


async def inference_traffic(client: SimulatedClient, middle: RecordingMiddle, blocks: np.ndarray) -> None:
    """One session per block [T] of public ids: prefill, then close. A client with a private
    local path sends what the engine sends: `path.send(h, noise)` (umbra/model/private_path.py)."""
    path = client.private_path
    for row in blocks:
        ids = client.private(row[None])
        pos = _positions(1, ids.shape[1])
        with torch.no_grad():
            hidden = client.encoder(ids, pos)
            if path is not None:
                hidden = path.send(hidden, path.noise_for(ids))
        session = await middle.open_session()
        try:
            middle.attach_truth(row[None])
            await middle.forward(hidden, pos, session)
        finally:
            await middle.close(session)


async def tuning_traffic(client: SimulatedClient, middle, data, config, *,
                         record_last: int | None = None, noise_seed: int | None = None,
                         codebook=None) -> list[float]:
    """Run the split fine-tuning loop (umbra.tuning.tune) on the client through `middle` and
    record its traffic; `record_last`: keep only the last that many steps' events (a long
    STuning run, attacked once the client has moved away from the public model). Returns the
    losses. The client is tuned in place. `middle` need not record (a client tuning locally);
    `noise_seed` fixes the gradient noise of `config.gradient_noise` (benchmarks only); `codebook`
    is the inversion penalty's (`config.inversion_penalty`)."""
    from umbra.tuning import tune

    if record_last is not None and record_last < 1:
        raise ValidationError("record_last must be >= 1")
    first_kept = 0 if record_last is None else max(0, config.steps - record_last)

    if not isinstance(middle, RecordingMiddle):
        return (await tune(client, middle, data, config, noise_seed=noise_seed, codebook=codebook)).losses

    def on_step(report) -> None:
        if report.step == first_kept:  # drop everything before the recorded window
            middle.clear()

    with truth_from_encoder(client.encoder, middle, client.permutation):
        result = await tune(client, middle, data, config, on_step=on_step, noise_seed=noise_seed, codebook=codebook)
    return result.losses
