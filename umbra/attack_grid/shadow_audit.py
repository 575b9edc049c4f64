"""The adaptive attacks of `umbra audit` (docs/privacy/audit.md): the shadow client built from the
configuration the user's traffic was sent with, and — when the user's bundle is at hand — the
oracle probe.

    adaptive = audit_adaptive(AdaptiveAudit(corpus_dir, cache_dir), bundle)   # bundle: loaded or None
    run_audit(store, config, adaptive=adaptive)

The configuration comes from the recording's facts (ε, h and the STuning record the recorder
copied from the manifest; absent: untuned) or, when a bundle is given and its id matches the
recording's, from its manifest. The shadow needs neither π nor the table: a cloud could build it
too. The oracle is trained on the REAL client's states of public files (the corpus, which your
traffic is not) and is never cached (it decodes your traffic). With the cloud's LoRA the middle
layers are read through the public middle: the LoRA is the cloud's and the audit does not have it
(the note in the report says so)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from umbra.attack_grid.shadow import ShadowConfig, build_shadow, from_manifest, shadow_attacks
from umbra.attacks.public import CorpusSample, PublicModel
from umbra.attacks.suite import ORACLE, SHADOW, SHADOW_LAYERS, AttackSuite
from umbra.attacks.transcript import ObservedSequence
from umbra.errors import ConfigError


@dataclass(frozen=True)
class AdaptiveAudit:
    corpus_dir: Path  # public code: the shadow tunes and trains its probes on its train split
    cache_dir: Path | None = None  # tuned shadow clients and their probes
    public_blocks: int = 512  # probe training blocks (the audit's --public-blocks)
    block_length: int = 128
    shadow: ShadowConfig = ShadowConfig()
    oracle_blocks: int = 256  # held-out public blocks the oracle trains on (another draw of the corpus)


def _config_of(facts: dict, bundle) -> tuple[object, float | None, dict | None]:
    if bundle is not None and facts.get("bundle_id") == bundle.manifest.bundle_id:
        m = bundle.manifest
        return m.privacy.get("epsilon"), m.h, m.privacy.get("stuning")
    return facts.get("epsilon"), facts.get("h"), facts.get("stuning")


def audit_adaptive(settings: AdaptiveAudit, bundle=None):
    """The `adaptive` callable of `umbra.audit.analysis.run_audit`."""

    def attacks(public: PublicModel, facts: dict, suite: AttackSuite,
                sequences: list[ObservedSequence]) -> tuple[dict, dict]:
        out: dict[str, object] = {}
        notes: dict[str, str] = {}
        sample = CorpusSample(Path(settings.corpus_dir), "train", block_length=settings.block_length,
                              blocks=settings.public_blocks)
        epsilon, h, stuning = _config_of(facts, bundle)
        try:
            defence, tcfg, cloud_lora = from_manifest(epsilon, h, stuning)
        except ConfigError as exc:
            notes[SHADOW] = notes[SHADOW_LAYERS] = f"not run: {exc}"
            defence = None
        if defence is not None:
            shadow = build_shadow(public, defence, tcfg, sample, settings.shadow, cache_dir=settings.cache_dir,
                                  progress=suite.progress)
            out.update(shadow_attacks(shadow))
            how = (f"tuned like yours ({shadow_steps(tcfg, settings.shadow)} STuning steps, its own table and π)"
                   if tcfg is not None else "untuned, like yours (its own table and π)")
            notes[SHADOW] = notes[SHADOW_LAYERS] = how + (
                "; middle layers read through the public middle (your cloud LoRA is the cloud's, not the audit's)"
                if cloud_lora else "")
        if bundle is None:
            notes[ORACLE] = "needs your bundle (umbra audit --bundle DIR)"
        elif facts.get("bundle_id") != bundle.manifest.bundle_id:
            notes[ORACLE] = "this traffic was not sent with the bundle given"
        else:
            held = public.sample_blocks(CorpusSample(Path(settings.corpus_dir), "train", block_length=settings.block_length,
                                                     blocks=settings.oracle_blocks, seed=1))
            out.update(suite.oracle(bundle.encoder, bundle.permutation, held, private_path=bundle.private_path,
                                    attacked=sequences))
            notes[ORACLE] = "your own client's states of public files: a bound on what any attacker could read"
        return out, notes

    return attacks


def shadow_steps(tcfg, config: ShadowConfig) -> int:
    return max(tcfg.steps, config.steps or 0)
