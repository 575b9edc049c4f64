"""The attack grid of docs/privacy/attacks.md: defence configuration × ε → attack scores.

A cell builds a simulated client with its defences and records, through a recorded Middle, its
evaluation blocks sent as inference prefills and the split fine-tuning loop (umbra.tuning.tune):
rows without STuning send the prompts first (untuned client) and then run `gradient_steps`
steps (the first steps of any tuning run); STuning rows tune for `tune_steps` steps, keep the
last `gradient_steps` for the gradient attack, and then send the prompts from the tuned client.
"+penalty" tunes with the inversion penalty (umbra/tuning/inversion_penalty.py: the client runs
attack (a) on itself, with a codebook from its own blocks through the public encoder), against
STuning pulling states back to the public geometry. Two STuning variants defend against (e):
"+noise" clips and noises the sent gradient (umbra/tuning/gradient_noise.py; σ and C from
GridParams), "-local" tunes through an unrecorded LocalMiddle (the client runs the public middle
itself), so the cloud sees no tuning traffic and (e) has nothing to attack; "-local+penalty"
combines it with the penalty. The suite runs on
what the cloud recorded: attacks (a)–(d) and the baseline on the inference traffic, (e) on the
tuning traffic. Results go to a JSON cache keyed by the model's fingerprint and the
run's parameters, one entry per cell, written after each cell — a rerun skips finished cells."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from umbra.attack_grid.clients import Defence, build_client
from umbra.attack_grid.traffic import inference_traffic, tuning_traffic
from umbra.attacks.public import PublicModel
from umbra.attacks.recorder import RecordingMiddle
from umbra.attacks.suite import NOISE_AWARE, AttackSuite
from umbra.errors import ConfigError
from umbra.middle.local import LocalMiddle
from umbra.privacy.indvocab import guess_bound
from umbra.tuning.gradient_noise import DEFAULT_SIGMA, GradientNoise
from umbra.tuning.inversion_penalty import own_codebook

CONFIGS = {  # name -> (INDVocab?, LTokenizer?, STuning?, the STuning guards: "noise", "local", "penalty")
    "none": (False, False, False, ()),
    "indvocab": (True, False, False, ()),
    "ltokenizer": (False, True, False, ()),
    "both": (True, True, False, ()),
    "both+stuning": (True, True, True, ()),
    "both+stuning+noise": (True, True, True, ("noise",)),
    "both+stuning-local": (True, True, True, ("local",)),
    "both+stuning+penalty": (True, True, True, ("penalty",)),
    "both+stuning-local+penalty": (True, True, True, ("local", "penalty")),
}
TRAINING_ATTACKS = ("gradient",)


@dataclass(frozen=True)
class GridParams:
    eval_blocks: int = 32  # client blocks sent as inference prompts (held-out split)
    gradient_steps: int = 4  # tuning steps whose gradients attack (e) sees
    tune_steps: int = 50  # STuning rows: tuning steps before the attacks
    batch_size: int = 4  # tuning batch (blocks)
    context_length: int = 128  # tuning block length
    tune_lr: float = 5e-4  # tuning peak learning rate
    gradient_noise: float = DEFAULT_SIGMA  # "+noise" rows: σ of the sent gradient's noise (std σ·C); `umbra tune`'s default
    gradient_clip: float = GradientNoise.clip_norm  # "+noise" rows: C, the per-sequence bound
    inversion_penalty: float = 10.0  # "+penalty" rows: λ of the STuning inversion penalty (τ default)
    seed: int = 0  # client draws (table, π), evaluation sample, tuning data order
    protocol: int = 3  # bumped when a cell's procedure changes (invalidates cached cells)

    def key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def cells(configs: list[str], epsilons: list[float]) -> list[tuple[str, float | None]]:
    """(config, ε) pairs; configurations without INDVocab get a single cell with ε = None."""
    out = []
    for name in configs:
        if name not in CONFIGS:
            raise ConfigError(f"unknown configuration {name!r} (known: {', '.join(CONFIGS)})")
        if CONFIGS[name][0]:
            out.extend((name, e) for e in epsilons)
        else:
            out.append((name, None))
    return out


def cell_key(config: str, epsilon: float | None) -> str:
    return f"{config}@{'-' if epsilon is None else ('inf' if math.isinf(epsilon) else f'{epsilon:g}')}"


def parse_cell_key(key: str) -> tuple[str, float | None]:
    config, _, eps = key.rpartition("@")
    if config not in CONFIGS:
        raise ConfigError(f"unknown configuration in cell {key!r}")
    return config, None if eps == "-" else float(eps)


def table_rows(requested: list[tuple[str, float | None]], cached: dict) -> list[tuple[str, float | None]]:
    """The rows of the table: the requested cells plus every cell already in the cache (runs with
    other --configs/--epsilons add rows), in CONFIGS order, then by ε (None first, ∞ last)."""
    rows = set(requested) | {parse_cell_key(k) for k in cached}
    order = list(CONFIGS)
    return sorted(rows, key=lambda r: (order.index(r[0]), -1.0 if r[1] is None else r[1]))


def defence_of(config: str, epsilon: float | None, params: "GridParams | None" = None) -> Defence:
    ind, lt, st, guards = CONFIGS[config]
    params = params or GridParams()
    return Defence(indvocab_epsilon=epsilon if ind else None, ltokenizer=lt, stuning=st,
                   gradient_noise=params.gradient_noise if "noise" in guards else 0.0,
                   tune_locally="local" in guards,
                   inversion_penalty=params.inversion_penalty if "penalty" in guards else 0.0)


class GridCache:
    """{run key: {cell key: result}} in one JSON file, rewritten atomically after every cell."""

    def __init__(self, path: Path, run_key: str):
        self.path, self.run_key = Path(path), run_key
        self.data: dict = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.data.setdefault(run_key, {})

    @property
    def cells(self) -> dict:
        return self.data[self.run_key]

    @property
    def commands(self) -> list[str]:
        """The commands that filled this run's cells, in order (the table lists them)."""
        return self.data.setdefault("commands", {}).setdefault(self.run_key, [])

    def add_command(self, command: str) -> None:
        if command not in self.commands:
            self.commands.append(command)
            self._save()

    def put(self, key: str, value: dict) -> None:
        self.cells[key] = value
        self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True))
        os.replace(tmp, self.path)


def run_key(public: PublicModel, suite_key: str, params: GridParams) -> str:
    return hashlib.sha256(f"{public.fingerprint}|{suite_key}|{params.key()}".encode()).hexdigest()[:16]


def tune_config(params: GridParams, stuning: bool, noise: bool = False, penalty: bool = False):
    from umbra.tuning import TuneConfig
    from umbra.tuning.inversion_penalty import InversionPenalty

    steps = params.tune_steps if stuning else params.gradient_steps
    guard = GradientNoise(params.gradient_noise, params.gradient_clip) if noise else GradientNoise()
    inversion = InversionPenalty(weight=params.inversion_penalty) if penalty else InversionPenalty()
    return TuneConfig(steps=steps, batch_size=params.batch_size, context_length=params.context_length,
                      lr=params.tune_lr, warmup_steps=min(10, steps // 5), seed=params.seed,
                      checkpoint_every=steps, gradient_noise=guard, inversion_penalty=inversion)


def run_cell(public: PublicModel, suite: AttackSuite, config: str, epsilon: float | None,
             eval_blocks: np.ndarray, tune_data, params: GridParams) -> dict:
    """One cell's scores: {"attacks": {name: score json}, "epsilon", "guess_bound", "seconds",
    "tune_losses"}. `tune_data`: umbra.tuning.TuneData of the client's code (public ids)."""
    defence = defence_of(config, epsilon, params)
    t0 = time.perf_counter()
    client = build_client(public.dir, defence, public.plan, seed=params.seed)
    middle = RecordingMiddle(LocalMiddle(public.middle))

    def prompts():
        middle.clear()
        asyncio.run(inference_traffic(client, middle, eval_blocks))
        return middle.sequences()

    inference = None if defence.stuning else prompts()  # the untuned client's prompts
    middle.clear()
    tuning_middle = LocalMiddle(public.middle) if defence.tune_locally else middle  # local: the cloud sees none of it
    config_t = tune_config(params, defence.stuning, noise=defence.gradient_noise > 0,
                           penalty=defence.inversion_penalty > 0)
    # the client's own copy of attack (a)'s codebook: its OWN blocks, not the attacker's sample
    codebook = own_codebook(public, tune_data, config_t.inversion_penalty) if config_t.inversion_penalty.enabled else None
    losses = asyncio.run(tuning_traffic(client, tuning_middle, tune_data, config_t,
                                        record_last=params.gradient_steps, noise_seed=params.seed,
                                        codebook=codebook))
    training = middle.sequences()
    if inference is None:  # STuning: the tuned client's prompts
        inference = prompts()
    names = tuple(suite.attacks)
    scores = suite.run(inference, only=tuple(n for n in names if n not in TRAINING_ATTACKS)).to_json()
    if "probe" in scores:  # the noise-aware probe: the mechanism is public, only the draw is secret
        eps = defence.indvocab_epsilon
        if eps is None or math.isinf(eps):
            scores[NOISE_AWARE] = scores["probe"]  # no noise to simulate: the same probe
        else:
            aware = suite.noise_aware_probe(eps)
            scores.update(suite.run(inference, only=(), extra={NOISE_AWARE: aware}).to_json())
    if training:  # nothing when the client tuned locally: no attack (e) to score
        scores.update(suite.run(training, only=TRAINING_ATTACKS).to_json())
    eps = defence.epsilon
    return dict(config=config, label=defence.label, epsilon=None if epsilon is None else _eps_json(epsilon),
                guess_bound=guess_bound(eps, public.vocab_size), attacks=scores,
                tune_losses=[round(x, 4) for x in (losses[:1] + losses[-1:])],
                seconds=round(time.perf_counter() - t0, 1))


def _eps_json(e: float) -> float | str:
    return "inf" if math.isinf(e) else e
