"""What the attack and utility tables measured, per configuration key (umbra/privacy/mode.py's
`config_key`) and per model: package data, `umbra/privacy/measured.json`.

`experiments/measured_modes.py` writes it from the tables of docs/privacy/attacks.md and
utility.md, the frontier grid's records and the share sweep's (a later grid rewrites it in the
same format):

    {"source": "how the file was made",
     "configurations": {
        KEY: {"label": "NOIR ε=1024 · …",          # the label of the configuration
              "attacks": {NAME: percent, …},        # token recovery of every attack measured on its traffic
              "baseline": percent,                  # the frequency-only baseline of that run
              "holds": bool,                        # every attack <= baseline + 1 point (checked on load)
              "top1": percent | null,               # next-token top-1 of the same configuration; null: not measured
              "client_alone_top1": percent | null,  # the client's blocks alone, middle skipped, tuned the same
              "fclean_top1": percent | null,        # NOIR's fClean: the same tuning without INDVocab / LTokenizer
              "seeds": int,                         # seeds behind the figures
              "adaptive": bool,                     # whether an adaptive attack (decipherment, shadow client) was among them
              "source": "docs/…"}},                 # the doc tables the figures come from
     "model": {"name": …, "weights": {FILE: sha256}},  # the base model those figures are of
     "other_models": [                              # more measured models (experiments/share_sweep.py)
        {"name": …, "weights": {FILE: sha256}, "sizes": {FILE: bytes}, "split": [E, D], "source": "…",
         "configurations": {KEY: {…as above…}}}]}

A mode's figures are those of the model in use: a bundle's base model (its manifest's weights'
sha256) and, for other models, its split too; a plain model's own weight files. A model no table
names has no figures for a bundle ("not measured", so never `defended`); without a bundle the
first table's "none" figures stand (what an undefended cloud reads there is the warning to give).

Torch-free and pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from umbra.errors import ValidationError
from umbra.privacy.manifest import sha256_file

HOLD_MARGIN = 1.0  # points above the frequency-only baseline an attack may reach and the mode still hold
CONTROL_MARGIN = 10.0  # points above the client-blocks-alone control a private mode must complete


@dataclass(frozen=True)
class Measured:
    """What the attack and utility tables measured for one configuration (percentages)."""

    label: str
    attacks: Mapping[str, float]  # attack name -> token recovery rate
    baseline: float  # frequency-only baseline
    top1: float | None = None  # next-token top-1; None: not measured
    client_alone_top1: float | None = None  # the client's blocks alone, tuned the same
    fclean_top1: float | None = None  # fClean
    seeds: int = 1
    adaptive: bool = False  # an adaptive attacker among the attacks
    source: str = ""

    @property
    def holds(self) -> bool:
        """Every attack within HOLD_MARGIN points of the frequency-only baseline."""
        return bool(self.attacks) and all(v <= self.baseline + HOLD_MARGIN for v in self.attacks.values())

    @property
    def strongest(self) -> tuple[str, float]:
        return max(self.attacks.items(), key=lambda kv: kv[1])

    @property
    def below_control(self) -> bool:
        """Completes below the client-blocks-alone control + CONTROL_MARGIN (the cloud does not pay)."""
        return (self.top1 is not None and self.client_alone_top1 is not None
                and self.top1 < self.client_alone_top1 + CONTROL_MARGIN)

    @property
    def beats_control(self) -> bool:
        """Measured against the client-blocks-alone control, and not below it: the cloud pays."""
        return (self.top1 is not None and self.client_alone_top1 is not None
                and self.top1 >= self.client_alone_top1 + CONTROL_MARGIN)

    @classmethod
    def from_json(cls, key: str, d: Mapping) -> Measured:
        try:
            attacks = {str(k): float(v) for k, v in d["attacks"].items()}
            m = cls(label=str(d["label"]), attacks=attacks, baseline=float(d["baseline"]),
                    top1=_opt(d.get("top1")), client_alone_top1=_opt(d.get("client_alone_top1")),
                    fclean_top1=_opt(d.get("fclean_top1")), seeds=int(d["seeds"]), adaptive=bool(d["adaptive"]),
                    source=str(d["source"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValidationError(f"measured.json: configuration {key!r} is malformed ({exc})") from None
        if not attacks or m.seeds < 1:
            raise ValidationError(f"measured.json: configuration {key!r} has no attacks or no seeds")
        if bool(d.get("holds")) != m.holds:
            raise ValidationError(f"measured.json: configuration {key!r} says holds={d.get('holds')} but its "
                                  f"attacks say {m.holds}")
        return m

    def to_json(self) -> dict:
        return {"label": self.label, "attacks": dict(self.attacks), "baseline": self.baseline, "holds": self.holds,
                "top1": self.top1, "client_alone_top1": self.client_alone_top1, "fclean_top1": self.fclean_top1,
                "seeds": self.seeds, "adaptive": self.adaptive, "source": self.source}


def _opt(value: Any) -> float | None:
    return None if value is None else float(value)


@lru_cache(maxsize=1)
def _measured_json() -> Mapping:
    return json.loads(resources.files("umbra.privacy").joinpath("measured.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def measured_table() -> Mapping[str, Measured]:
    """The package's measured configurations, by key (ValidationError if the file is malformed)."""
    return parse_measured(_measured_json())


def measured_model() -> tuple[str, Mapping[str, str]]:
    """The base model of the first table (`configurations`): (name, {weights file: sha256})."""
    model = _measured_json().get("model")
    if not isinstance(model, Mapping) or not isinstance(model.get("weights"), Mapping):
        raise ValidationError("measured.json has no 'model' with its weights' hashes")
    return str(model.get("name", "?")), dict(model["weights"])


@dataclass(frozen=True)
class ModelTable:
    """The measured configurations of one base model (at one split; None: the model's own default)."""

    name: str
    weights: Mapping[str, str]  # weights file -> sha256
    split: tuple[int, int] | None
    table: Mapping[str, Measured]
    sizes: Mapping[str, int] = field(default_factory=dict)  # weights file -> bytes (a cheap test before hashing)

    def fits(self, weights: Mapping[str, str], split: tuple[int, int] | None) -> bool:
        return dict(weights) == dict(self.weights) and (self.split is None or split is None or split == self.split)


@lru_cache(maxsize=1)
def model_tables() -> tuple[ModelTable, ...]:
    """Every measured model's table: the first (`model`, `configurations`), then `other_models`."""
    name, weights = measured_model()
    tables = [ModelTable(name, weights, None, measured_table())]
    for i, entry in enumerate(_measured_json().get("other_models", [])):
        try:
            split = tuple(int(x) for x in entry["split"])
            if len(split) != 2:
                raise ValueError("split is [E, D]")
            tables.append(ModelTable(str(entry["name"]), {str(k): str(v) for k, v in entry["weights"].items()},
                                     split, parse_measured(entry),
                                     {str(k): int(v) for k, v in entry["sizes"].items()}))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValidationError(f"measured.json: other_models[{i}] is malformed ({exc})") from None
    return tuple(tables)


def table_for(weights: Mapping[str, str], split: tuple[int, int] | None = None) -> ModelTable | None:
    """The measured table of the model with these weights (and split), or None."""
    return next((t for t in model_tables() if t.fits(weights, split)), None)


def measured_names() -> str:
    """The measured models' names, for a message ("umbra-code-tiny, umbra-code-deep")."""
    return ", ".join(dict.fromkeys(t.name for t in model_tables()))


def parse_measured(data: Mapping) -> dict[str, Measured]:
    configurations = data.get("configurations") if isinstance(data, Mapping) else None
    if not isinstance(configurations, Mapping):
        raise ValidationError("measured.json has no 'configurations' object")
    return {key: Measured.from_json(key, d) for key, d in configurations.items()}


def plain_table(model_dir: Any) -> ModelTable | None:
    """The measured table whose weight files this directory holds (same names and sizes, then
    the same sha256: a model of another size is never hashed), or None."""
    if model_dir is None:
        return None
    directory = Path(model_dir)
    for t in model_tables()[1:]:
        files = [directory / name for name in t.weights]
        if set(t.sizes) != set(t.weights) or not all(f.is_file() and f.stat().st_size == t.sizes[f.name] for f in files):
            continue
        if all(_digest(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) == t.weights[f.name] for f in files):
            return t
    return None


@lru_cache(maxsize=16)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    """A weights file's sha256, once per version of the file (the set-up, the cloud link and the
    cloud policy each ask for the mode: ~60 ms a hash of the deep default)."""
    return sha256_file(Path(path))
