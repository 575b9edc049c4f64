"""The shadow client (umbra/attack_grid/shadow.py): the attacker's own client of the defender's
configuration — its own INDVocab draw and π, the same STuning — with probes at the split layer
and every middle layer, applied to the real client's traffic. On a tiny model:

* against an undefended client the shadow is the public model: its split probe reads the traffic
  far above the frequency baseline, and there is one score per middle layer;
* against an untuned INDVocab ε = 1 client its split probe stays near chance (its own table is an
  independent draw);
* a STuned configuration is tuned (at least the defender's steps) and cached: the second build
  loads the same client and probes; the attacker must use its own seed;
* a bundle manifest's STuning record gives the shadow's configuration; absent = untuned."""

from __future__ import annotations

import math

import numpy as np
import pytest
from attack_world import PROBE, build_world, prompts_of

from umbra.attack_grid.clients import Defence
from umbra.attack_grid.shadow import ShadowConfig, build_shadow, from_manifest, shadow_attacks, shadow_key, shadow_tune_config
from umbra.attacks.layer_probes import SPLIT, layer_names, per_layer
from umbra.attacks.suite import SHADOW, SHADOW_LAYERS, AttackSuite, SuiteConfig
from umbra.errors import ConfigError
from umbra.privacy.mode import stuning_record
from umbra.tuning import TuneConfig

TUNE = TuneConfig(steps=2, batch_size=4, context_length=32, lr=1e-3, warmup_steps=0, checkpoint_every=2)
CONFIG = ShadowConfig(probe=PROBE)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("shadow")
    public, sample, prompts, _ = build_world(root)
    suite = AttackSuite.build(public, SuiteConfig(corpus=sample, probe=PROBE, attacks=("baseline",)))
    return root, public, sample, suite, prompts


def test_shadow_reads_an_undefended_client_with_one_score_per_layer(world):
    root, public, sample, suite, prompts = world
    _, seqs = prompts_of(public, Defence(), prompts)
    shadow = build_shadow(public, Defence(), None, sample, CONFIG)
    scores = suite.run(seqs, extra=shadow_attacks(shadow)).scores
    base = scores["baseline"].recovery
    assert scores[SHADOW].recovery > base + 0.4, (scores[SHADOW], base)
    assert list(per_layer(scores, SHADOW)) == layer_names(public.middle)  # split + every middle block
    assert scores[SHADOW_LAYERS].recovery == per_layer(scores, SHADOW)[shadow.probes.best]
    assert shadow.probes.best in layer_names(public.middle)


def test_shadow_split_probe_stays_near_chance_on_an_untuned_indvocab_client(world):
    root, public, sample, suite, prompts = world
    defence = Defence(indvocab_epsilon=1.0, ltokenizer=True)
    _, seqs = prompts_of(public, defence, prompts)
    # the split layer's probe only (layers=False): the middle layers' probes, which this test never
    # reads, are test_shadow_reads_an_undefended_client_with_one_score_per_layer's
    shadow = build_shadow(public, defence, None, sample, ShadowConfig(probe=PROBE, layers=False), defender_seed=0)
    assert shadow.probes.layers == [SPLIT]
    scores = suite.run(seqs, extra=shadow_attacks(shadow, per_layer=False)).scores
    assert scores[SHADOW].recovery <= scores["baseline"].recovery + 0.05, scores
    # ... although its probe reads its OWN client well: the defence is the secret draw, not the probe
    assert shadow.probes.validation[SPLIT] > 0.5, shadow.probes.validation


def test_stuned_shadow_is_tuned_with_the_defenders_budget_and_cached(world):
    root, public, sample, suite, prompts = world
    defence = Defence(indvocab_epsilon=1.0, ltokenizer=True, stuning=True)
    config = ShadowConfig(steps=1, probe=PROBE, layers=False)
    assert shadow_tune_config(TUNE, config).steps == TUNE.steps  # never fewer than the defender's
    assert shadow_tune_config(TUNE, ShadowConfig(steps=5)).steps == 5
    assert shadow_tune_config(TUNE, config).seed == config.seed != TUNE.seed
    corpus = sample.__class__(sample.corpus_dir, "train", sample.langs, 32, 40)
    first = build_shadow(public, defence, TUNE, corpus, config, cache_dir=root / "cache")
    assert len(first.losses) == TUNE.steps and first.probes.layers == [SPLIT]
    again = build_shadow(public, defence, TUNE, corpus, config, cache_dir=root / "cache")
    assert again.key == first.key and again.losses == []  # loaded, not retuned
    _, seqs = prompts_of(public, defence, prompts)
    a, b = (shadow_attacks(s)[SHADOW].run(seqs) for s in (first, again))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    other = build_shadow(public, defence, TUNE, corpus, ShadowConfig(seed=5, probe=PROBE, layers=False),
                         cache_dir=root / "cache")
    assert other.key != first.key
    with pytest.raises(ConfigError, match="own secrets"):
        build_shadow(public, defence, TUNE, corpus, ShadowConfig(seed=0), defender_seed=0)
    with pytest.raises(ConfigError, match="TuneConfig"):
        build_shadow(public, defence, None, corpus, config)


def test_a_shadow_computed_on_an_accelerator_is_another_shadow(world):
    _, public, sample, _, _ = world
    defence = Defence(indvocab_epsilon=1.0, ltokenizer=True, stuning=True)
    args = (public, defence, TUNE, sample, ShadowConfig(probe=PROBE), "digest")
    cpu = shadow_key(*args)
    assert shadow_key(*args, ()) == cpu  # a CPU-only run keeps the key it always had
    assert shadow_key(*args, ("cuda",)) != cpu
    assert shadow_key(*args, ("cuda", "cuda")) == shadow_key(*args, ("cuda",))


def test_configuration_from_a_manifest():
    assert from_manifest(None, None, None) == (Defence(), None, False)
    defence, tcfg, lora = from_manifest(13.0, 0.25, None)
    assert defence == Defence(indvocab_epsilon=13.0, ltokenizer=True) and tcfg is None and not lora
    record = stuning_record(TuneConfig(steps=7, context_length=32), cloud_lora=True)
    defence, tcfg, lora = from_manifest("inf", 0.25, record)
    assert math.isinf(defence.indvocab_epsilon) and defence.stuning and lora
    assert tcfg.steps == 7 and tcfg.context_length == 32
    with pytest.raises(ConfigError):
        from_manifest(13.0, 0.25, {"steps": "many", "cloud_lora": False})
    with pytest.raises(ConfigError):
        from_manifest(13.0, 0.25, ["not", "a", "record"])


def test_with_the_clouds_lora_the_shadow_reads_the_loraed_middle(world):
    """The cloud holds the client's LoRA on the middle: the shadow's middle-layer probes (and its
    tuning) go through that middle, and the cache key tells the two apart."""
    import torch

    from umbra.attacks.layer_probes import layer_states
    from umbra.model.adapters import AdapterSet, LoraAdapter, Placement
    from umbra.model.adapters import LoraConfig as AdapterLoraConfig
    from umbra.model.adapters.config import SplitShape

    root, public, sample, suite, prompts = world
    spec, stack = public.middle.spec, public.middle.stack
    shape = SplitShape(spec.num_layers, stack.first, spec.num_layers - stack.last)
    lora = LoraAdapter("cloud-test", AdapterLoraConfig(rank=4, placement=Placement.MIDDLE, init_seed=0), spec,
                       shape.blocks(Placement.MIDDLE), torch.float32)
    with torch.no_grad():
        for p in lora.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    adapters = AdapterSet([lora])
    _, seqs = prompts_of(public, Defence(), prompts)
    hidden = torch.stack([s.hidden for s in seqs[:2]])
    last = layer_names(public.middle)[-1]
    assert not torch.allclose(layer_states(hidden, public.middle, adapters)[last], layer_states(hidden, public.middle)[last])
    config = ShadowConfig(probe=PROBE.__class__(hidden=64, epochs=2))
    plain = build_shadow(public, Defence(), None, sample, config, cache_dir=root / "lora")
    loraed = build_shadow(public, Defence(), None, sample, config, cache_dir=root / "lora", adapters=adapters)
    assert plain.key != loraed.key and loraed.adapters is adapters
    scores = suite.run(seqs, extra=shadow_attacks(loraed)).scores
    assert list(per_layer(scores, SHADOW)) == layer_names(public.middle)
    defence = Defence(indvocab_epsilon=1.0, ltokenizer=True, stuning=True)  # tuned through the LoRA'd middle
    tuned = build_shadow(public, defence, TUNE, sample, ShadowConfig(probe=config.probe, layers=False),
                         adapters=adapters)
    assert len(tuned.losses) == TUNE.steps and all(math.isfinite(x) for x in tuned.losses)
