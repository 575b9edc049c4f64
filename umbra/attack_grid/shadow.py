"""The shadow client: an adaptive attacker that knows everything but the client's secrets.

The cloud knows the public model, the defence's mechanisms and the client's configuration (ε,
the STuning settings — a bundle's manifest is not secret). So it builds its OWN client of the same
configuration: its own INDVocab draw of the public table and its own π (another seed), the same
`Defence`, the same `TuneConfig` with at least the defender's steps, tuned with the real STuning
loop (`umbra.tuning.tune`) through a LocalMiddle of the public middle on PUBLIC code (the corpus
train split). It then trains inversion probes (umbra/attacks/layer_probes.py: the probe of
attack (b)) on its own client's states → public token ids, at the split layer (what the cloud
receives) and at every middle layer's output (the cloud runs the middle on what it receives), and
applies them to the real client's traffic. If STuning pulls every client toward the geometry the
public middle expects, the shadow's probes transfer, whatever the secret draw.

    shadow = build_shadow(public, defence, tune_config, CorpusSample(corpus_dir), cache_dir=...)
    suite.run(sequences, only=(), extra=shadow_attacks(shadow))   # "shadow", "shadow_layers", "shadow@<layer>"

With the cloud's LoRA (umbra/tuning/cloud_lora.py), the middle the cloud holds is the LoRA'd one:
pass it (`middle`, `adapters`: that client's AdapterSet); the shadow tunes through it (frozen) and
its probes read its layers. Untuned configurations skip the tuning. The tuned shadow client and its
probes are cached under `cache_dir/shadow-<key>/`, the key covering everything that determines
them (public model, defence, tuning trajectory, public code, probe settings, seed, middle).

This lives in umbra/attack_grid, not umbra/attacks, because it runs the tuning loop: the package
DAG (pyproject.toml, import-linter) puts umbra.tuning above umbra.attacks."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from umbra.atomic import write_atomic
from umbra.attack_grid.clients import Defence, SimulatedClient, build_client
from umbra.attacks.client_states import client_states
from umbra.attacks.layer_probes import SPLIT, LayerAttack, LayerProbes, layer_attacks
from umbra.attacks.probe import ProbeConfig, training_device
from umbra.attacks.public import CorpusSample, PublicModel
from umbra.attacks.suite import SHADOW, SHADOW_LAYERS
from umbra.errors import ConfigError
from umbra.middle.local import LocalMiddle
from umbra.model.device import placed
from umbra.model.parts import MiddleBlocks

DEFAULT_SEED = 7_000_001  # the attacker's draws; never a benchmark client's seed


@dataclass(frozen=True)
class ShadowConfig:
    seed: int = DEFAULT_SEED  # the attacker's own table, π, path secret, data order and gradient noise
    steps: int | None = None  # tuning steps; None: the defender's (never fewer: "at least its budget")
    probe: ProbeConfig = ProbeConfig()  # the probes' settings (attack (b)'s)
    layers: bool = True  # probes at every middle layer's output too; False: the split layer only
    validation: float = 0.1  # share of the public blocks held out to pick the layer to read

    def validate(self) -> None:
        self.probe.validate()
        if self.steps is not None and self.steps < 1:
            raise ConfigError("shadow steps must be >= 1")
        if not 0 <= self.validation < 1:
            raise ConfigError("validation must lie in [0, 1)")


@dataclass
class ShadowClient:
    client: SimulatedClient  # the attacker's own client, tuned like the defender's
    probes: LayerProbes  # its probes: "split" and "layer<i>" → public ids
    middle: MiddleBlocks  # the middle its probes read (the one the cloud holds)
    adapters: object | None  # the cloud's AdapterSet for that client (cloud LoRA), if any
    key: str  # cache key
    losses: list[float]  # its tuning losses (empty when untuned or loaded)


class _AdaptedMiddle(LocalMiddle):
    """LocalMiddle through the cloud's (frozen) adapters for a client — its LoRA'd middle."""

    def __init__(self, blocks: MiddleBlocks, adapters):
        super().__init__(blocks)
        self.adapters = adapters

    async def forward(self, hidden, positions, session, key_padding=None) -> torch.Tensor:
        return self.runtime.forward(session, hidden, positions, key_padding, self.adapters)

    async def backward(self, grad_out, session) -> torch.Tensor:
        return self.runtime.backward(session, grad_out, self.adapters)


def shadow_tune_config(defender, config: ShadowConfig):
    """The defender's TuneConfig with the attacker's seed and at least the defender's steps."""
    steps = max(defender.steps, config.steps or 0)
    return replace(defender, steps=steps, seed=config.seed, stop_at_step=None,
                   checkpoint_every=min(steps, defender.checkpoint_every))


def _digest(middle: MiddleBlocks, adapters, public: PublicModel) -> str:
    if middle is public.middle and adapters is None:
        return "public"
    h = hashlib.sha256()
    modules = [middle] + [a for a in getattr(adapters, "adapters", ()) if isinstance(a, torch.nn.Module)]
    for module in modules:
        for name, t in sorted(module.state_dict().items()):
            h.update(name.encode())
            h.update(t.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def shadow_key(public: PublicModel, defence: Defence, tune, corpus: CorpusSample, config: ShadowConfig,
               middle_digest: str, accelerators: tuple[str, ...] = ()) -> str:
    """`accelerators`: the non-CPU device types the shadow's tuning and probes ran on (an
    accelerator's kernels differ from the CPU's in the last bits, so its shadow is another
    shadow); empty on a CPU-only run, which keeps the key of every shadow computed there."""
    tcfg = None if tune is None else shadow_tune_config(tune, config).trajectory()
    parts = [public.fingerprint, asdict(defence), tcfg, asdict(corpus) | {"corpus_dir": str(corpus.corpus_dir)},
             config.probe.key(), config.seed, config.layers, config.validation, middle_digest]
    if accelerators:
        parts.append({"accelerators": sorted(set(accelerators))})
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _accelerators(tune, adapters, device: torch.device | None) -> tuple[str, ...]:
    """The non-CPU device types a shadow is computed on: its tuning's (`_tune`: none with the
    cloud's adapters) and its probes' (`training_device`)."""
    types = [training_device().type]
    if tune is not None and adapters is None and device is not None:
        types.append(torch.device(device).type)
    return tuple(t for t in types if t != "cpu")


def _tune(public: PublicModel, client: SimulatedClient, tcfg, corpus: CorpusSample, middle, adapters,
          seed: int, device: torch.device | None = None, progress: Path | None = None) -> list[float]:
    """The shadow's STuning; on `device` (client and middle moved there and back) unless the
    cloud's adapters are in the middle (they tune on the CPU, where their merged weights are).
    `progress`: a directory for its checkpoints (every `tcfg.checkpoint_every` steps), from which
    a stopped run resumes; not with the cloud's adapters, which the client's checkpoint lacks."""
    from umbra.tuning import TuneData, tune
    from umbra.tuning.checkpoint import CHECKPOINT_NAME
    from umbra.tuning.inversion_penalty import own_codebook

    data = TuneData.from_corpus(corpus.corpus_dir, public.dir, tcfg, split=corpus.split, langs=corpus.langs,
                                vocab_size=public.vocab_size)
    codebook = own_codebook(public, data, tcfg.inversion_penalty) if tcfg.inversion_penalty.enabled else None
    link = LocalMiddle(middle) if adapters is None else _AdaptedMiddle(middle, adapters)
    device = None if adapters is not None else device  # the cloud's adapters stay where they were merged
    with placed(device, client.encoder, client.decoder, client.private_path, middle):
        out_dir = None if progress is None or adapters is not None else progress
        resume = out_dir is not None and (out_dir / CHECKPOINT_NAME).is_file()
        result = asyncio.run(tune(client, link, data, tcfg, noise_seed=seed, codebook=codebook, out_dir=out_dir,
                                  resume=resume))
        return result.loss_history


def build_shadow(public: PublicModel, defence: Defence, tune, corpus: CorpusSample,
                 config: ShadowConfig = ShadowConfig(), *, cache_dir: Path | None = None,
                 middle: MiddleBlocks | None = None, adapters=None, defender_seed: int | None = None,
                 progress=None, device: torch.device | None = None) -> ShadowClient:
    """The attacker's shadow of a client with `defence`, tuned with `tune` (a TuneConfig; None:
    untuned) on `corpus` (public code: the train split), with its probes. `defender_seed`, when
    known (the grid's), must differ from the attacker's. `device`: where its tuning runs (its
    probes train where umbra/attacks/probe.py's `training_device` says)."""
    config.validate()
    if defence.stuning and tune is None:
        raise ConfigError("a STuned defence needs the defender's TuneConfig")
    if not defence.stuning:
        tune = None
    if defender_seed is not None and defender_seed == config.seed:
        raise ConfigError("the shadow client must draw its own secrets: use a seed other than the defender's")
    middle = public.middle if middle is None else middle
    key = shadow_key(public, defence, tune, corpus, config, _digest(middle, adapters, public),
                     _accelerators(tune, adapters, device))
    home = None if cache_dir is None else Path(cache_dir) / f"shadow-{key}"
    client = build_client(public.dir, defence, public.plan, seed=config.seed)
    losses: list[float] = []
    if tune is not None:
        tcfg = shadow_tune_config(tune, config)
        if tcfg.private_path.enabled:
            from umbra.tuning.private_path import attach_private_path

            attach_private_path(client, tcfg.private_path, hashlib.sha256(f"umbra-shadow-{config.seed}".encode()).digest(),
                                public.encoder.embed_tokens.weight)  # the clean table: public to the attacker too
        saved = None if home is None else home / "client.pt"
        if saved is not None and saved.is_file():
            state = torch.load(saved, weights_only=True)
            client.encoder.load_state_dict(state["encoder"])
            client.decoder.load_state_dict(state["decoder"])
            if client.private_path is not None:
                client.private_path.load_state_dict(state["private_path"])
        else:
            losses = _tune(public, client, tcfg, corpus, middle, adapters, config.seed, device,
                           None if home is None else home / "tuning")
            if saved is not None:
                saved.parent.mkdir(parents=True, exist_ok=True)
                path_state = None if client.private_path is None else client.private_path.state_dict()
                buf = io.BytesIO()
                torch.save({"encoder": client.encoder.state_dict(), "decoder": client.decoder.state_dict(),
                            "private_path": path_state}, buf)
                write_atomic(saved, buf.getvalue(), 0o644)  # one shadow per configuration: grids in parallel share it
                shutil.rmtree(home / "tuning", ignore_errors=True)  # client.pt supersedes its checkpoints
    probes = None if home is None else LayerProbes.load(home / "probes", config.probe)
    if probes is None:
        blocks = public.sample_blocks(corpus)
        layers = None if config.layers else (SPLIT,)
        probes = LayerProbes.train(lambda b: client_states(client.encoder, client.permutation, b, client.private_path),
                                   blocks, middle, min(public.tokenizer.size, public.vocab_size), config.probe,
                                   adapters, layers, config.validation, progress,
                                   checkpoint=None if home is None else home / "probes")
        if home is not None:
            probes.save(home / "probes")
    return ShadowClient(client, probes, middle, adapters, key, losses)


def shadow_attacks(shadow: ShadowClient, per_layer: bool = True) -> dict[str, object]:
    """{"shadow": its split-layer probe, "shadow_layers": the layer its own validation picked}
    and, with `per_layer`, {"shadow@<layer>": ...} for every layer it has a probe at."""
    out: dict[str, object] = {SHADOW: LayerAttack(SHADOW, shadow.probes, shadow.middle, shadow.adapters, SPLIT)}
    if len(shadow.probes.layers) > 1:
        out[SHADOW_LAYERS] = LayerAttack(SHADOW_LAYERS, shadow.probes, shadow.middle, shadow.adapters)
        if per_layer:
            out.update(layer_attacks(SHADOW, shadow.probes, shadow.middle, shadow.adapters))
    return out


def from_manifest(epsilon, h: float | None, stuning) -> tuple[Defence, object | None, bool]:
    """(Defence, TuneConfig or None, cloud_lora) of a bundle from what its manifest says: the ε
    in force (None: no bundle; "inf" / math.inf: INDVocab at ε = ∞) and the STuning record
    `manifest.privacy["stuning"]` (`TuneConfig.trajectory()` plus "cloud_lora"; absent: untuned).
    A record that does not parse is a ConfigError, never silently "untuned"."""
    from umbra.tuning import TuneConfig

    if epsilon is None:
        return Defence(), None, False
    eps = float("inf") if epsilon == "inf" else float(epsilon)
    if stuning is None:
        return Defence(indvocab_epsilon=eps, ltokenizer=True, h=h or 0.25), None, False
    if not isinstance(stuning, dict):
        raise ConfigError("the manifest's STuning record is not a mapping")
    record = dict(stuning)
    cloud_lora = bool(record.pop("cloud_lora", False))
    try:
        tcfg = TuneConfig.from_dict(record).validate()
    except (TypeError, ValueError, KeyError) as exc:
        raise ConfigError(f"the manifest's STuning record does not parse: {exc}") from exc
    defence = Defence(indvocab_epsilon=eps, ltokenizer=True, stuning=True, h=h or 0.25,
                      gradient_noise=tcfg.gradient_noise.noise_multiplier, inversion_penalty=tcfg.inversion_penalty.weight)
    return defence, tcfg, cloud_lora
