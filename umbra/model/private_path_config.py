"""Typed configuration of the private local path (umbra/model/private_path.py), torch-free so the
CLI parser, TuneConfig and the bundle manifest can hold it.

    PrivatePathConfig()                             off: the split model exactly as before
    PrivatePathConfig(enabled=True)                 the local projection only (nothing lossy yet)
    PrivatePathConfig(enabled=True, noise=0.5)      + keyed Gaussian noise on every sent position
    PrivatePathConfig(enabled=True, rank=32)        + a rank-32 bottleneck on what is sent
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from umbra.errors import ConfigError


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
        return self

    def to_dict(self) -> dict:
        return asdict(self)

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
