"""Attack (b): a learned inversion probe at the split layer.

The cloud trains an MLP on PUBLIC code: the public encoder's state at each position, together
with the states of `window` neighbours on each side (later positions attend to earlier ones, so
both sides carry information about a token), predicts the public token id there. States are
RMS-normalized first, so a change of scale (e.g. from a randomized table) does not by itself
throw the probe off.

`simulate_epsilon` makes the probe noise-aware: the mechanism of DESIGN §4 is public, so the
cloud can randomize the public table itself at the same ε (its own draw — it never sees the
client's) and train on the states that gives. It is an option, not the default.

Probes train on an accelerator when the machine has one (`training_device`): the attacker's cost
is the probe's fit (vocabulary-sized output, every position of every layer), and an attacker would
use one. On a CPU-only machine the fit is the same code on the CPU; either way the trained probe
comes back to the CPU, where it reads the traffic."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import nn

from umbra.atomic import write_atomic
from umbra.attacks.probe_config import ProbeConfig
from umbra.attacks.public import PublicModel
from umbra.attacks.transcript import ObservedSequence
from umbra.errors import ConfigError
from umbra.model.device import resolve_device
from umbra.model.parts import ClientEncoder
from umbra.privacy.indvocab import INDVocab, INDVocabConfig


def _normalize(states: torch.Tensor) -> torch.Tensor:
    return states * torch.rsqrt(states.float().pow(2).mean(-1, keepdim=True) + 1e-12)


def window_features(states: torch.Tensor, window: int) -> torch.Tensor:
    """[N,T,C] (or [T,C]) states -> [N,T,(2w+1)·C]: each position with its neighbours (zeros
    past the ends), RMS-normalized."""
    squeeze = states.dim() == 2
    x = _normalize(states[None] if squeeze else states)
    n, t, c = x.shape
    padded = torch.nn.functional.pad(x, (0, 0, window, window))
    cols = [padded[:, o : o + t] for o in range(2 * window + 1)]
    out = torch.cat(cols, -1)
    return out[0] if squeeze else out


class ProbeNet(nn.Module):
    def __init__(self, in_dim: int, hidden: int, vocab: int):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(in_dim), nn.Linear(in_dim, hidden), nn.GELU(),
                                 nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, vocab))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def simulated_encoder(public: PublicModel, epsilon: float, h: float, seed: int) -> ClientEncoder:
    """A copy of the public encoder with the cloud's own INDVocab draw of the public table."""
    enc = copy.deepcopy(public.encoder)
    table = INDVocab(INDVocabConfig(epsilon, h)).randomize(enc.embed_tokens.weight, seed=f"attacker-{seed}")
    with torch.no_grad():
        enc.embed_tokens.weight.copy_(table)
    return enc


def training_device() -> torch.device:
    """Where probes train: the first CUDA device if there is one, else the CPU."""
    return resolve_device("auto")


class InversionProbe:
    name = "probe"

    def __init__(self, net: ProbeNet, config: ProbeConfig, vocab: int):
        self.net = net.eval()
        self.config = config
        self.vocab = vocab  # ids the probe may answer (< tokenizer size)

    @classmethod
    def train(cls, public: PublicModel, blocks: np.ndarray, config: ProbeConfig = ProbeConfig(),
              progress=None) -> "InversionProbe":
        """Fit on public blocks [N,T] of public ids."""
        config.validate()
        ids = torch.from_numpy(blocks)
        if config.simulate_epsilon is None:
            states = public.states(ids)
        else:
            enc = simulated_encoder(public, config.simulate_epsilon, config.h, config.seed)
            with torch.no_grad():
                pos = torch.arange(ids.shape[1])[None].expand(ids.shape[0], -1)
                states = torch.cat([enc(ids[i : i + 16], pos[i : i + 16]) for i in range(0, ids.shape[0], 16)])
        return cls.fit(states, ids, config, min(public.tokenizer.size, public.vocab_size), progress)

    @classmethod
    def fit(cls, states: torch.Tensor, ids: torch.Tensor, config: ProbeConfig, vocab: int,
            progress=None, device: torch.device | str | None = None) -> "InversionProbe":
        """Fit on any states [N,T,C] (a public encoder's, a shadow client's, the real client's, a
        middle layer's) labelled with the public ids [N,T] (< `vocab`) at each position, on
        `device` (None: `training_device()`); the probe returned lives on the CPU."""
        config.validate()
        if states.shape[:2] != ids.shape:
            raise ConfigError(f"states {list(states.shape)} and ids {list(ids.shape)} must align")
        torch.manual_seed(config.seed)
        feats = window_features(states.float(), config.window)  # [N,T,F]
        x, y = feats.reshape(-1, feats.shape[-1]), ids.reshape(-1).long()
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= vocab):
            raise ConfigError(f"probe labels must lie in [0, {vocab})")
        device = training_device() if device is None else torch.device(device)
        net = ProbeNet(x.shape[1], config.hidden, vocab).to(device)  # initialized on the CPU: the same init anywhere
        x, y = x.to(device), y.to(device)
        opt = torch.optim.AdamW(net.parameters(), lr=config.lr, weight_decay=0.01)
        steps = config.epochs * math.ceil(x.shape[0] / config.batch)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
        gen = torch.Generator().manual_seed(config.seed)
        step = 0
        net.train()
        for _ in range(config.epochs):
            order = torch.randperm(x.shape[0], generator=gen).to(device)
            for i in range(0, x.shape[0], config.batch):
                idx = order[i : i + config.batch]
                loss = nn.functional.cross_entropy(net(x[idx]), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                step += 1
                if progress is not None:
                    progress(step, steps, loss.item())
        return cls(net.cpu(), config, vocab)

    @torch.no_grad()
    def guess_states(self, states: torch.Tensor) -> np.ndarray:
        """[T,C] states of one sequence, in order -> [T] public ids."""
        feats = window_features(states.float(), self.config.window)
        return self.net(feats).argmax(-1).numpy().astype(np.int64)

    def run(self, sequences: list[ObservedSequence]) -> list[np.ndarray]:
        return [self.guess_states(s.hidden) for s in sequences]

    # -- cache ------------------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"config": self.config.key(), "vocab": str(self.vocab), "in_dim": str(self.net.net[1].in_features)}
        tensors = {k: v.contiguous() for k, v in self.net.state_dict().items()}
        write_atomic(path, safetensors_bytes(tensors, metadata=meta), 0o644)  # caches may be shared by runs in parallel

    @classmethod
    def load(cls, path: Path, config: ProbeConfig) -> "InversionProbe | None":
        """The cached probe at `path` if it was trained with exactly `config`, else None."""
        if not Path(path).is_file():
            return None
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        if meta.get("config") != config.key():
            return None
        net = ProbeNet(int(meta["in_dim"]), config.hidden, int(meta["vocab"]))
        net.load_state_dict(load_file(str(path)))
        return cls(net, config, int(meta["vocab"]))
