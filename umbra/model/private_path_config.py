"""Typed configuration of the private local path (umbra/model/private_path.py), torch-free so the
CLI parser, TuneConfig and the bundle manifest can hold it.

    PrivatePathConfig()                             off: the split model exactly as before
    PrivatePathConfig(enabled=True)                 the local projection only (nothing lossy yet)
    PrivatePathConfig(enabled=True, noise=0.5)      + keyed Gaussian noise on every sent position
    PrivatePathConfig(enabled=True, rank=32)        + a rank-32 bottleneck on what is sent
    PrivatePathConfig(enabled=True, residual="clean", noise=1.0)
                                                    the clean residual: the decoder reads the client's
                                                    encoder over the CLEAN public table plus the
                                                    middle's gated residual delta g ⊙ (y − sent)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from umbra.errors import ConfigError

RESIDUALS = ("local", "clean")  # what the decoder reads besides the middle (PrivatePathConfig.residual)
GATES = ("channel", "scalar")  # the clean residual's gate g: per channel [d], or one number


@dataclass(frozen=True)
class PrivatePathConfig:
    # The client decoder's input becomes (middle output) + W·(encoder output), W a learned d×d
    # projection that starts at zero; off = the split model exactly as before.
    enabled: bool = False
    # s: the std of the Gaussian noise added to each sent position, relative to the RMS of that
    # position's (projected) state — signal-to-noise ratio 1/s². 0 = no noise. The noise of a
    # position is a keyed function of the bundle's secret and the private ids up to it, so a
    # re-sent prefix is re-sent with the same noise (umbra/model/prefix_noise.py).
    noise: float = 0.0
    # r: send Q·Qᵀ·h for a fixed orthonormal d×r basis Q drawn from the bundle's secret (noise, if
    # any, is added inside the r-dim subspace); None = full rank.
    rank: int | None = None
    # What the decoder's input is built from (umbra/model/private_path.py):
    #   "local": y + W·h, h the encoder over the INDVocab table (as noisy as what is sent), W a
    #            zero-initialized d×d projection;
    #   "clean": h_clean + g ⊙ (y − sent), h_clean the same encoder blocks over the base model's
    #            CLEAN public table (kept on the client, never sent), g a learned gate, init 1;
    #            g = 0 is the client-blocks-alone control, and anything the middle adds is on top.
    residual: str = "local"
    # The clean residual's gate: "channel" (one per hidden channel, [d]) or "scalar" ([1]).
    gate: str = "channel"

    @property
    def lossy(self) -> bool:
        """Whether what is sent differs from the encoder's output."""
        return self.enabled and (self.noise > 0 or self.rank is not None)

    def validate(self, hidden_size: int | None = None) -> "PrivatePathConfig":
        if not (self.noise >= 0 and math.isfinite(self.noise)):
            raise ConfigError(f"private path noise must be a finite number >= 0, got {self.noise}")
        if self.rank is not None and (not isinstance(self.rank, int) or self.rank < 1):
            raise ConfigError(f"private path rank must be a positive integer, got {self.rank!r}")
        if hidden_size is not None and self.rank is not None and self.rank > hidden_size:
            raise ConfigError(f"private path rank {self.rank} exceeds the hidden size {hidden_size}")
        if not self.enabled and (self.noise > 0 or self.rank is not None):
            raise ConfigError("a lossy send (noise, rank) needs the private local path: enable it")
        if self.residual not in RESIDUALS:
            raise ConfigError(f"private path residual must be one of {', '.join(RESIDUALS)}, got {self.residual!r}")
        if self.gate not in GATES:
            raise ConfigError(f"private path gate must be one of {', '.join(GATES)}, got {self.gate!r}")
        if self.residual == "clean" and not self.enabled:
            raise ConfigError("the clean residual needs the private local path: enable it")
        if self.residual != "clean" and self.gate != "channel":
            raise ConfigError("a gate is a setting of the clean residual (residual=\"clean\")")
        return self

    def describe(self) -> str:
        """In words, for a person: "clean residual, keyed noise s = 4", "local path y + W·h, rank 8"."""
        if not self.enabled:
            return "off"
        kind = "clean residual" if self.clean else "local path y + W·h"
        sent = [f"keyed noise s = {self.noise:g}"] if self.noise else []
        sent += [f"rank {self.rank}"] if self.rank is not None else []
        gate = ", one gate" if self.gate == "scalar" else ""
        return f"{kind}, {' + '.join(sent) or 'lossless send'}{gate}"

    @property
    def clean(self) -> bool:
        """Whether the decoder reads the clean residual (and the path holds the clean table)."""
        return self.enabled and self.residual == "clean"

    def to_dict(self) -> dict:
        """asdict, without `residual` and `gate` when they are the defaults ("local"): a path
        configured before they existed keeps its record, and so its privacy-mode key."""
        d = asdict(self)
        if self.residual == "local" and self.gate == "channel":
            del d["residual"], d["gate"]
        return d

    @classmethod
    def from_dict(cls, d: dict | None) -> "PrivatePathConfig":
        if d is None:
            return cls()
        if not isinstance(d, dict):
            raise ConfigError(f"private path settings must be an object, got {type(d).__name__}")
        try:
            return cls(**d).validate()
        except TypeError as exc:
            raise ConfigError(f"malformed private path settings: {exc}") from exc
