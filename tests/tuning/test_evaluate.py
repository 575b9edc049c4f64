"""Utility in private-id space: at ε = ∞ (π only) every figure equals the public model's, so the
private evaluation scores labels π(t) against private logits correctly; fClean and in-memory
defended clients are what `umbra init` + load_bundle would give."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from umbra.data.corpus import read_documents
from umbra.evaluation.fim_lines import sample_cases
from umbra.model.loader import load_client, load_middle
from umbra.training.packing import eval_blocks, load_raw_tokenizer
from umbra.tuning.client import clean_client, defended_client, fingerprint
from umbra.tuning.evaluate import fim_exact_match, next_token


@pytest.fixture(scope="module")
def eval_set(base_dir, corpus_dir):
    docs = list(read_documents(corpus_dir, "test", "python"))
    return eval_blocks(docs, load_raw_tokenizer(base_dir), 32, 2048), sample_cases(docs, 6, seed=1)


async def test_infinite_epsilon_scores_like_the_public_model(base_dir, eval_set):
    blocks, cases = eval_set
    middle = load_middle(base_dir)
    public, private = clean_client(base_dir), defended_client(base_dir, math.inf)
    assert private.permutation is not None and public.permutation is None
    a, b = next_token(public, middle, blocks), next_token(private, middle, blocks)
    assert a.tokens == b.tokens > 0 and a.top1 == b.top1 and a.loss == pytest.approx(b.loss, abs=1e-5)
    fa = await fim_exact_match(public, base_dir, cases, max_tokens=8, middle=middle)
    fb = await fim_exact_match(private, base_dir, cases, max_tokens=8)
    assert fa.cases == fb.cases == 6 and fa.exact == fb.exact and fa.examples == fb.examples
    assert fingerprint(public) == fingerprint(private)  # same table, seen in public order


def test_defended_client_draws_from_each_column(base_dir):
    enc, _ = load_client(base_dir)
    client = defended_client(base_dir, 8.0, seed=3)
    again = defended_client(base_dir, 8.0, seed=3)
    table = client.encoder.embed_tokens.weight[torch.from_numpy(client.permutation.forward.copy())]  # public order
    original = enc.embed_tokens.weight
    assert not torch.equal(table, original)
    for i in range(0, original.shape[1], 9):
        assert set(table[:, i].tolist()) <= set(original[:, i].tolist())
    assert fingerprint(client) == fingerprint(again)  # the draw is seeded; π is not
    assert not np.array_equal(client.permutation.forward, again.permutation.forward)
