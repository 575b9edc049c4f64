"""manifest.json of a client bundle: what it was made from and how. No secrets: the permutation
and its key never appear here (the key's keyring entry is named in permutation.sealed).

Version 2 adds `weights` (which file holds the table and the client blocks) and `adapters` (one
entry per adapter: kind, placement, role, file, hash, how it was trained, the ε it spent). Every
file a manifest names is content-addressed or written before the manifest, so replacing
manifest.json is the one atomic commit of any change (bundle_commit.py). Version-1 manifests are
read as they are (fixed weight names, no adapters); the first change to such a bundle writes a
version-2 manifest. A manifest of a newer version than this code reads is refused, naming it."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from umbra.errors import ConfigError

FORMAT = "umbra-client-bundle"
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
BASE_DIR = "base"  # the public config and tokenizer files of the base model
V1_WEIGHTS = {"indvocab": "indvocab.safetensors", "client": "client.safetensors"}
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
    updated: str | None = None  # last change committed, if any
    weights: dict = field(default_factory=lambda: dict(V1_WEIGHTS))  # "indvocab" | "client" -> file
    adapters: dict = field(default_factory=dict)  # name -> AdapterEntry.to_json()
    access: dict = field(default_factory=dict)  # SecureGate: {"keys": {...}, "gate": {...}} (umbra/securegate/bundle_access.py)
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
        version = data.get("format_version")
        if version not in READABLE_VERSIONS:
            raise ConfigError(f"{path} has bundle format version {version}; this Umbra reads versions "
                              f"{', '.join(map(str, READABLE_VERSIONS))} (a newer Umbra made it: upgrade)")
        try:
            manifest = cls(**data)
        except TypeError as exc:
            raise ConfigError(f"{path} is malformed: {exc}") from exc
        if set(manifest.weights) != set(V1_WEIGHTS) or not all(isinstance(f, str) for f in manifest.weights.values()):
            raise ConfigError(f"{path} is malformed: weights must name {', '.join(V1_WEIGHTS)}")
        if not isinstance(manifest.adapters, dict):
            raise ConfigError(f"{path} is malformed: adapters must be an object")
        if not isinstance(manifest.access, dict):
            raise ConfigError(f"{path} is malformed: access must be an object")
        for name, entry in manifest.adapters.items():
            AdapterEntry.from_json(name, entry, path)  # validates
        return manifest

    def adapter_entries(self) -> dict[str, "AdapterEntry"]:
        return {name: AdapterEntry.from_json(name, entry, FILENAME) for name, entry in self.adapters.items()}


# What an adapter of a bundle is for: "shared" acts on every request, an "expert" on its language's
# (umbra/engine/routing.py); SecureGate's "secure" adapter serves every request the access gate
# does not route to a "revealing" one, and a revealing adapter is stored only sealed under its
# access keys (umbra/securegate/), so its entry names no plaintext file.
ROLES = ("shared", "expert", "secure", "revealing")
SEALED_ROLES = ("revealing",)


@dataclass(frozen=True)
class AdapterEntry:
    """One adapter of a bundle, as its manifest records it."""

    name: str
    kind: str  # lora | bottleneck | soft_prompt | deep_prompt
    placement: str  # decoder | encoder | client | input
    role: str  # shared | expert | secure | revealing (umbra/engine/routing.py)
    file: str  # bundle-relative, content-addressed: adapters/<name>.<sha256[:12]>.safetensors ("" if sealed)
    sha256: str  # of that file ("" if sealed: the ciphertexts are in the manifest's access section)
    config: dict  # the adapter's typed config (umbra/model/adapters/config.py), as JSON
    parameters: int
    created: str
    language: str | None = None  # an expert's canonical language
    training: dict = field(default_factory=dict)  # how it was trained: method, data, steps, seed, ...
    privacy: dict | None = None  # DP where it applies: {"epsilon", "delta", "accountant", ...}; None = no DP

    def to_json(self) -> dict:
        out = asdict(self)
        del out["name"]
        return out

    @classmethod
    def from_json(cls, name: str, data: object, where) -> "AdapterEntry":
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: adapter {name!r} must be an object")
        try:
            entry = cls(name=name, **data)
        except TypeError as exc:
            raise ConfigError(f"{where}: adapter {name!r} is malformed: {exc}") from exc
        if entry.role not in ROLES:
            raise ConfigError(f"{where}: adapter {name!r} has unknown role {entry.role!r} (known: {', '.join(ROLES)})")
        if entry.sealed:
            if entry.file or entry.sha256:
                raise ConfigError(f"{where}: revealing adapter {name!r} names a plaintext file")
        elif not entry.file.startswith("adapters/") or ".." in entry.file:
            raise ConfigError(f"{where}: adapter {name!r} names a file outside adapters/: {entry.file!r}")
        return entry

    @property
    def sealed(self) -> bool:
        """Stored only encrypted under access keys (no plaintext file)."""
        return self.role in SEALED_ROLES


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
