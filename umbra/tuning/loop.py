"""STuning (NOIR §7, DESIGN §4): split fine-tuning of the client encoder and decoder through any
Middle — LocalMiddle in-process or RemoteMiddle to the cloud service; the code is the same.

One step, for a batch of public ids mapped to private ids p = π(t) in memory:

    h = encoder(p)                                   client, autograd on
    y = await middle.forward(h, positions, session)  cloud: middle blocks (no labels, no ids)
    loss = CE(decoder(y)[:, :-1], p[:, 1:])          client: logits and labels never leave
    g_y  = d loss / d y                              client: decoder backward
    g_y' = clip + noise(g_y)  (only if configured)   client: umbra/tuning/gradient_noise.py
    g_h  = await middle.backward(g_y', session)      cloud: recompute + backprop the middle
    h.backward(g_h) [+ λ·P(h) inverted]              client: encoder backward; clip; AdamW

The cloud sees h, y's gradient and positions — never ids, labels, logits, π or client weights.
No randomness is drawn inside a step (except the gradient noise, from its own generator), so the
same seed, weights and data give the same weights through LocalMiddle and the cloud
(tests/tuning). With `out_dir`, checkpoints resume exactly (umbra/tuning/checkpoint.py: public
row order, no π) and a CSV log is kept."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from umbra.errors import ConfigError, UmbraError
from umbra.middle.protocol import Middle
from umbra.training.checkpoint import TrainState
from umbra.training.runlog import TRAIN_FIELDS, CsvLog
from umbra.training.schedule import lr_at
from umbra.tuning import checkpoint as ckpt
from umbra.tuning.client import Tunable, fingerprint, select_trainable
from umbra.tuning.config import TuneConfig
from umbra.tuning.data import TuneData
from umbra.tuning.gradient_noise import GradientNoise
from umbra.tuning.inversion_penalty import InversionPenalty, model_order, penalty

LOG_NAME = "tune_log.csv"


@dataclass
class TuneResult:
    state: TrainState  # position reached (step, data position, tokens, time)
    losses: list[float] = field(default_factory=list)  # training loss of each step of this run
    step_seconds: list[float] = field(default_factory=list)  # wall time of each step of this run
    finished: bool = False  # the whole schedule is done
    interrupted: bool = False  # stopped by `stop()` before the schedule's end (checkpointed)


@dataclass(frozen=True)
class StepReport:
    step: int  # optimizer steps done
    loss: float
    lr: float
    grad_norm: float
    seconds: float
    tokens: int


def make_optimizer(trainable: dict[str, torch.nn.Parameter], config: TuneConfig) -> torch.optim.AdamW:
    """AdamW with decay on matrices only, parameter order = `trainable`'s (checkpoints rely on it)."""
    params = list(trainable.values())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2), eps=1e-8)


def _ordered(trainable: dict[str, torch.nn.Parameter]) -> dict[str, torch.nn.Parameter]:
    """The same dict in optimizer-state index order (matrices first, as make_optimizer groups them)."""
    return {n: p for n, p in trainable.items() if p.dim() >= 2} | {n: p for n, p in trainable.items() if p.dim() < 2}


async def split_step(client: Tunable, middle: Middle, session: str, ids: torch.Tensor,
                     noise: GradientNoise | None = None, generator: torch.Generator | None = None,
                     inversion: tuple[InversionPenalty, torch.Tensor] | None = None) -> torch.Tensor:
    """Forward and backward of one batch of model-space ids [B, T] through the split model;
    leaves gradients in the client's parameters and returns the (detached) LM loss. With `noise`
    enabled the gradient sent to the middle is clipped and noised (`generator` draws it); with
    `inversion` = (settings, codebook in model id order) the encoder also gets λ·P's gradient."""
    b, t = ids.shape
    positions = torch.arange(t, dtype=torch.int64).expand(b, t)
    hidden = client.encoder(ids, positions)
    out = await middle.forward(hidden.detach(), positions, session)
    out = out.detach().requires_grad_(True)
    logits = client.decoder(out, positions)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))
    loss.backward()
    sent = out.grad
    if noise is not None and noise.enabled:
        if generator is None:
            raise ConfigError("gradient noise needs its generator")
        sent = noise.apply(sent, generator)
    grad_in = await middle.backward(sent, session)
    if inversion is not None and inversion[0].enabled:
        settings, book = inversion
        p_true = penalty(hidden, ids, book, settings.temperature)
        torch.autograd.backward([hidden, settings.weight * p_true], [grad_in, None])
    else:
        hidden.backward(grad_in)
    return loss.detach()


class _Run:
    def __init__(self, client: Tunable, middle: Middle, data: TuneData, config: TuneConfig, out_dir: Path | None,
                 noise_seed: int | None = None, codebook: torch.Tensor | None = None):
        self.client, self.middle, self.data, self.config, self.out_dir = client, middle, data, config, out_dir
        self.noise_generator = config.gradient_noise.generator(noise_seed) if config.gradient_noise.enabled else None
        self.inversion = None
        if config.inversion_penalty.enabled:
            if codebook is None:
                raise ConfigError("the inversion penalty needs the public codebook (inversion_penalty.own_codebook)")
            self.inversion = (config.inversion_penalty, model_order(codebook, client.permutation))
        self.trainable = _ordered(select_trainable(client, config.train_embedding))
        self.params = list(self.trainable.values())
        self.optimizer = make_optimizer(self.trainable, config)
        self.state = TrainState()
        self.fingerprints = {"client": fingerprint(client), "data": data.fingerprint}
        self.log = CsvLog(out_dir / LOG_NAME, TRAIN_FIELDS) if out_dir is not None else None

    @property
    def ckpt_path(self) -> Path:
        return self.out_dir / ckpt.CHECKPOINT_NAME

    def resume(self) -> None:
        payload = ckpt.load(self.ckpt_path)
        if TuneConfig.from_dict(payload["config"]).trajectory() != self.config.trajectory():
            raise ConfigError("the checkpoint was made with other tuning settings; resume with the same ones")
        if payload["fingerprints"]["client"] != self.fingerprints["client"]:
            raise ConfigError("the checkpoint belongs to another client (bundle or embedding table differs)")
        if payload["fingerprints"]["data"] != self.fingerprints["data"]:
            raise ConfigError("the checkpoint was trained on other data (corpus, tokenizer or packing differ)")
        self.state = ckpt.restore(payload, self.client, self.trainable, self.optimizer)

    def checkpoint(self) -> None:
        if self.out_dir is not None:
            ckpt.save(self.ckpt_path, self.client, self.trainable, self.optimizer, self.state,
                      self.config.to_dict(), self.fingerprints)

    async def step(self, session: str) -> StepReport:
        cfg, st = self.config, self.state
        blocks, epoch, block = self.data.batch(st.epoch, st.block, cfg.batch_size)
        ids = torch.from_numpy(blocks)
        if self.client.permutation is not None:
            ids = self.client.permutation.to_private(ids)  # labels are π(t) too
        lr = lr_at(st.step, cfg.lr, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        t0 = time.perf_counter()
        try:
            loss = await split_step(self.client, self.middle, session, ids, cfg.gradient_noise, self.noise_generator,
                                    self.inversion)
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.grad_clip)
            self.optimizer.step()
        finally:
            self.optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - t0
        st.step, st.epoch, st.block = st.step + 1, epoch, block  # committed only after a whole step
        st.tokens_seen += ids.numel()
        st.elapsed_s += seconds
        return StepReport(st.step, float(loss), lr, float(grad_norm), seconds, ids.numel())


async def tune(client: Tunable, middle: Middle, data: TuneData, config: TuneConfig, *,
               out_dir: str | Path | None = None, resume: bool = False,
               stop: Callable[[], bool] | None = None,
               on_step: Callable[[StepReport], None] | None = None,
               noise_seed: int | None = None, codebook: torch.Tensor | None = None) -> TuneResult:
    """STune `client` in place through `middle` on `data` for `config.steps` steps.

    `out_dir`: checkpoints (tune.pt) and tune_log.csv; None keeps everything in memory.
    `resume`: continue from out_dir's checkpoint (same client, data and trajectory settings).
    `stop()`: checked between steps; True ends the run (checkpointed, `interrupted`).
    `on_step(report)`: called after every step (progress output; reports carry no tokens).
    `noise_seed`: fixes the gradient noise (tests and benchmarks only — whoever knows the seed can
    subtract the noise); by default each run seeds it from the OS CSPRNG.
    `codebook`: [V, d] public-order unit rows (`inversion_penalty.own_codebook`), needed when
    `config.inversion_penalty` is on."""
    config.validate(client.encoder.spec.max_position_embeddings)
    if middle.hidden_size != client.encoder.spec.hidden_size:
        raise ConfigError(f"the middle works on hidden size {middle.hidden_size}, the client on "
                          f"{client.encoder.spec.hidden_size}")
    out = Path(out_dir) if out_dir is not None else None
    run = _Run(client, middle, data, config, out, noise_seed, codebook)
    if resume:
        if out is None:
            raise ConfigError("resume needs the run's out_dir")
        run.resume()
    elif out is not None and run.ckpt_path.exists():
        raise ConfigError(f"{run.ckpt_path} exists: resume it or use another output directory")
    if run.log is not None:
        run.log.truncate_after(run.state.step)
    stop_at = config.steps if config.stop_at_step is None else min(config.steps, config.stop_at_step)
    result = TuneResult(run.state)
    client.encoder.train()
    client.decoder.train()
    session = await middle.open_session(training=True)
    try:
        while run.state.step < stop_at:
            if stop is not None and stop():
                result.interrupted = True
                break
            report = await run.step(session)
            result.losses.append(report.loss)
            result.step_seconds.append(report.seconds)
            if run.log is not None:
                run.log.append({"step": report.step, "tokens_seen": run.state.tokens_seen, "lr": f"{report.lr:.6g}",
                                "loss": f"{report.loss:.5f}", "grad_norm": f"{report.grad_norm:.4f}",
                                "elapsed_s": f"{run.state.elapsed_s:.1f}",
                                "tokens_per_s": f"{report.tokens / report.seconds:.0f}"})
            if on_step is not None:
                on_step(report)
            if run.state.step % config.checkpoint_every == 0:
                run.checkpoint()
    finally:
        run.checkpoint()  # the last whole step (a failed step changed nothing)
        client.encoder.eval()
        client.decoder.eval()
        client.encoder.requires_grad_(False)
        client.decoder.requires_grad_(False)
        try:
            await middle.close(session)
        except UmbraError:  # the cloud already dropped it (or is gone); nothing else to release
            pass
    result.finished = run.state.step >= config.steps
    return result


def model_ids(client: Tunable, public_ids: np.ndarray) -> torch.Tensor:
    """Public ids -> the ids `client` is indexed by (π(t) for a bundle, t for fClean)."""
    ids = torch.from_numpy(np.asarray(public_ids, dtype=np.int64))
    return ids if client.permutation is None else client.permutation.to_private(ids)
