"""The privacy-utility frontier's cells (docs/privacy/frontier.md, experiments/private_mode.py).

A cell is (variant, ε, seed): one client, tuned once, on which utility and every attack are then
measured — so the two always describe the same tuned client. Hygiene (issue 17): the client tunes
on the corpus TRAIN split; its prompts (what the attacks read) and its utility come from the TEST
split; the attacker's public code is the train split. The seed draws the client's secrets
(INDVocab table, π), the tuning data order and the sent-gradient noise.

Variants (VARIANTS, umbra/attack_grid/variants.py, re-exported here) name what the client is and
how it tunes, the three controls among them (base, fClean, the client's blocks alone).

Tuning a cell writes `tuned/<cell>.pt` (client weights in the cell's own id order — a benchmark
artefact, never a bundle — the recorded traffic of the last `gradient_steps` tuning steps for
attack (e), and the losses), so measurements added later never retune."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import io
import math
import shutil
import time
from dataclasses import asdict, astuple, dataclass, field
from pathlib import Path

import torch

from umbra.atomic import write_atomic
from umbra.attack_grid.clients import Defence, SimulatedClient, build_client
from umbra.attack_grid.traffic import tuning_traffic
from umbra.attack_grid.variants import VARIANTS, Variant, control_for  # noqa: F401 - control_for re-exported
from umbra.attacks.public import PublicModel
from umbra.attacks.recorder import RecordingMiddle
from umbra.errors import ConfigError
from umbra.middle.local import LocalMiddle
from umbra.middle.lora_local import LoraLocalMiddle
from umbra.middle.lora_store import LoraConfig
from umbra.middle.skip import SkipMiddle
from umbra.model.device import placed
from umbra.tuning.gradient_noise import GradientNoise
from umbra.tuning.inversion_penalty import InversionPenalty, own_codebook


@dataclass(frozen=True)
class FrontierParams:
    """Everything a cell's result depends on besides (variant, ε, seed); hashed into the run key."""

    tune_steps: int = 300  # STuning steps (the utility page's budget)
    batch_size: int = 4  # blocks per step
    context_length: int = 256  # tokens per tuning block
    tune_lr: float = 3e-4  # peak learning rate
    warmup_steps: int = 20
    gradient_steps: int = 4  # last tuning steps whose sent gradients attack (e) reads
    gradient_clip: float = GradientNoise.clip_norm  # C of the sent-gradient noise
    prompt_blocks: int = 64  # test-split prompts the client sends (attacked)
    prompt_length: int = 128
    public_blocks: int = 512  # the attacker's public code (train split)
    eval_tokens: int = 8192  # utility: test-split tokens per language
    protocol: int = 1  # bumped when a measurement's procedure changes

    def key(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Cell:
    variant: Variant
    epsilon: float | None  # INDVocab ε; None for the public table
    seed: int

    @property
    def key(self) -> str:
        eps = "-" if self.epsilon is None else ("inf" if math.isinf(self.epsilon) else f"{self.epsilon:g}")
        return f"{self.variant.name}@{eps}#s{self.seed}"

    def defence(self) -> Defence:
        v = self.variant
        return Defence(indvocab_epsilon=self.epsilon if v.noir else None, ltokenizer=v.noir, stuning=v.stuning,
                       gradient_noise=v.gradient_noise, inversion_penalty=v.inversion_penalty)


def cells(variants: list[str], epsilons: list[float], seeds: list[int]) -> list[Cell]:
    out = []
    for name in variants:
        if name not in VARIANTS:
            raise ConfigError(f"unknown variant {name!r} (known: {', '.join(VARIANTS)})")
        v = VARIANTS[name]
        for seed in seeds:
            out.extend(Cell(v, e, seed) for e in (epsilons if v.needs_epsilon else [None]))
    return out


# steps between a tuning cell's checkpoints under WORK/tuning/ (a runtime setting: no result depends
# on it), so a 3,000-step cell stopped with a session resumes instead of starting over
CHECKPOINT_EVERY = 250


def tune_config(cell: Cell, params: FrontierParams):
    from umbra.tuning import TuneConfig

    v = cell.variant
    steps = v.steps or params.tune_steps
    return TuneConfig(steps=steps, batch_size=params.batch_size, context_length=params.context_length,
                      lr=params.tune_lr, warmup_steps=min(params.warmup_steps, steps // 5), seed=cell.seed,
                      checkpoint_every=min(steps, CHECKPOINT_EVERY), gradient_noise=GradientNoise(v.gradient_noise, params.gradient_clip),
                      inversion_penalty=InversionPenalty(weight=v.inversion_penalty),
                      private_path=v.private_path, adversary=v.adversary, gate_lr=v.gate_lr,
                      cloud_backward=v.cloud_backward)


def cell_secret(cell: Cell) -> bytes:
    """The private path's secret of a benchmark client: reproducible from the seed (a product
    bundle derives it from its own keyed secrets; umbra/privacy/bundle_private_path.py)."""
    return hashlib.sha256(f"umbra-frontier-path-{cell.seed}".encode()).digest()


@dataclass
class TunedCell:
    """A cell's client after tuning, with what the cloud recorded of the tuning."""

    cell: Cell
    client: SimulatedClient
    training: list = field(default_factory=list)  # ObservedSequences of the last gradient_steps steps
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    # what the cloud recorded of the tuned client's prompts, kept for the next measurement of the
    # same prompts (measures.sent_prompts): (the prompts array, its sequences)
    sent: tuple | None = field(default=None, repr=False)
    cloud: object | None = None  # the cloud's LoraLocalMiddle for this client (cloud-LoRA variants), frozen
    tuned_on: str = "cpu"  # the device type the tuning ran on (the client lives on the CPU afterwards)
    data_seed: int | None = None  # the seed of the data order it tuned on (None: untuned, or stored before it was kept)

    def middle_blocks(self, public: PublicModel):
        """The middle as the cloud runs it for this client: the public blocks, through its LoRA if
        the cloud tuned one (a callable (x, positions) -> y, like MiddleBlocks)."""
        if self.cloud is None:
            return public.middle
        return functools.partial(public.middle, adapters=self.cloud.frozen())

    @property
    def cloud_adapters(self):
        """The cloud's AdapterSet for this client's calls, or None."""
        return None if self.cloud is None else self.cloud.frozen()


def _store(path: Path, tuned: TunedCell) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    private, buf = tuned.client.private_path, io.BytesIO()
    torch.save({"encoder": tuned.client.encoder.state_dict(), "decoder": tuned.client.decoder.state_dict(),
                "private_path": None if private is None else private.state_dict(),
                "cloud_lora": None if tuned.cloud is None else tuned.cloud.adapter.state_dict(),
                "training": tuned.training, "losses": tuned.losses, "seconds": tuned.seconds,
                "tuned_on": tuned.tuned_on, "data_seed": tuned.data_seed}, buf)
    write_atomic(path, buf.getvalue(), 0o644)


def _stream_key(config) -> tuple:
    return config.seed, config.context_length, astuple(config.fim)


def _check_stream(data, config) -> None:
    """The seed draws the data order: a cell tunes only on its own seed's stream."""
    spec = data.stream.spec
    if (spec.seed, spec.context_length, astuple(spec.fim)) != _stream_key(config):
        raise ConfigError(f"tuning data packed for seed {spec.seed}, context {spec.context_length}; the cell needs "
                          f"seed {config.seed}, context {config.context_length} (CellData keys them per cell)")


class CellData:
    """The train split's tuning batches of each cell, one TuneData per stream (seed, context, FIM),
    so a run over several seeds never hands one seed's data order to another."""

    def __init__(self, corpus: Path, tokenizer_dir: Path, cache_dir: Path | None = None,
                 vocab_size: int | None = None, langs: tuple[str, ...] | None = None):
        self.corpus, self.tokenizer_dir, self.cache_dir = Path(corpus), Path(tokenizer_dir), cache_dir
        self.vocab_size, self.langs = vocab_size, langs
        self._streams: dict[tuple, object] = {}

    def __call__(self, cell: Cell, params: FrontierParams):
        from umbra.tuning import TuneData

        config = tune_config(cell, params)
        key = _stream_key(config)
        if key not in self._streams:
            extra = {} if self.langs is None else {"langs": self.langs}
            self._streams[key] = TuneData.from_corpus(self.corpus, self.tokenizer_dir, config, split="train",
                                                      cache_dir=self.cache_dir, vocab_size=self.vocab_size, **extra)
        return self._streams[key]


def _cloud_middle(public: PublicModel, cell: Cell):
    """A fresh LoraLocalMiddle with `umbra tune --cloud-lora`'s settings for a cloud-LoRA cell."""
    if not cell.variant.cloud_lora:
        return None
    rank = cell.variant.cloud_lora
    return LoraLocalMiddle(public.middle, LoraConfig(rank=rank, alpha=2.0 * rank, seed=cell.seed))


def tuned_cell(public: PublicModel, cell: Cell, params: FrontierParams, data, work: Path,
               device: torch.device | None = None) -> TunedCell:
    """The cell's tuned client: loaded from `work/tuned/` when present, else tuned now and stored.
    `data`: TuneData of the train split at params.context_length. `device`: where the tuning runs
    (the client and the public middle are moved there for it and back to the CPU after, where
    everything else measures them); a cloud-LoRA cell tunes on the CPU (its cloud adapters keep
    merged weights where they were made)."""
    from umbra.tuning.private_path import attach_private_path

    client = build_client(public.dir, cell.defence(), public.plan, seed=cell.seed)
    if cell.variant.private_path.enabled:
        attach_private_path(client, cell.variant.private_path, cell_secret(cell),
                            public.encoder.embed_tokens.weight)  # the clean table (clean residual only)
    cloud = _cloud_middle(public, cell)
    path = Path(work) / "tuned" / f"{cell.key}.pt"
    checkpoints = Path(work) / "tuning" / cell.key  # while it tunes; superseded by `path` once stored
    if path.is_file():
        saved = torch.load(path, weights_only=False)
        client.encoder.load_state_dict(saved["encoder"])
        client.decoder.load_state_dict(saved["decoder"])
        if saved.get("private_path") is not None:
            client.private_path.load_state_dict(saved["private_path"])
        if cloud is not None:
            cloud.adapter.load_state_dict(saved["cloud_lora"])
            cloud.adapter.touch()
        return TunedCell(cell, client, saved["training"], saved["losses"], saved["seconds"], cloud=cloud,
                         tuned_on=saved.get("tuned_on", "cpu"), data_seed=saved.get("data_seed"))
    tuned = TunedCell(cell, client, cloud=cloud)
    if cell.variant.stuning:
        t0 = time.perf_counter()
        config = tune_config(cell, params)
        _check_stream(data, config)
        codebook = own_codebook(public, data, config.inversion_penalty) if config.inversion_penalty.enabled else None
        if cell.variant.middle == "skip":
            middle = SkipMiddle(public.spec.hidden_size)  # nothing leaves: no traffic to record
        else:
            middle = RecordingMiddle(LocalMiddle(public.middle) if cloud is None else cloud)
        device = None if cloud is not None else device  # the cloud's adapters stay where they were merged
        # resumable unless the cloud's LoRA tunes alongside (its adapters are not in the client's checkpoint)
        progress = None if cloud is not None else checkpoints
        with placed(device, client.encoder, client.decoder, client.private_path, public.middle):
            tuned.losses = asyncio.run(tuning_traffic(client, middle, data, config, record_last=params.gradient_steps,
                                                      noise_seed=cell.seed, codebook=codebook, out_dir=progress))
        tuned.tuned_on = "cpu" if device is None else device.type
        tuned.data_seed = data.stream.spec.seed
        tuned.training = middle.sequences() if isinstance(middle, RecordingMiddle) else []
        tuned.seconds = round(time.perf_counter() - t0, 1)
    if cloud is not None:
        cloud.set_training(False)  # as `umbra tune --cloud-lora` leaves it: served, no longer trained
    _store(path, tuned)
    shutil.rmtree(checkpoints, ignore_errors=True)
    return tuned
