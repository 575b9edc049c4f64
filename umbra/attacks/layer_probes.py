"""Inversion probes at the split layer and at every middle layer's output.

The cloud runs the middle itself, so from every split-layer state it receives it can compute each
middle layer's output for that position (in the session's context, exactly as it serves it) and
read any of them. `LayerProbes` holds one `InversionProbe` (probe.py: the same MLP and training)
per layer, trained on some client's states labelled with public ids — the attacker's own shadow
client (umbra/attack_grid/shadow.py) or, as a bound, the real client's own states on held-out
files (oracle.py) — and applies them to received traffic.

The middle is a parameter: the public middle, or the LoRA'd one the cloud holds for a client
that tuned with the cloud's LoRA (`adapters`: that client's AdapterSet, umbra/middle/lora_store.py). Layers
are named "split" (what the cloud receives) and "layer<i>" (the output of global block i).

Which layer to read is chosen the way an attacker can: by each probe's accuracy on a held-out
part of its own training data (`validation`), never by the truth of the attacked traffic."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from umbra.atomic import write_atomic
from umbra.attacks.probe import InversionProbe, ProbeConfig
from umbra.attacks.transcript import ObservedSequence
from umbra.errors import ConfigError
from umbra.model.parts import MiddleBlocks

SPLIT = "split"
_INDEX = "layers.json"
_PARTIAL = "partial.json"  # layers finished by a run that stopped before the index was written


def layer_names(middle: MiddleBlocks) -> list[str]:
    """["split", "layer<first middle block>", ..., "layer<last middle block>"]."""
    return [SPLIT] + [f"layer{block.layer_idx}" for block in middle.stack.layers]


@torch.no_grad()
def layer_states(hidden: torch.Tensor, middle: MiddleBlocks, adapters=None, positions: torch.Tensor | None = None,
                 key_padding: torch.Tensor | None = None, batch: int = 16) -> dict[str, torch.Tensor]:
    """Split-layer states [N,T,C] -> {layer name: states [N,T,C]}: the input itself and the
    output of every middle block, computed with the middle (and `adapters`) the cloud holds.
    `positions` default to 0..T-1; `key_padding` [N,T] bool (True = real token)."""
    n, t, _ = hidden.shape
    if positions is None:
        positions = torch.arange(t)[None].expand(n, -1)
    blocks = list(middle.stack.layers)
    names = layer_names(middle)
    outs: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    captured: list[torch.Tensor] = []
    hooks = [b.register_forward_hook(lambda _m, _i, out: captured.append(out.detach().float())) for b in blocks]
    dtype = next(middle.parameters()).dtype
    try:
        for i in range(0, n, batch):
            x = hidden[i : i + batch]
            captured.clear()
            pad = None if key_padding is None else key_padding[i : i + batch]
            middle(x.to(dtype), positions[i : i + batch], None, pad, adapters)
            outs[SPLIT].append(x.float())
            for name, out in zip(names[1:], captured):
                outs[name].append(out)
    finally:
        for h in hooks:
            h.remove()
    return {name: torch.cat(parts) for name, parts in outs.items()}


def sequence_layers(seq: ObservedSequence, middle: MiddleBlocks, adapters=None) -> dict[str, torch.Tensor]:
    """Every layer's states [T,C] of one received sequence, in the context the cloud holds."""
    pad = None if seq.real.all() else torch.from_numpy(seq.real)[None]
    states = layer_states(seq.hidden[None].float(), middle, adapters, seq.positions[None].long(), pad)
    return {name: s[0] for name, s in states.items()}


class LayerProbes:
    """One inversion probe per layer, and the layer an attacker would read (best validation)."""

    def __init__(self, probes: dict[str, InversionProbe], validation: dict[str, float]):
        if not probes:
            raise ConfigError("LayerProbes needs at least one probe")
        self.probes, self.validation = probes, validation

    @property
    def layers(self) -> list[str]:
        return list(self.probes)

    @property
    def best(self) -> str:
        """The layer with the best held-out accuracy on the attacker's own data (ties: earliest)."""
        return max(self.layers, key=lambda name: (self.validation.get(name, -1.0), -self.layers.index(name)))

    @classmethod
    def train(cls, states_of: Callable[[np.ndarray], torch.Tensor], blocks: np.ndarray, middle: MiddleBlocks,
              vocab: int, config: ProbeConfig = ProbeConfig(), adapters=None, layers: tuple[str, ...] | None = None,
              validation: float = 0.1, progress=None, checkpoint: Path | None = None) -> "LayerProbes":
        """`states_of(public ids [N,T]) -> split-layer states [N,T,C]` of the client the probes learn;
        `blocks` [N,T] public ids; `layers`: a subset of `layer_names(middle)` (default all);
        `validation`: share of blocks held out to score each probe (the attacker's layer choice).
        `checkpoint`: a directory where each layer's probe is stored as soon as it is trained, so a
        run stopped part-way resumes at the next layer; a stored probe is reused only if it was
        trained on exactly these states, labels and settings (each fit is seeded on its own, so a
        resumed run gives the probes an uninterrupted one would)."""
        names = layer_names(middle)
        chosen = list(layers) if layers is not None else names
        unknown = set(chosen) - set(names)
        if unknown:
            raise ConfigError(f"unknown layers {sorted(unknown)} (this middle has {', '.join(names)})")
        if not 0 <= validation < 1:
            raise ConfigError("validation must lie in [0, 1)")
        blocks = np.asarray(blocks, dtype=np.int64)
        n_val = int(round(validation * blocks.shape[0])) if validation > 0 else 0
        if n_val >= blocks.shape[0]:
            raise ConfigError("too few blocks to hold some out for validation")
        ids = torch.from_numpy(blocks)
        split = states_of(blocks).float()
        states = layer_states(split, middle, adapters) if chosen != [SPLIT] else {SPLIT: split}
        probes, scores = {}, {}
        train_ids, val_ids = ids[n_val:], ids[:n_val]
        done = _Checkpoint(checkpoint, config) if checkpoint is not None else None
        for name in chosen:
            x = states[name]
            key = _fit_key(x, ids, n_val, vocab, config) if done is not None else ""
            stored = done.get(name, key) if done is not None else None
            if stored is not None:
                probes[name], score = stored
            else:
                probe = InversionProbe.fit(x[n_val:], train_ids, config, vocab, progress)
                probes[name], score = probe, None
                if n_val:
                    guesses = np.stack([probe.guess_states(s) for s in x[:n_val]])
                    score = float((guesses == val_ids.numpy()).mean())
                if done is not None:
                    done.put(name, key, probe, score)
            if score is not None:
                scores[name] = score
        return cls(probes, scores)

    def guesses(self, sequences: list[ObservedSequence], middle: MiddleBlocks, adapters=None,
                layers: tuple[str, ...] | None = None) -> dict[str, list[np.ndarray]]:
        """{layer: per-sequence guesses [T]} for the received `sequences`."""
        chosen = list(layers) if layers is not None else self.layers
        out: dict[str, list[np.ndarray]] = {name: [] for name in chosen}
        for seq in sequences:
            if chosen == [SPLIT]:
                states = {SPLIT: seq.hidden.float()}
            else:
                states = sequence_layers(seq, middle, adapters)
            for name in chosen:
                out[name].append(self.probes[name].guess_states(states[name]))
        return out

    # -- cache ------------------------------------------------------------------------------------
    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for name, probe in self.probes.items():
            probe.save(directory / f"{name}.safetensors")
        write_atomic(directory / _INDEX, json.dumps({"layers": self.layers, "validation": self.validation}).encode(), 0o644)

    @classmethod
    def load(cls, directory: Path, config: ProbeConfig) -> "LayerProbes | None":
        """The probes cached in `directory` if all were trained with `config`, else None."""
        index = Path(directory) / _INDEX
        if not index.is_file():
            return None
        meta = json.loads(index.read_text())
        probes = {}
        for name in meta["layers"]:
            probe = InversionProbe.load(Path(directory) / f"{name}.safetensors", config)
            if probe is None:
                return None
            probes[name] = probe
        return cls(probes, {k: float(v) for k, v in meta["validation"].items()})


def _fit_key(states: torch.Tensor, ids: torch.Tensor, n_val: int, vocab: int, config: ProbeConfig) -> str:
    """What one layer's probe is a function of: its states, labels, split and settings."""
    h = hashlib.sha256()
    for part in (states.detach().float().cpu().contiguous(), ids.cpu().contiguous()):
        h.update(str(tuple(part.shape)).encode())
        h.update(part.numpy().tobytes())
    h.update(json.dumps([n_val, vocab, config.key()]).encode())
    return h.hexdigest()


class _Checkpoint:
    """Per-layer probes of one `LayerProbes.train` run, stored as each is trained."""

    def __init__(self, directory: Path, config: ProbeConfig):
        self.directory, self.config = Path(directory), config
        index = self.directory / _PARTIAL
        self.meta: dict = json.loads(index.read_text()) if index.is_file() else {}

    def get(self, name: str, key: str) -> tuple[InversionProbe, float | None] | None:
        entry = self.meta.get(name)
        if entry is None or entry["key"] != key:
            return None
        probe = InversionProbe.load(self.directory / f"{name}.safetensors", self.config)
        return None if probe is None else (probe, entry["validation"])

    def put(self, name: str, key: str, probe: InversionProbe, validation: float | None) -> None:
        probe.save(self.directory / f"{name}.safetensors")
        self.meta[name] = {"key": key, "validation": validation}
        write_atomic(self.directory / _PARTIAL, json.dumps(self.meta).encode(), 0o644)


class LayerAttack:
    """One layer of a LayerProbes as a named attack of the suite (`run(sequences)`); `layer=None`
    reads the layer the probes' own validation picked (`LayerProbes.best`)."""

    def __init__(self, name: str, probes: LayerProbes, middle: MiddleBlocks, adapters=None, layer: str | None = None):
        self.name, self.probes, self.middle, self.adapters = name, probes, middle, adapters
        self.layer = layer or probes.best
        if self.layer not in probes.probes:
            raise ConfigError(f"no probe at layer {self.layer!r}")

    def run(self, sequences: list[ObservedSequence]) -> list[np.ndarray]:
        return self.probes.guesses(sequences, self.middle, self.adapters, (self.layer,))[self.layer]


class _Shared:
    """Every layer's guesses for one list of sequences, computed once for all per-layer attacks."""

    def __init__(self, probes: LayerProbes, middle: MiddleBlocks, adapters):
        self.probes, self.middle, self.adapters = probes, middle, adapters
        self._seen: list | None = None
        self._out: dict[str, list[np.ndarray]] = {}

    def get(self, sequences: list[ObservedSequence], layer: str) -> list[np.ndarray]:
        if self._seen is not sequences:
            self._out = self.probes.guesses(sequences, self.middle, self.adapters)
            self._seen = sequences
        return self._out[layer]


class _SharedLayer:
    def __init__(self, name: str, shared: _Shared, layer: str):
        self.name, self.shared, self.layer = name, shared, layer

    def run(self, sequences: list[ObservedSequence]) -> list[np.ndarray]:
        return self.shared.get(sequences, self.layer)


def layer_attacks(prefix: str, probes: LayerProbes, middle: MiddleBlocks, adapters=None) -> dict[str, object]:
    """{"<prefix>@<layer>": attack} for every layer the probes cover (per-layer scores); the
    middle runs once per sequence for all of them."""
    shared = _Shared(probes, middle, adapters)
    return {f"{prefix}@{name}": _SharedLayer(f"{prefix}@{name}", shared, name) for name in probes.layers}


def per_layer(scores: dict, prefix: str) -> dict[str, float]:
    """{layer: recovery} from a suite result's scores (AttackScore or its JSON) of `layer_attacks`."""
    out = {}
    for name, score in scores.items():
        if name.startswith(prefix + "@"):
            out[name[len(prefix) + 1:]] = score["recovery"] if isinstance(score, dict) else score.recovery
    return out
