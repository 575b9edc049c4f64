"""manifest.json of a client bundle: what it was made from and how. No secrets: the permutation
and its key never appear here (the key's keyring entry is named in permutation.sealed)."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from umbra.errors import ConfigError

FORMAT = "umbra-client-bundle"
FORMAT_VERSION = 1
FILENAME = "manifest.json"
MECHANISM = "indvocab-exponential/v1"  # DESIGN §4, docs/privacy/indvocab.md
LTOKENIZER = "uniform-permutation/v1"  # docs/privacy/ltokenizer.md


@dataclass
class Manifest:
    bundle_id: str  # random; names the permutation key in the OS keyring
    created: str  # ISO 8601, UTC
    base: dict  # model_id, family, vocab_size, hidden_size, num_layers, dtype, weights {file: sha256}
    split: dict  # encoder_blocks, decoder_blocks
    privacy: dict  # mechanism, epsilon, feature_epsilon, h, guess_bound, ltokenizer
    versions: dict  # umbra, torch, transformers, numpy
    files: dict = field(default_factory=dict)  # bundle file -> sha256 (integrity, not secrecy)
    updated: str | None = None  # last save_client_weights, if any
    format: str = FORMAT
    format_version: int = FORMAT_VERSION

    @property
    def epsilon(self) -> float:
        return _float(self.privacy["epsilon"])

    @property
    def h(self) -> float:
        return float(self.privacy["h"])

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def read(cls, bundle_dir: Path) -> "Manifest":
        path = Path(bundle_dir) / FILENAME
        if not path.is_file():
            raise ConfigError(f"{bundle_dir} is not a client bundle (no {FILENAME}); make one with `umbra init`")
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ConfigError(f"{path} is not an Umbra client bundle manifest")
        if data.get("format_version") != FORMAT_VERSION:
            raise ConfigError(
                f"{path} has bundle format version {data.get('format_version')}; this Umbra reads {FORMAT_VERSION}"
            )
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"{path} is malformed: {exc}") from exc


# The default INDVocab budget of a row (ε_i = 4 for the default model's d = 256). With the default
# STuning (noised gradient, σ = DEFAULT_SIGMA in umbra/tuning/gradient_noise.py) every attack of
# docs/privacy/attacks.md stays within a point of the frequency baseline, at the best top-1 of the
# configurations that do; docs/privacy/utility.md, "The default ε", has the tables and the reasoning.
DEFAULT_EPSILON = 1024.0


def epsilon_json(value: float) -> float | str:
    """JSON has no infinity: ε = ∞ is stored as the string "inf"."""
    return "inf" if math.isinf(value) else float(value)


def _float(value) -> float:
    return math.inf if value == "inf" else float(value)


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
