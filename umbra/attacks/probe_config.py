"""The learned inversion probe's settings (attack (b), probe.py), torch-free so that a CLI can
show their defaults without loading the model code."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

from umbra.errors import ConfigError


@dataclass(frozen=True)
class ProbeConfig:
    window: int = 2  # neighbours on each side: the MLP sees 2·window + 1 states
    hidden: int = 512  # width of the two hidden layers
    epochs: int = 4  # passes over the public training positions
    batch: int = 512  # positions per optimizer step
    lr: float = 2e-3  # AdamW, cosine-decayed to 0
    seed: int = 0  # init and batch order
    simulate_epsilon: float | None = None  # train on the cloud's own INDVocab draw at this ε
    h: float = 0.25  # INDVocab temperature of that draw (DESIGN §4 default)

    def validate(self) -> None:
        if self.window < 0 or self.hidden < 1 or self.epochs < 1 or self.batch < 1 or not self.lr > 0:
            raise ConfigError("probe window must be >= 0 and hidden, epochs, batch, lr positive")
        if self.simulate_epsilon is not None and (math.isnan(self.simulate_epsilon) or self.simulate_epsilon < 0):
            raise ConfigError("simulate_epsilon must be >= 0 (or None)")

    def key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)
