"""experiments/noesis_clip.py: the clip rule, the per-family bound the sweep uses, the cache names it
keeps apart, and the per-document gradient norms measured on a tiny model."""

from __future__ import annotations

import asyncio
import math
import random

import numpy as np
import pytest

from experiments.noesis_cells import Budget, shared_name, stage_one_config
from experiments.noesis_clip import clip_rule, departures, family_norms
from tiny_models import CODE_SNIPPETS
from umbra.data.corpus import LANGS, Document, write_documents
from umbra.tuning.noesis_config import FAMILY_CLIP_NORM


@pytest.mark.parametrize("median, bound", [(1.4e-4, 1e-3), (2.3e-1, 1.0), (4.8, 1.0), (1e-3, 1e-3), (1.5e-3, 1e-2)])
def test_the_rule_is_the_power_of_ten_at_or_above_the_median_at_most_one(median, bound):
    assert math.isclose(clip_rule(median), bound)


@pytest.mark.parametrize("median", [0.0, -1.0, math.nan, math.inf])
def test_the_rule_refuses_a_median_that_is_no_norm(median):
    with pytest.raises(ValueError):
        clip_rule(median)


def test_only_the_deep_prompt_departs_from_the_budgets_bound():
    budget = Budget()
    assert stage_one_config(budget, "deep_prompt", 1.0, 0).dp.clip_norm == FAMILY_CLIP_NORM["deep_prompt"] == 1e-3
    for family in ("soft_prompt", "lora", "bottleneck", "full"):
        assert stage_one_config(budget, family, 1.0, 0).dp.clip_norm == budget.clip_norm


def test_a_departing_bound_gets_its_own_cache_name_and_the_others_keep_theirs():
    budget = Budget()
    deep, soft = (stage_one_config(budget, f, eps, 0) for f, eps in (("deep_prompt", 4.0), ("soft_prompt", 1.0)))
    assert shared_name(deep.shared, 4.0, 0, clip_norm=deep.dp.clip_norm, budget_clip=budget.clip_norm) == "dp32-e4-c0.001-s0"
    assert shared_name(deep.shared, math.inf, 0, clip_norm=deep.dp.clip_norm) == "dp32-inf-s0"  # no clipping there
    assert shared_name(soft.shared, 1.0, 0, clip_norm=soft.dp.clip_norm) == "pt32-dp-s0"  # the adapters already kept


def test_departures_name_the_family_whose_bound_is_not_the_rules():
    budget = Budget()
    assert departures({"lora": np.array([0.2, 0.3]), "deep_prompt": np.array([1e-4, 2e-4])}, budget) == []
    bad = departures({"deep_prompt": np.array([0.5, 0.5])}, budget)
    assert len(bad) == 1 and bad[0].startswith("deep_prompt: the rule gives C = 1")


@pytest.fixture(scope="module")
def public_corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("public-corpus")
    rng = random.Random(1)
    for lang in LANGS:
        docs = [Document(lang, f"{lang}/{i}", "".join(rng.sample(CODE_SNIPPETS, 3))) for i in range(3)]
        write_documents(root, "train", lang, docs)
    return root


@pytest.mark.parametrize("family", ["deep_prompt", "lora"])
def test_norms_are_measured_per_document_and_reproducibly(fim_qwen2_dir, public_corpus, family):
    budget = Budget(block_len=24, physical_batch=4)
    first = asyncio.run(family_norms(fim_qwen2_dir, public_corpus, family, 2, 0, budget))
    again = asyncio.run(family_norms(fim_qwen2_dir, public_corpus, family, 2, 0, budget))
    assert first.shape == (2 * len(LANGS),)  # padding rows of the last chunk are left out
    assert np.all(np.isfinite(first)) and np.all(first > 0)
    np.testing.assert_array_equal(first, again)
