"""Typed configuration of STuning (split fine-tuning of the client encoder and decoder)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from umbra.errors import ConfigError
from umbra.model.private_path_config import PrivatePathConfig
from umbra.training.config import FimConfig
from umbra.tuning.adversary import AdversaryConfig
from umbra.tuning.gradient_noise import GradientNoise
from umbra.tuning.inversion_penalty import InversionPenalty

# May differ between a run and its resumption: they do not change the trajectory.
RUNTIME_FIELDS = ("stop_at_step", "checkpoint_every")

# `umbra tune`'s private path when no path flag is given, chosen from the frontier
# (docs/privacy/frontier.md, "The defaults, and why"): the clean residual with keyed noise s = 4
# holds every attack measured, the adaptive ones included, and completes best of the
# configurations that do at the product's 300 steps. TuneConfig's own default stays off (the
# split model exactly), which the attack grid and the tests build on.
DEFAULT_PRIVATE_PATH = PrivatePathConfig(enabled=True, noise=4.0, residual="clean")
CLEAN_GATE_LR = 1e-2  # the clean residual's gate: about ±2 over a 300-step schedule (the blocks' 3e-4: ±0.06)


@dataclass(frozen=True)
class TuneConfig:
    steps: int = 300  # optimizer steps; the learning-rate schedule spans exactly these
    batch_size: int = 4  # packed blocks per step
    context_length: int = 512  # tokens per block (at most the model's positions)
    lr: float = 5e-4  # peak learning rate (AdamW)
    min_lr_ratio: float = 0.1  # final lr = lr * min_lr_ratio (cosine decay)
    warmup_steps: int = 20  # linear warmup from 0
    weight_decay: float = 0.1  # AdamW decay on matrices (not on norms)
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # max global gradient norm of the client's trainable parameters
    seed: int = 0  # data order and FIM draws (umbra.training.packing)
    fim: FimConfig = field(default_factory=FimConfig)  # plain next-token + FIM mix, as pretraining
    # Also train the INDVocab-randomized embedding table. Off by default: the table's ε-IND
    # guarantee covers the table as drawn; training moves its rows with gradients that flow
    # through the public middle and the (public-initialized) LM head, which can pull them back
    # toward the public geometry the cloud knows (docs/privacy/utility.md).
    train_embedding: bool = False
    # Clip-and-noise of the gradient sent to the cloud (defence against label recovery, attack
    # (e)); off in the dataclass (σ = 0); `umbra tune` turns it on for bundles with INDVocab noise
    # (gradient_noise.default_sigma). umbra/tuning/gradient_noise.py.
    gradient_noise: GradientNoise = field(default_factory=GradientNoise)
    # λ·P(nearest-neighbour inversion finds the true token) added to the loss, against STuning
    # pulling the encoder back to the public geometry; off by default. umbra/tuning/inversion_penalty.py.
    inversion_penalty: InversionPenalty = field(default_factory=InversionPenalty)
    # The private local path: the decoder also gets W·(encoder output) locally, and what is sent is
    # made lossy (keyed noise, a rank bottleneck); off by default. umbra/model/private_path.py.
    private_path: PrivatePathConfig = field(default_factory=PrivatePathConfig)
    # Peak learning rate of the clean residual's gate g (its own AdamW group, same schedule);
    # None: `lr`. A gate starting at 1 that must find its scale in a few hundred steps needs more
    # than the blocks' lr (umbra/model/private_path.py).
    gate_lr: float | None = None
    # A probe the client trains on the states it sends, whose success the encoder is penalized
    # for; off by default. umbra/tuning/adversary.py.
    adversary: AdversaryConfig = field(default_factory=AdversaryConfig)
    # Whether the cloud runs the middle's backward during tuning. False: forward only — no gradient
    # is sent to the cloud and none comes back (nothing for attack (e) to read, no noise to add);
    # the encoder then learns only through the private local path (which it needs), so what it
    # sends is never shaped by the middle's gradient. docs/privacy/frontier.md.
    cloud_backward: bool = True
    checkpoint_every: int = 50  # steps between checkpoints (also at the end and when stopped)
    stop_at_step: int | None = None  # stop early (checkpointed) at this step; schedule unchanged

    def __post_init__(self) -> None:
        # the issue-17 sub-configs may come as their to_dict() form (TuneConfig(**config.to_dict()))
        if isinstance(self.private_path, dict):
            object.__setattr__(self, "private_path", PrivatePathConfig.from_dict(self.private_path))
        if isinstance(self.adversary, dict):
            fields = {k: v for k, v in self.adversary.items() if k != "enabled"}  # `enabled` is derived
            object.__setattr__(self, "adversary", AdversaryConfig(**fields))

    def validate(self, max_positions: int | None = None) -> "TuneConfig":
        for name in ("steps", "batch_size", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.context_length < 2:
            raise ConfigError("context_length must be >= 2 (one input and one label)")
        if max_positions is not None and self.context_length > max_positions:
            raise ConfigError(f"context_length {self.context_length} exceeds the model's {max_positions} positions")
        if not self.lr > 0 or not 0 <= self.min_lr_ratio <= 1 or self.warmup_steps < 0:
            raise ConfigError("need lr > 0, 0 <= min_lr_ratio <= 1 and warmup_steps >= 0")
        if self.gate_lr is not None and not self.gate_lr > 0:
            raise ConfigError(f"gate_lr must be > 0, got {self.gate_lr}")
        if self.grad_clip <= 0 or self.weight_decay < 0:
            raise ConfigError("need grad_clip > 0 and weight_decay >= 0")
        if self.stop_at_step is not None and self.stop_at_step < 0:
            raise ConfigError("stop_at_step must be >= 0")
        self.gradient_noise.validate()
        self.inversion_penalty.validate()
        self.private_path.validate()
        self.adversary.validate()
        if not self.cloud_backward:
            if self.gradient_noise.enabled:
                raise ConfigError("gradient noise is added to the gradient sent to the cloud; forward-only "
                                  "tuning (cloud_backward off) sends none")
            if not self.private_path.enabled:
                raise ConfigError("forward-only tuning (cloud_backward off) needs the private local path: "
                                  "without it the encoder learns nothing")
        return self

    def to_dict(self) -> dict:
        """asdict, plus each sub-config's `enabled` (a property, which asdict leaves out)."""
        d = asdict(self)
        d["adversary"]["enabled"] = self.adversary.enabled
        d["private_path"] = self.private_path.to_dict()  # older records stay as they were
        if self.cloud_backward:  # the default: left out, so every earlier record (and key) stays as it was
            del d["cloud_backward"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TuneConfig":
        d = dict(d)
        noise = GradientNoise(**d.pop("gradient_noise", {}))  # absent in checkpoints made before they existed
        penalty = InversionPenalty(**d.pop("inversion_penalty", {}))
        path = d.pop("private_path", None) or {}  # both absent in checkpoints made before issue 17
        adversary = d.pop("adversary", None) or {}
        return cls(fim=FimConfig(**d.pop("fim")), gradient_noise=noise, inversion_penalty=penalty,
                   private_path=path, adversary=adversary, **d)

    def trajectory(self) -> dict:
        """The fields that determine the training trajectory (all but RUNTIME_FIELDS)."""
        return {k: v for k, v in self.to_dict().items() if k not in RUNTIME_FIELDS}
