"""The adapter module: every kind at every client placement; zero output weights leave logits
bit-identical; overlapping adapters sum; a set is an argument, so interleaved requests with
different sets get exactly what they get alone; gradients reach a training set's adapters."""

from __future__ import annotations

import pytest
import torch

from adapter_helpers import perturb
from umbra.errors import ConfigError
from umbra.model.adapters import (AdapterSet, BottleneckConfig, DeepPromptConfig, LoraConfig, Placement,
                                  SoftPromptConfig, build_adapter)
from umbra.model.adapters.config import config_from_dict, config_to_dict
from umbra.model.loader import load_client, load_middle
from umbra.model.parts import SplitPlan
from umbra.model.spec import load_spec

CONFIGS = {
    "lora": lambda p: LoraConfig(rank=4, placement=p, init_seed=1),
    "lora-attn": lambda p: LoraConfig(rank=2, targets=("q_proj", "v_proj"), placement=p, init_seed=2),
    "bottleneck": lambda p: BottleneckConfig(size=8, placement=p, init_seed=3),
    "deep_prompt": lambda p: DeepPromptConfig(length=3, placement=p, init_seed=4),
}
PLACEMENTS = [Placement.DECODER, Placement.ENCODER, Placement.CLIENT]


@pytest.fixture(scope="module")
def parts(tiny_model_dirs):
    d = tiny_model_dirs["qwen2-untied"]
    spec = load_spec(d)
    plan = SplitPlan.default(spec.num_layers)
    enc, dec = load_client(d, plan)
    return spec, plan.shape(spec.num_layers), enc, load_middle(d, plan), dec


def run(parts, ids, adapters=None, embeds=None):
    _, _, enc, mid, dec = parts
    t = ids.shape[1] if embeds is None else embeds.shape[1]
    pos = torch.arange(t)[None]
    with torch.no_grad():
        h = enc(ids, pos, embeds=embeds, adapters=adapters)
        return dec(mid(h, pos), pos, adapters=adapters)


IDS = torch.randint(0, 512, (1, 17), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("placement", PLACEMENTS, ids=lambda p: p.value)
@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_zero_output_weights_leave_logits_bit_identical(parts, kind, placement):
    spec, shape = parts[0], parts[1]
    adapter = build_adapter("a", CONFIGS[kind](placement), spec, shape)
    assert torch.equal(run(parts, IDS, AdapterSet([adapter])), run(parts, IDS))
    perturb(adapter)
    assert not torch.allclose(run(parts, IDS, AdapterSet([adapter])), run(parts, IDS), atol=1e-3)


@pytest.mark.parametrize("placement", PLACEMENTS, ids=lambda p: p.value)
def test_placement_decides_which_side_changes(parts, placement):
    spec, shape, enc, _, _ = parts
    adapter = perturb(build_adapter("a", LoraConfig(rank=4, placement=placement), spec, shape))
    pos = torch.arange(IDS.shape[1])[None]
    with torch.no_grad():
        sent_plain, sent = enc(IDS, pos), enc(IDS, pos, adapters=AdapterSet([adapter]))
    assert torch.equal(sent, sent_plain) == (placement is Placement.DECODER)
    assert set(adapter.blocks) == set(shape.blocks(placement))


def test_overlapping_loras_sum_their_deltas(parts):
    spec, shape, enc, _, _ = parts
    a = perturb(build_adapter("a", LoraConfig(rank=4, placement=Placement.ENCODER), spec, shape), seed=1)
    b = perturb(build_adapter("b", LoraConfig(rank=2, alpha=3.0, targets=("q_proj",),
                                              placement=Placement.ENCODER), spec, shape), seed=2)
    block = enc.stack.layers[0]
    x = torch.randn(1, 5, spec.hidden_size)
    lay = AdapterSet([a, b], merge_bytes=0).layer(0)
    with torch.no_grad():
        base = block.self_attn.q_proj(x)
        want = base + a.scale * (x @ a.layers["0"]["q_proj"].a.t()) @ a.layers["0"]["q_proj"].b.t() \
            + b.scale * (x @ b.layers["0"]["q_proj"].a.t()) @ b.layers["0"]["q_proj"].b.t()
        got = lay.project("q_proj", x, base)
    assert torch.allclose(got, want, atol=1e-6)
    assert {t for _, ranges in lay.lora.values() for t in ranges} == set(a.config.targets)  # b: q_proj only
    with torch.no_grad():  # q, k and v share one low-rank product; each still gets its own delta
        u = lay.low_rank("qkv", x)
        assert u.shape == (5, 4 * 3 + 2)
        assert torch.allclose(lay.add("q_proj", u, base), want, atol=1e-6)


def test_interleaved_requests_never_see_each_others_adapters(parts):
    """Two sets used turn about (as two concurrent requests are) give exactly what each gives alone."""
    spec, shape = parts[0], parts[1]
    python = perturb(build_adapter("python", LoraConfig(rank=4), spec, shape), seed=1)
    go = perturb(build_adapter("go", BottleneckConfig(size=8), spec, shape), seed=2)
    sets = [AdapterSet([python]), AdapterSet([go]), AdapterSet(), AdapterSet([python, go])]
    alone = [run(parts, IDS, s) for s in sets]
    for _ in range(2):
        for s, want in zip(sets, alone):
            assert torch.equal(run(parts, IDS, s), want)
    assert len({tuple(a.flatten()[:8].tolist()) for a in alone}) == 4


def test_soft_prompt_is_prepended_input(parts):
    spec, shape, enc, _, _ = parts
    prompt = perturb(build_adapter("shared", SoftPromptConfig(length=4), spec, shape))
    aset = AdapterSet([prompt])
    assert aset.prompt_length == 4 and torch.equal(aset.soft_prompt, prompt.prompt)
    embeds = torch.cat([aset.soft_prompt[None], enc.embed(IDS)], dim=1)
    with_prompt = run(parts, IDS, aset, embeds=embeds)
    assert with_prompt.shape[1] == 4 + IDS.shape[1]
    assert not torch.allclose(with_prompt[:, 4:], run(parts, IDS), atol=1e-3)
    two = AdapterSet([prompt, perturb(build_adapter("more", SoftPromptConfig(length=2), spec, shape))])
    assert two.prompt_length == 6 and torch.equal(two.soft_prompt[2:], prompt.prompt)  # name order: more, shared


def test_training_set_reaches_the_adapters_frozen_set_does_not(parts):
    spec, shape, enc, mid, dec = parts
    adapter = build_adapter("a", LoraConfig(rank=2), spec, shape).requires_grad_(True)
    pos = torch.arange(IDS.shape[1])[None]
    logits = dec(mid(enc(IDS, pos), pos), pos, adapters=AdapterSet([adapter], frozen=False))
    logits.square().mean().backward()
    grads = [p.grad for n, p in adapter.named_parameters() if n.endswith(".b")]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)
    frozen = AdapterSet([adapter]).layer(next(iter(adapter.blocks)))
    assert not any(a.requires_grad or bt.requires_grad for a, ranges in frozen.lora.values()
                   for _, _, bt in ranges.values())


def test_sets_know_their_keys_and_refuse_the_cloud_blocks(parts):
    spec, shape = parts[0], parts[1]
    dec_only = build_adapter("e", LoraConfig(), spec, shape)
    enc_side = build_adapter("s", BottleneckConfig(placement=Placement.ENCODER), spec, shape)
    aset = AdapterSet([dec_only, enc_side])
    enc_blocks, dec_blocks = shape.blocks(Placement.ENCODER), shape.blocks(Placement.DECODER)
    assert [n for n, _ in aset.key_for(dec_blocks)] == ["e"]
    assert [n for n, _ in aset.key_for(enc_blocks)] == ["s"]
    old = aset.key
    dec_only.touch()
    assert AdapterSet([dec_only, enc_side]).key != old
    with pytest.raises(ConfigError, match="twice"):
        AdapterSet([dec_only, dec_only])
    cloud = build_adapter("c", LoraConfig(placement=Placement.MIDDLE), spec, shape)
    with pytest.raises(ConfigError, match="cloud's blocks"):
        AdapterSet([cloud]).check_client(shape)


def test_configs_round_trip_and_refuse_nonsense():
    for make in CONFIGS.values():
        c = make(Placement.DECODER)
        assert config_from_dict(config_to_dict(c), "x") == c
    assert config_from_dict(config_to_dict(SoftPromptConfig()), "x") == SoftPromptConfig()
    bad = [({"kind": "lora", "rank": 0}, "rank"), ({"kind": "nope"}, "unknown adapter kind"),
           ({"kind": "lora", "targets": ["wq"]}, "target"), ({"kind": "lora", "colour": 1}, "colour"),
           ({"kind": "soft_prompt", "placement": "decoder"}, "may sit at input"),
           ({"kind": "lora", "placement": "input"}, "may sit at")]
    for data, match in bad:
        with pytest.raises(ConfigError, match=match):
            config_from_dict(data, "file.safetensors")


@pytest.mark.parametrize("placement", PLACEMENTS, ids=lambda p: p.value)
def test_merged_and_low_rank_paths_agree(parts, placement):
    """Small frozen sets fold their LoRAs into per-set weight copies; larger ones (or merge_bytes=0)
    add the low-rank products per token. Same logits either way; zero output weights stay exact."""
    spec, shape = parts[0], parts[1]
    loras = [build_adapter(n, LoraConfig(rank=4, placement=placement), spec, shape) for n in ("x", "y")]
    merged, low_rank = AdapterSet(loras), AdapterSet(loras, merge_bytes=0)
    assert merged.merge and not low_rank.merge and not AdapterSet(loras, frozen=False).merge
    assert torch.equal(run(parts, IDS, merged), run(parts, IDS)) and torch.equal(run(parts, IDS, low_rank), run(parts, IDS))
    for i, lora in enumerate(loras):
        perturb(lora, seed=i)
    merged, low_rank = AdapterSet(loras), AdapterSet(loras, merge_bytes=0)
    assert (run(parts, IDS, merged) - run(parts, IDS, low_rank)).abs().max().item() <= 1e-4
