"""STuning with an adversary in the loop: the client trains its own probe on the states it SENDS
and penalizes its encoder for what the probe reads (issue 17).

Each step, on the batch's sent states s (after the private path's noise and bottleneck, detached):

    acc    = probe accuracy on s BEFORE it sees this batch               (reported; a held-out view)
    probe  ← `inner_steps` Adam steps of CE(probe(s), t)                  (probe only)
    q      = probe(s) with the updated probe, autograd to s and the encoder only
    loss  += λ · mean_t CE(prior, q_t) = λ · mean_t −Σ_v prior_v log q_t(v)   (the confusion loss)

`prior` is the running frequency of the labels seen so far (add-one smoothed): the probe's best
guess with no information in the state — the frequency-only baseline of the attack tables.

Why the confusion loss, not −λ·CE (gradient reversal): −CE is unbounded and rewarded most by a
probe that is confidently *wrong*, i.e. by states that still encode the token under a relabelling
the probe has not caught up with — exactly what a freshly trained attacker reads. The confusion
loss is minimal only when the probe's posterior is the prior, i.e. when the states tell it nothing
beyond frequency, and it is bounded. And so that a rotation the probe cannot follow within a step
does not satisfy it cheaply, the probe is kept strong: it persists across steps (it is in the
checkpoint), takes several inner steps per outer step, reads RMS-normalized states (no gain from
rescaling) with ±`window` neighbours, as attack (b) does.

The probe predicts PUBLIC token ids (the client knows t = π⁻¹(p)): a relabelling of the same probe,
so it is as strong as a private-id one, and its weights — which the checkpoint stores — carry no
trace of π in their row order. The in-loop probe's accuracy is a training signal, not a privacy
figure: only attackers trained afterwards on held-out traffic judge a configuration
(umbra/attack_grid). Torch is imported lazily: the config is read by the CLI's parser."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from umbra.errors import ConfigError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class AdversaryConfig:
    weight: float = 0.0  # λ of the confusion loss; 0 = no penalty (the defence is off)
    monitor: bool = False  # with λ = 0: still train the probe and report its accuracy (the control)
    inner_steps: int = 2  # probe updates per STuning step (keeps it ahead of the encoder)
    lr: float = 1e-3  # the probe's Adam learning rate
    hidden: int = 512  # width of the probe's hidden layer; 0 = a linear probe
    window: int = 2  # ±neighbour positions the probe reads (attack (b) reads ±2)
    seed: int = 0  # the probe's initialization

    @property
    def enabled(self) -> bool:
        """The defence is on (the penalty acts on the encoder)."""
        return self.weight > 0

    @property
    def active(self) -> bool:
        """The probe is trained (the defence, or monitoring only)."""
        return self.enabled or self.monitor

    def validate(self) -> "AdversaryConfig":
        if not (self.weight >= 0 and math.isfinite(self.weight)):
            raise ConfigError(f"adversary weight must be a finite number >= 0, got {self.weight}")
        if self.inner_steps < 1 or self.hidden < 0 or self.window < 0:
            raise ConfigError("need adversary inner_steps >= 1, hidden >= 0 and window >= 0")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"adversary lr must be > 0, got {self.lr}")
        return self


def _windows(states: torch.Tensor, window: int) -> torch.Tensor:
    """[B, T, d] -> [B, T, (2w+1)·d]: each position's RMS-normalized state and its ±w neighbours
    (zeros beyond the sequence)."""
    import torch
    import torch.nn.functional as F

    x = states.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    if window == 0:
        return x
    padded = F.pad(x, (0, 0, window, window))
    t = x.shape[1]
    return torch.cat([padded[:, i : i + t] for i in range(2 * window + 1)], dim=-1)


class InLoopAdversary:
    """The probe, its optimizer and the label prior of one tuning run."""

    def __init__(self, config: AdversaryConfig, hidden_size: int, vocab_size: int, device=None):
        """`device`: the client's (None: the CPU); the probe's initial draws are made on the CPU."""
        import torch
        from torch import nn

        self.config = config.validate()
        inp = hidden_size * (2 * config.window + 1)
        gen = torch.Generator().manual_seed(config.seed)
        with torch.random.fork_rng(devices=[]):  # the init draws from its own seed, not the global RNG
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
            if config.hidden:
                self.probe = nn.Sequential(nn.Linear(inp, config.hidden), nn.GELU(), nn.Linear(config.hidden, vocab_size))
            else:
                self.probe = nn.Sequential(nn.Linear(inp, vocab_size))
        self.probe.to(device=device)
        self.optimizer = torch.optim.Adam(self.probe.parameters(), lr=config.lr)
        self.counts = torch.ones(vocab_size, dtype=torch.float64, device=device)  # add-one smoothed label counts
        self.last_accuracy: float | None = None  # of the latest `train_on`

    def train_on(self, sent: torch.Tensor, labels: torch.Tensor) -> float:
        """Accuracy on `sent` [B, T, d] (detached) before training on it, then `inner_steps`
        updates; `labels` [B, T] public ids."""
        import torch
        import torch.nn.functional as F

        x = _windows(sent.detach(), self.config.window)
        y = labels.reshape(-1)
        self.counts += torch.bincount(y, minlength=self.counts.numel()).double()
        self.probe.requires_grad_(True)
        with torch.no_grad():
            accuracy = (self.probe(x).argmax(-1).reshape(-1) == y).float().mean().item()
        for _ in range(self.config.inner_steps):
            logits = self.probe(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.last_accuracy = accuracy
        return accuracy

    def confusion(self, sent: torch.Tensor) -> torch.Tensor:
        """mean_t CE(prior, probe(sent_t)): autograd to `sent` only (the probe is held fixed)."""
        import torch

        prior = (self.counts / self.counts.sum()).float()
        self.probe.requires_grad_(False)
        logq = torch.log_softmax(self.probe(_windows(sent, self.config.window)), -1)  # [B, T, V]
        return -(logq * prior).sum(-1).mean()

    def state_dict(self) -> dict:
        return {"probe": self.probe.state_dict(), "optimizer": self.optimizer.state_dict(), "counts": self.counts}

    def load_state_dict(self, state: dict) -> None:
        self.probe.load_state_dict(state["probe"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.counts = state["counts"].to(self.counts.device).clone()
