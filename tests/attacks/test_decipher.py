"""Decipherment (umbra/attacks/decipher.py) on a synthetic substitution cipher: each token's
"state" is a fixed random vector plus small noise, the token sequence runs on a known sparse
bigram chain, and the attacker's bigram model is estimated from other text of the same chain.
What must hold: the matrix-form EM step equals the explicit pairwise E/M steps; decipherment
recovers most tokens given enough traffic, far more than frequency analysis, and recovery grows
with volume; an attack fitted on part of the traffic labels every position; it runs as a named attack of
the suite and is scored like the others."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from umbra.attacks.decipher import BigramModel, DecipherConfig, Decipherment, cluster_bigrams, em
from umbra.attacks.frequency import FrequencyAnalysis, FrequencyConfig
from umbra.attacks.transcript import ObservedSequence
from umbra.errors import ConfigError

V, WIDTH = 200, 32


def _chain(rng: np.random.Generator) -> np.ndarray:
    t = np.zeros((V, V))
    for v in range(V):
        t[v, rng.choice(V, 4, replace=False)] = rng.dirichlet(np.full(4, 0.5))
    return t


def _walk(t: np.ndarray, n: int, length: int, rng: np.random.Generator) -> np.ndarray:
    out = np.empty((n, length), dtype=np.int64)
    for i in range(n):
        x = rng.integers(V)
        for j in range(length):
            out[i, j] = x
            x = rng.choice(V, p=t[x])
    return out


@pytest.fixture(scope="module")
def cipher():
    rng = np.random.default_rng(0)
    t = _chain(rng)
    public = _walk(t, 400, 64, rng)  # the attacker's "public code"
    codes = torch.randn(V, WIDTH, generator=torch.Generator().manual_seed(0))
    return t, public, codes


def _traffic(t, codes, n_blocks: int, seed: int) -> tuple[list[ObservedSequence], np.ndarray]:
    rng = np.random.default_rng(seed)
    blocks = _walk(t, n_blocks, 64, rng)
    g = torch.Generator().manual_seed(seed)
    seqs = []
    for row in blocks:
        h = codes[torch.from_numpy(row)] + 0.05 * torch.randn(len(row), WIDTH, generator=g)
        ones = np.ones(len(row), dtype=bool)
        seqs.append(ObservedSequence(h, torch.arange(len(row)), ones, ones, truth=row))
    return seqs, blocks


def _recovery(guesses, blocks) -> float:
    return float(np.mean(np.concatenate(guesses) == blocks.ravel()))


def test_matrix_em_step_equals_the_pairwise_e_and_m_steps():
    rng = np.random.default_rng(3)
    public = rng.integers(0, 5, size=(20, 16))
    lm = BigramModel(public, top_tokens=4, smoothing=0.5)  # 4 tokens + "other"
    k = 3
    counts = rng.integers(0, 6, size=(k, k)).astype(float)
    b0 = rng.random((lm.size, k)) + 0.1
    b0 /= b0.sum(1, keepdims=True)
    got, _ = em(counts, lm, b0, iterations=1, tol=0.0, anneal=1.0)
    j = lm.joint
    expect = np.zeros_like(b0)
    for a in range(k):
        for c in range(k):
            q = j * b0[:, a][:, None] * b0[:, c][None, :]  # q(v,w | a,c) ∝ J[v,w] B[v,a] B[w,c]
            q /= q.sum()
            expect[:, a] += counts[a, c] * q.sum(1)  # v emitted cluster a (first of the pair)
            expect[:, c] += counts[a, c] * q.sum(0)  # w emitted cluster c (second)
    expect /= expect.sum(1, keepdims=True)
    np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-6)


def test_cluster_bigrams_counts_each_adjacent_fresh_pair_once():
    labels = [np.array([0, 1, 1, 2]), np.array([2, 0])]
    real = [np.array([True, True, True, False]), np.ones(2, bool)]
    fresh = [np.array([False, True, True, True]), np.ones(2, bool)]
    n = cluster_bigrams(labels, list(zip(real, fresh)), 3)
    assert n[0, 1] == 1 and n[1, 1] == 1 and n[2, 0] == 1 and n.sum() == 3  # (1,2) ends on padding


def test_decipherment_breaks_the_cipher_and_grows_with_volume(cipher):
    t, public, codes = cipher
    config = DecipherConfig(top_tokens=300)
    scores = {}
    for mult, n in ((1, 4), (10, 40)):
        seqs, blocks = _traffic(t, codes, n, seed=mult)
        attack = Decipherment(public, config, vocab=V)
        scores[mult] = _recovery(attack.run(seqs), blocks)
    freq = FrequencyAnalysis(public, np.bincount(public.ravel(), minlength=V), FrequencyConfig())
    freq_10 = _recovery(freq.run(seqs), blocks)
    assert scores[10] > 0.8, scores  # most tokens of the cipher recovered at 10×
    assert scores[10] > scores[1] + 0.3, scores  # recovery grows with volume
    assert scores[10] > freq_10 + 0.4, (scores, freq_10)  # bigrams beat cluster-size ranks


def test_refinement_and_subsampled_fit_still_label_every_position(cipher):
    t, public, codes = cipher
    seqs, blocks = _traffic(t, codes, 40, seed=10)
    attack = Decipherment(public, DecipherConfig(top_tokens=300, fit_states=1500, refine=False), vocab=V)
    guesses = attack.run(seqs)
    assert [g.shape for g in guesses] == [b.shape for b in blocks]  # every state assigned, not only the fitted ones
    assert attack.last_fit["pairs"] == 40 * 63
    assert _recovery(guesses, blocks) > 0.5


def test_an_attack_fitted_on_part_of_the_traffic_labels_every_position(cipher):
    """Fitted on a part (fit_positions), the attack labels that part exactly as the attack run on
    the part alone does, and labels every other position with what it learned there."""
    t, public, codes = cipher
    seqs, blocks = _traffic(t, codes, 40, seed=10)
    attack = Decipherment(public, DecipherConfig(top_tokens=300, fit_positions=20 * 64 + 5), vocab=V)
    guesses = attack.run(seqs)
    part = attack._part(seqs)
    assert len(part) == 20 and attack._part(seqs) == part  # whole sequences under the cap, drawn from the seed
    assert [g.shape for g in guesses] == [b.shape for b in blocks]
    alone = Decipherment(public, DecipherConfig(top_tokens=300), vocab=V).run([seqs[i] for i in part])
    for j, i in enumerate(part):
        np.testing.assert_array_equal(guesses[i], alone[j])
    rest = [i for i in range(40) if i not in part]
    assert _recovery([guesses[i] for i in rest], blocks[rest]) > 0.5  # the rest is read with the part's fit
    one = Decipherment(public, DecipherConfig(top_tokens=300, fit_positions=1), vocab=V)
    assert len(one._part(seqs)) == 1  # at least one sequence


def test_config_is_validated():
    with pytest.raises(ConfigError):
        DecipherConfig(anneal=0.0).validate()
    with pytest.raises(ConfigError):
        DecipherConfig(fit_positions=0).validate()
    with pytest.raises(ConfigError):
        Decipherment(np.zeros((3, 1), dtype=np.int64))
