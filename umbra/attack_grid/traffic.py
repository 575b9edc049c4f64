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

import shutil
from dataclasses import replace
from pathlib import Path

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
                         codebook=None, out_dir: Path | None = None) -> list[float]:
    """Run the split fine-tuning loop (umbra.tuning.tune) on the client through `middle` and
    record its traffic; `record_last`: keep only the last that many steps' events (a long
    STuning run, attacked once the client has moved away from the public model). Returns the
    losses of every step. The client is tuned in place. `middle` need not record (a client tuning
    locally); `noise_seed` fixes the gradient noise of `config.gradient_noise` (benchmarks only);
    `codebook` is the inversion penalty's (`config.inversion_penalty`).

    `out_dir`: makes a long run resumable (a benchmark stopped by a session's end): the steps
    before the recorded window run past the recorder and checkpoint there every
    `config.checkpoint_every` steps, and a rerun continues from the last one; the window itself
    (whose events live only in memory) always reruns whole from its first step's checkpoint, so a
    resumed run records and returns what an uninterrupted one does."""
    from umbra.tuning import tune
    from umbra.tuning.checkpoint import CHECKPOINT_NAME
    from umbra.tuning.loop import LOG_NAME

    if record_last is not None and record_last < 1:
        raise ValidationError("record_last must be >= 1")
    recording = isinstance(middle, RecordingMiddle)
    first_kept = 0 if record_last is None or not recording else max(0, config.steps - record_last)
    if out_dir is None or (recording and first_kept == 0):  # nothing before the window to resume
        if not recording:
            return (await tune(client, middle, data, config, noise_seed=noise_seed, codebook=codebook)).losses
        return await _recorded_tuning(client, middle, data, config, first_kept, noise_seed, codebook)

    out_dir = Path(out_dir)
    lead_steps = config.steps if not recording else first_kept
    lead = replace(config, stop_at_step=lead_steps)
    result = await tune(client, middle.inner if recording else middle, data, lead, out_dir=out_dir,
                        resume=(out_dir / CHECKPOINT_NAME).is_file(), noise_seed=noise_seed, codebook=codebook)
    if not recording:
        return result.loss_history
    window = out_dir / "window"  # the window's run: restarted from the lead's last checkpoint each time
    shutil.rmtree(window, ignore_errors=True)
    window.mkdir(parents=True)
    for name in (CHECKPOINT_NAME, LOG_NAME):
        if (out_dir / name).is_file():
            shutil.copyfile(out_dir / name, window / name)
    middle.clear()
    tail = replace(config, checkpoint_every=config.steps)
    return await _recorded_tuning(client, middle, data, tail, first_kept, noise_seed, codebook,
                                  out_dir=window, resume=True)


async def _recorded_tuning(client, middle: RecordingMiddle, data, config, first_kept: int, noise_seed, codebook,
                           out_dir: Path | None = None, resume: bool = False) -> list[float]:
    from umbra.tuning import tune

    def on_step(report) -> None:
        if report.step <= first_kept:  # keep nothing before the recorded window (a long run's would fill memory)
            middle.clear()

    with truth_from_encoder(client.encoder, middle, client.permutation):
        result = await tune(client, middle, data, config, on_step=on_step, noise_seed=noise_seed, codebook=codebook,
                            out_dir=out_dir, resume=resume)
    return result.loss_history
