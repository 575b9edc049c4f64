"""The attack suite: every attack of the simulated cloud over one recorded transcript, scored
against the truth the client kept.

    public = PublicModel(model_dir, plan)
    suite  = AttackSuite.build(public, SuiteConfig(corpus=CorpusSample(corpus_dir)), cache_dir)
    result = suite.run(sequences)            # list[ObservedSequence] with .truth
    result.scores["probe"].recovery, result.reconstructions[i]["probe"] ...

Scored positions are each sequence's fresh, non-padding positions for which the attack made a
guess and the truth is known; text scores compare the public-tokenizer decoding of the guesses
with that of the truth over exactly those positions."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from umbra.attacks.decipher import DecipherConfig, Decipherment
from umbra.attacks.frequency import (
    FrequencyAnalysis, FrequencyBaseline, FrequencyCeiling, FrequencyConfig, FrequencySampler,
)
from umbra.attacks.gradients import GradientConfig, GradientLabelRecovery
from umbra.attacks.metrics import AttackScore, GistThresholds, TextScore, aggregate, text_score, token_recovery
from umbra.attacks.nearest import NearestConfig, NearestNeighbour
from umbra.attacks.oracle import oracle_attacks, train_oracle
from umbra.attacks.probe import InversionProbe, ProbeConfig
from umbra.attacks.public import CorpusSample, PublicModel
from umbra.attacks.reconstruction import CodeReconstruction
from umbra.attacks.transcript import ObservedSequence
from umbra.errors import ConfigError

log = logging.getLogger(__name__)

ATTACKS = ("baseline", "sampler", "nearest", "probe", "frequency", "reconstruction", "gradient")
YARDSTICKS = ("frequency_ceiling",)  # scored like attacks but read the truth (see frequency.py)
# Attack (b) trained for a given ε on the attacker's own INDVocab draw (`AttackSuite.noise_aware_probe`);
# scored where the ε in force is known: per grid cell, per audited bundle.
NOISE_AWARE = "probe_aware"
# The adaptive attacks (issue 17), built with inputs beyond the public model and public code, then
# run as `extra` attacks: "shadow" / "shadow_layers" — the attacker's own shadow client of the same
# defence and tuning (umbra/attack_grid/shadow.py: `shadow_attacks`), probes at the split layer / at
# the layer its own validation picks; "oracle" — probes trained on the REAL client's states of
# held-out files (`AttackSuite.oracle`, a bound, not an attack a cloud can run); "decipher" —
# bigram decipherment of the state clusters (`AttackSuite.decipherment`). Per-layer scores of the
# probes come as "<name>@<layer>" (layer_probes.per_layer).
SHADOW, SHADOW_LAYERS, ORACLE, DECIPHER = "shadow", "shadow_layers", "oracle", "decipher"
ADAPTIVE = (SHADOW, SHADOW_LAYERS, ORACLE, DECIPHER)
BOUNDS = (ORACLE,)  # reported beside the attacks but not attacks a cloud can run ("oracle@<layer>" too):
#                     leave them out of "the strongest attack" of a configuration
REPORTED = (ATTACKS[:ATTACKS.index("probe") + 1] + (NOISE_AWARE,) + ATTACKS[ATTACKS.index("probe") + 1:]
            + ADAPTIVE)


@dataclass(frozen=True)
class SuiteConfig:
    corpus: CorpusSample  # the attacker's public code (probe training, codebook, frequencies)
    attacks: tuple[str, ...] = ATTACKS  # which to run ("baseline" = frequency-only guess; YARDSTICKS too)
    nearest: NearestConfig = NearestConfig()
    probe: ProbeConfig = ProbeConfig()
    frequency: FrequencyConfig = FrequencyConfig()
    gradient: GradientConfig = GradientConfig()
    gist: GistThresholds = GistThresholds()

    def validate(self) -> None:
        unknown = set(self.attacks) - set(ATTACKS) - set(YARDSTICKS)
        if unknown:
            raise ConfigError(f"unknown attacks {sorted(unknown)} (known: {', '.join(ATTACKS + YARDSTICKS)})")


@dataclass
class SuiteResult:
    scores: dict[str, AttackScore]  # attack -> pooled score (only attacks that applied)
    # per sequence: attack -> (reconstructed text, truth text, right, scored) over its scored positions
    reconstructions: list[dict[str, tuple[str, str, int, int]]] = field(default_factory=list)
    # per sequence: attack -> its guesses [T] (public ids, -1 = none), for token-level displays
    guesses: list[dict[str, np.ndarray]] = field(default_factory=list)

    def to_json(self) -> dict:
        return {name: s.to_json() for name, s in self.scores.items()}


def probe_cache_path(cache_dir: Path, public: PublicModel, sample: CorpusSample, config: ProbeConfig) -> Path:
    key = repr((public.fingerprint, asdict(sample) | {"corpus_dir": str(sample.corpus_dir)}, config.key()))
    return Path(cache_dir) / f"probe-{hashlib.sha256(key.encode()).hexdigest()[:16]}.safetensors"


class AttackSuite:
    def __init__(self, public: PublicModel, config: SuiteConfig, attacks: dict[str, object],
                 blocks: np.ndarray | None = None, cache_dir: Path | None = None, progress=None):
        self.public, self.config, self.attacks = public, config, attacks
        self.blocks = blocks  # the attacker's public code sample [N, T] (for probes trained later)
        self.cache_dir, self.progress = cache_dir, progress

    def noise_aware_probe(self, epsilon: float) -> InversionProbe:
        """Attack (b) trained on the cloud's own INDVocab draw at `epsilon` (the mechanism is
        public; only the client's draw is secret) — cached like the plain probe."""
        if self.blocks is None:
            raise ConfigError("this suite was built without its public code sample")
        config = replace(self.config, probe=replace(self.config.probe, simulate_epsilon=float(epsilon)))
        return _probe(self.public, self.blocks, config, self.cache_dir, self.progress)

    def decipherment(self, config: DecipherConfig = DecipherConfig()) -> Decipherment:
        """The decipherment attack with this suite's public code as its bigram model."""
        if self.blocks is None:
            raise ConfigError("this suite was built without its public code sample")
        return Decipherment(self.blocks, config, vocab=self.public.vocab_size)

    def oracle(self, encoder, permutation, held_out: np.ndarray, middle=None, adapters=None, private_path=None,
               attacked: list[ObservedSequence] | None = None, per_layer: bool = True) -> dict[str, object]:
        """The oracle probes (oracle.py) of the REAL client (`encoder`, `permutation`, its private
        path if any) on `held_out` public-id blocks [N,T] from files disjoint from the attacked
        prompts, at the split layer and every layer of `middle` (default: the public middle; the
        LoRA'd one with `adapters`). Never cached: they decode this client's traffic."""
        middle = self.public.middle if middle is None else middle
        probes = train_oracle(encoder, permutation, held_out, middle, _vocab(self.public), self.config.probe,
                              adapters, private_path, attacked=attacked, progress=self.progress)
        return oracle_attacks(probes, middle, adapters, per_layer)

    @classmethod
    def build(cls, public: PublicModel, config: SuiteConfig, cache_dir: Path | None = None,
              probe: InversionProbe | None = None, progress=None) -> "AttackSuite":
        """Prepare the attacks (sample public code, build codebooks, train or load the probe)."""
        config.validate()
        blocks = public.sample_blocks(config.corpus)
        counts = public.frequencies(blocks)
        attacks: dict[str, object] = {}
        for name in config.attacks:
            if name == "baseline":
                attacks[name] = FrequencyBaseline(counts)
            elif name == "sampler":
                attacks[name] = FrequencySampler(counts, config.frequency.seed)
            elif name == "nearest":
                attacks[name] = NearestNeighbour(public, config.nearest, blocks)
            elif name == "probe":
                attacks[name] = probe or _probe(public, blocks, config, cache_dir, progress)
            elif name == "frequency":
                attacks[name] = FrequencyAnalysis(blocks, counts, config.frequency)
            elif name == "frequency_ceiling":
                attacks[name] = FrequencyCeiling(counts)
            elif name == "reconstruction":
                attacks[name] = CodeReconstruction(public)
            elif name == "gradient":
                attacks[name] = GradientLabelRecovery(public, config.gradient)
        return cls(public, config, attacks, blocks, cache_dir, progress)

    def run(self, sequences: list[ObservedSequence], only: tuple[str, ...] | None = None,
            extra: dict[str, object] | None = None) -> SuiteResult:
        """Run every attack (or those in `only`), plus the `extra` attacks by name, and score them."""
        if any(s.truth is None for s in sequences):
            raise ConfigError("every sequence needs its truth to be scored")
        result = SuiteResult(scores={}, reconstructions=[{} for _ in sequences], guesses=[{} for _ in sequences])
        chosen = {n: a for n, a in self.attacks.items() if only is None or n in only} | (extra or {})
        for name, attack in chosen.items():
            guesses = attack.run(sequences)
            counts, texts = [], []
            for i, (seq, guess) in enumerate(zip(sequences, guesses)):
                if guess is None:
                    continue
                keep = seq.scored & (guess >= 0)
                right, scored = token_recovery(guess, seq.truth, keep)
                if scored == 0:
                    continue
                recon, truth = self.public.decode(guess[keep]), self.public.decode(seq.truth[keep])
                counts.append((right, scored))
                texts.append(text_score(recon, truth))
                result.reconstructions[i][name] = (recon, truth, right, scored)
                result.guesses[i][name] = guess
            if counts:
                result.scores[name] = aggregate(name, counts, texts, self.config.gist)
        return result


def _probe(public: PublicModel, blocks: np.ndarray, config: SuiteConfig, cache_dir: Path | None, progress) -> InversionProbe:
    path = probe_cache_path(cache_dir, public, config.corpus, config.probe) if cache_dir is not None else None
    if path is not None and (cached := InversionProbe.load(path, config.probe)) is not None:
        return cached
    probe = InversionProbe.train(public, blocks, config.probe, progress=progress)
    if path is not None:
        probe.save(path)
    return probe


def _vocab(public: PublicModel) -> int:
    return min(public.tokenizer.size, public.vocab_size)


def text_scores(result: SuiteResult, attack: str) -> list[TextScore | None]:
    """Per-sequence text scores of one attack (None where it did not apply)."""
    out = []
    for rec in result.reconstructions:
        if attack in rec:
            out.append(text_score(rec[attack][0], rec[attack][1]))
        else:
            out.append(None)
    return out
