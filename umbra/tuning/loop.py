"""STuning (NOIR §7, DESIGN §4): split fine-tuning of the client encoder and decoder through any
Middle — LocalMiddle in-process or RemoteMiddle to the cloud service; the code is the same.

One step, for a batch of public ids mapped to private ids p = π(t) in memory:

    h = encoder(p)                                   client, autograd on
    s = path.send(h, z)   (s = h without a path)     client: keyed noise / bottleneck (private_path.py)
    y = await middle.forward(s, positions, session)  cloud: middle blocks (no labels, no ids)
    loss = CE(decoder(y [+ W·h])[:, :-1], p[:, 1:])  client: logits and labels never leave
      (clean residual: decoder(h_c + g ⊙ (y − s)), h_c = encoder over the clean table, local)
    g_y  = d loss / d y                              client: decoder backward
    g_y' = clip + noise(g_y)  (only if configured)   client: umbra/tuning/gradient_noise.py
    g_s  = await middle.backward(g_y', session)      cloud: recompute + backprop the middle
                                                     (not with cloud_backward off: forward only)
    backward of s (g_s), h (local path's gradient), [λ·P(s)], [λ_adv·confusion(s)]
                                                     client: encoder backward; clip; AdamW

The in-loop adversary (umbra/tuning/adversary.py), when on, trains its probe on the detached s
before the encoder's backward.

The cloud sees h, y's gradient and positions — never ids, labels, logits, π or client weights;
with `cloud_backward` off, only h and positions.
No randomness is drawn inside a step (except the gradient noise, from its own generator; the
path's noise is a keyed function of the ids and the probe's init has its own seed), so the
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

from umbra.model.device import device_of
from umbra.errors import ConfigError, UmbraError
from umbra.middle.protocol import Middle
from umbra.training.checkpoint import TrainState
from umbra.training.runlog import TRAIN_FIELDS, CsvLog
from umbra.training.schedule import lr_at
from umbra.tuning import checkpoint as ckpt
from umbra.tuning.adversary import InLoopAdversary
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
    # the training loss of every step since step 0: this run's after what a resumed checkpoint held
    loss_history: list[float] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)  # wall time of each step of this run
    probe_accuracy: list[float] = field(default_factory=list)  # in-loop probe, each step (adversary on)
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
    probe_accuracy: float | None = None  # the in-loop probe on this batch's sent states, before training on it


GATE = "private_path.gate"  # the clean residual's gate: a param group of its own (TuneConfig.gate_lr)


def _group(name: str, p: torch.nn.Parameter) -> int:
    """0: matrices (decayed), 1: vectors, 2: the clean residual's gate (own learning rate)."""
    return 2 if name == GATE else (0 if p.dim() >= 2 else 1)


def make_optimizer(trainable: dict[str, torch.nn.Parameter], config: TuneConfig) -> torch.optim.AdamW:
    """AdamW with decay on matrices only, parameter order = `trainable`'s (checkpoints rely on it).
    Each group's `lr_scale` multiplies the schedule's lr (the gate's: gate_lr / lr)."""
    groups = [{"params": [p for n, p in trainable.items() if _group(n, p) == 0], "weight_decay": config.weight_decay,
               "lr_scale": 1.0},
              {"params": [p for n, p in trainable.items() if _group(n, p) == 1], "weight_decay": 0.0, "lr_scale": 1.0}]
    if GATE in trainable:
        groups.append({"params": [trainable[GATE]], "weight_decay": 0.0,
                       "lr_scale": (config.gate_lr or config.lr) / config.lr})
    return torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2), eps=1e-8)


def _ordered(trainable: dict[str, torch.nn.Parameter]) -> dict[str, torch.nn.Parameter]:
    """The same dict in optimizer-state index order (make_optimizer's groups, in order)."""
    return {n: p for g in range(3) for n, p in trainable.items() if _group(n, p) == g}


async def split_step(client: Tunable, middle: Middle, session: str, ids: torch.Tensor,
                     noise: GradientNoise | None = None, generator: torch.Generator | None = None,
                     inversion: tuple[InversionPenalty, torch.Tensor] | None = None,
                     adversary: InLoopAdversary | None = None, cloud_backward: bool = True) -> torch.Tensor:
    """Forward and backward of one batch of model-space ids [B, T] through the split model;
    leaves gradients in the client's parameters and returns the (detached) LM loss (the in-loop
    probe's accuracy, with an adversary, in `adversary.last_accuracy`). With `noise` enabled the gradient sent
    to the middle is clipped and noised (`generator` draws it); with `inversion` = (settings,
    codebook in model id order) the encoder also gets λ·P's gradient; a client with a
    `private_path` sends `path.send(h, z)` and decodes `y + W·h`; with `adversary` its probe
    trains on the sent states and, when enabled, λ·confusion's gradient reaches the encoder. With
    `cloud_backward` off the middle runs forward only: no gradient is sent, and what reaches the
    encoder comes from the local path alone."""
    b, t = ids.shape
    positions = torch.arange(t, dtype=torch.int64, device=ids.device).expand(b, t)
    path = getattr(client, "private_path", None)
    hidden = client.encoder(ids, positions)
    sent = hidden if path is None else path.send(hidden, path.noise_for(ids))
    out = await middle.forward(sent.detach(), positions, session)
    out = out.detach().requires_grad_(True)
    local = local_sent = None
    if path is None:
        logits = client.decoder(out, positions)
    elif path.config.clean:  # h_c's gradient reaches the encoder and g directly; −g⊙∂L/∂in joins s's below
        local_sent = sent.detach().requires_grad_(True)
        clean = path.clean_hidden(client.encoder, ids, positions)
        logits = client.decoder(path.decoder_input(out, hidden, sent=local_sent, clean=clean), positions)
    else:  # W·h's gradient to h is collected here and joins the middle's below
        local = hidden.detach().requires_grad_(True)
        logits = client.decoder(path.decoder_input(out, local), positions)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))
    loss.backward()
    grad_in = None
    if cloud_backward:
        grad_out = out.grad
        if noise is not None and noise.enabled:
            if generator is None:
                raise ConfigError("gradient noise needs its generator")
            grad_out = noise.apply(grad_out, generator)
        grad_in = await middle.backward(grad_out, session)
    if local_sent is not None:
        grad_in = local_sent.grad if grad_in is None else grad_in + local_sent.grad.to(grad_in.dtype)
    roots, grads = ([sent], [grad_in]) if grad_in is not None else ([], [])
    if local is not None:
        roots.append(hidden)
        grads.append(local.grad)
    if inversion is not None and inversion[0].enabled:
        settings, book = inversion
        roots.append(settings.weight * penalty(sent, ids, book, settings.temperature))
        grads.append(None)
    if adversary is not None:
        public = ids if client.permutation is None else client.permutation.to_public(ids)
        adversary.train_on(sent.detach(), public)
        if adversary.config.enabled:
            roots.append(adversary.config.weight * adversary.confusion(sent))
            grads.append(None)
    if roots:  # none: forward only with nothing local to learn from (TuneConfig.validate refuses it)
        torch.autograd.backward(roots, grads)
    return loss.detach()


class _Run:
    def __init__(self, client: Tunable, middle: Middle, data: TuneData, config: TuneConfig, out_dir: Path | None,
                 noise_seed: int | None = None, codebook: torch.Tensor | None = None):
        self.client, self.middle, self.data, self.config, self.out_dir = client, middle, data, config, out_dir
        self.device = device_of(client.encoder)  # the client's: the middle given must be on it too
        self.noise_generator = config.gradient_noise.generator(noise_seed) if config.gradient_noise.enabled else None
        # a fixed noise seed (benchmarks) is resumed where it stopped; a CSPRNG-seeded one is never
        # written down (whoever holds it could subtract the noise) and a resumed run draws afresh
        self.keep_noise_state = noise_seed is not None and self.noise_generator is not None
        self.loss_history: list[float] = []
        self.inversion = None
        if config.inversion_penalty.enabled:
            if codebook is None:
                raise ConfigError("the inversion penalty needs the public codebook (inversion_penalty.own_codebook)")
            self.inversion = (config.inversion_penalty, model_order(codebook, client.permutation).to(self.device))
        self.adversary = None
        if config.adversary.active:
            self.adversary = InLoopAdversary(config.adversary, client.encoder.spec.hidden_size,
                                             client.encoder.spec.vocab_size, self.device)
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
        if self.adversary is not None:
            saved = payload.get("extra", {}).get("adversary")
            if saved is None:
                raise ConfigError("the checkpoint holds no in-loop adversary to resume")
            self.adversary.load_state_dict(saved)
        extra = payload.get("extra", {})
        self.loss_history = list(extra.get("losses", []))
        if self.keep_noise_state:
            if "noise_generator" not in extra:
                raise ConfigError("the checkpoint holds no gradient-noise state to resume a seeded run from")
            self.noise_generator.set_state(extra["noise_generator"])

    def checkpoint(self) -> None:
        if self.out_dir is None:
            return
        extra = {"losses": list(self.loss_history)}
        if self.adversary is not None:
            extra["adversary"] = self.adversary.state_dict()
        if self.keep_noise_state:
            extra["noise_generator"] = self.noise_generator.get_state()
        ckpt.save(self.ckpt_path, self.client, self.trainable, self.optimizer, self.state,
                  self.config.to_dict(), self.fingerprints, extra=extra)

    async def step(self, session: str) -> StepReport:
        cfg, st = self.config, self.state
        blocks, epoch, block = self.data.batch(st.epoch, st.block, cfg.batch_size)
        ids = torch.from_numpy(blocks)
        if self.client.permutation is not None:
            ids = self.client.permutation.to_private(ids)  # labels are π(t) too
        ids = ids.to(self.device)  # batches are packed on the CPU
        lr = lr_at(st.step, cfg.lr, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
        t0 = time.perf_counter()
        try:
            loss = await split_step(self.client, self.middle, session, ids, cfg.gradient_noise, self.noise_generator,
                                    self.inversion, self.adversary, cfg.cloud_backward)
            accuracy = self.adversary.last_accuracy if self.adversary is not None else None
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.grad_clip)
            self.optimizer.step()
        finally:
            self.optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - t0
        st.step, st.epoch, st.block = st.step + 1, epoch, block  # committed only after a whole step
        st.tokens_seen += ids.numel()
        st.elapsed_s += seconds
        return StepReport(st.step, float(loss), lr, float(grad_norm), seconds, ids.numel(), accuracy)


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
    path = getattr(client, "private_path", None)
    if (path.config if path is not None else None) != (config.private_path if config.private_path.enabled else None):
        raise ConfigError("the client's private path and config.private_path disagree (attach it with "
                          "umbra.tuning.private_path.prepare_for_tuning)")
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
    modules = [client.encoder, client.decoder] + ([path] if path is not None else [])
    for m in modules:
        m.train()
    session = await middle.open_session(training=True)
    try:
        while run.state.step < stop_at:
            if stop is not None and stop():
                result.interrupted = True
                break
            report = await run.step(session)
            result.losses.append(report.loss)
            run.loss_history.append(report.loss)
            result.step_seconds.append(report.seconds)
            if report.probe_accuracy is not None:
                result.probe_accuracy.append(report.probe_accuracy)
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
        for m in modules:
            m.eval()
            m.requires_grad_(False)
        try:
            await middle.close(session)
        except UmbraError:  # the cloud already dropped it (or is gone); nothing else to release
            pass
    result.loss_history = list(run.loss_history)
    result.finished = run.state.step >= config.steps
    return result


def model_ids(client: Tunable, public_ids: np.ndarray) -> torch.Tensor:
    """Public ids -> the ids `client` is indexed by (π(t) for a bundle, t for fClean)."""
    ids = torch.from_numpy(np.asarray(public_ids, dtype=np.int64))
    return ids if client.permutation is None else client.permutation.to_private(ids)
