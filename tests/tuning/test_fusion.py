"""Adapter fusion (seed 003 eqs. 6-8): the fused LoRA's ΔW is exactly w1·ΔW_global + w2·ΔW_local,
so its logits are those of the two adapters with their outputs scaled and summed; the fitted
weights follow eq. 7: a large ψ sets both to exactly 0, and with ψ = 0 on queries drawn from the
local adapter's training data the local adapter weighs more."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch

from adapter_helpers import perturb
from tiny_models import CODE_SNIPPETS
from umbra.errors import ConfigError
from umbra.middle.local import LocalMiddle
from umbra.model.adapters import AdapterSet, LoraConfig, Placement, build_adapter
from umbra.tuning.dual_adapters import AdapterTrainConfig, train_view_adapter
from umbra.tuning.fusion import FusionConfig, fit_fusion_weights, fuse_lora, soft_threshold


def lora(model, name, seed, **kw):
    shape = model.plan.shape(model.spec.num_layers)
    return perturb(build_adapter(name, LoraConfig(init_seed=seed, **kw), model.spec, shape), seed=seed)


def delta(adapter, block: str, target: str) -> torch.Tensor:
    """s·B·A [out, in] of one projection (zero if the adapter leaves it alone)."""
    pair = adapter.layers[block][target] if target in adapter.layers[block] else None
    return torch.zeros(0) if pair is None else adapter.scale * pair.b @ pair.a


def scaled(adapter, w: float, name: str):
    out = copy.deepcopy(adapter)
    out.name = name
    with torch.no_grad():
        for per in out.layers.values():
            for pair in per.values():
                pair.b.mul_(w)
    return out


def test_the_fused_delta_is_the_weighted_sum_of_the_two(model):
    g = lora(model, "global", 1, rank=4, alpha=8.0, targets=("q_proj", "v_proj", "down_proj"))
    loc = lora(model, "local", 2, rank=6, alpha=24.0)  # every target, another rank and scale
    fused = fuse_lora(g, loc, 0.3, -1.7, "fused")
    assert fused.config.rank == 10 and fused.config.scale == 1.0 and fused.blocks == g.blocks
    assert set(fused.config.targets) == set(loc.config.targets)
    for block, per in loc.layers.items():
        for target in per:
            want = -1.7 * delta(loc, block, target)
            if target in g.layers[block]:
                want = want + 0.3 * delta(g, block, target)
            torch.testing.assert_close(delta(fused, block, target), want, rtol=1e-6, atol=1e-7)
    zero = fuse_lora(g, loc, 0.0, 0.0, "zero")
    assert all(delta(zero, b, t).abs().max() == 0 for b, per in zero.layers.items() for t in per)


def test_logits_through_the_model_match_the_two_adapters_with_scaled_outputs(model, middle_blocks):
    g, loc = lora(model, "global", 3, rank=4), lora(model, "local", 4, rank=8, alpha=32.0)
    ids = torch.randint(0, 300, (2, 24), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(24).expand(2, -1)

    def logits(adapters):
        with torch.no_grad():
            return model.decoder(middle_blocks(model.encoder(ids, pos), pos), pos, adapters=adapters)

    fused = logits(AdapterSet([fuse_lora(g, loc, 0.8, 1.3, "fused")]))
    summed = logits(AdapterSet([scaled(g, 0.8, "g"), scaled(loc, 1.3, "l")]))
    torch.testing.assert_close(fused, summed, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(fused, logits(AdapterSet([scaled(g, 1.0, "g"), scaled(loc, 1.0, "l")])), atol=1e-3)


def test_fusion_refuses_adapters_on_different_blocks(model):
    g = lora(model, "g", 1)
    enc = lora(model, "e", 2, placement=Placement.ENCODER)
    with pytest.raises(ConfigError, match="different blocks"):
        fuse_lora(g, enc, 1.0, 1.0, "x")
    with pytest.raises(ConfigError, match="finite"):
        fuse_lora(g, lora(model, "l", 3), float("nan"), 1.0, "x")


def test_soft_threshold_is_the_prox_of_the_l1_norm():
    w = torch.tensor([1.5, -0.2, 0.05, -3.0])
    assert torch.equal(soft_threshold(w, 0.25), torch.tensor([1.25, -0.0, 0.0, -2.75]))


# Two adapters that learned different code: "global" on one half of the snippets, "local" on the other.
TRAIN = AdapterTrainConfig(rank=4, lr=3e-3, epochs=25, block_len=64, batch_size=4, fim_rate=0.0, seed=0)
GLOBAL_TEXTS, LOCAL_TEXTS = CODE_SNIPPETS[:4] * 2, CODE_SNIPPETS[4:] * 2


@pytest.fixture(scope="module")
def trained(model, middle_blocks):
    async def run():
        g, _ = await train_view_adapter(model, LocalMiddle(middle_blocks), GLOBAL_TEXTS, TRAIN, "global")
        loc, _ = await train_view_adapter(model, LocalMiddle(middle_blocks), LOCAL_TEXTS, TRAIN, "local")
        return g, loc

    return asyncio.run(run())


async def test_with_no_penalty_queries_from_the_local_data_prefer_the_local_adapter(model, middle_blocks, trained):
    g, loc = trained
    fit = await fit_fusion_weights(model, LocalMiddle(middle_blocks), LOCAL_TEXTS[:4], g, loc, psi=0.0)
    w1, w2 = fit.weights
    assert w2 > 0.8 and w2 > w1 + 0.5, fit.weights
    start = fit.history[0][2]
    assert fit.objective <= start and fit.history[-1][2] == pytest.approx(fit.objective)
    # The mirror image: queries from the global adapter's data prefer the global one.
    mirror = await fit_fusion_weights(model, LocalMiddle(middle_blocks), GLOBAL_TEXTS[:4], g, loc, psi=0.0)
    assert mirror.weights[0] > mirror.weights[1] + 0.5, mirror.weights


async def test_a_large_penalty_drives_both_weights_to_exactly_zero(model, middle_blocks, trained):
    g, loc = trained
    fit = await fit_fusion_weights(model, LocalMiddle(middle_blocks), LOCAL_TEXTS[:4], g, loc, psi=10.0)
    assert fit.weights == (0.0, 0.0) and fit.converged
    small = await fit_fusion_weights(model, LocalMiddle(middle_blocks), LOCAL_TEXTS[:4], g, loc, psi=1e-3,
                                     config=FusionConfig(max_iters=5))
    assert small.weights != (0.0, 0.0)
    with pytest.raises(ConfigError, match="psi"):
        await fit_fusion_weights(model, LocalMiddle(middle_blocks), LOCAL_TEXTS[:4], g, loc, psi=-1.0)
