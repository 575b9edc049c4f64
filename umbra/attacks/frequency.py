"""Attack (c): frequency analysis, and the frequency-only baseline.

INDVocab draws the table once per client, so equal tokens always start from equal rows, and at
the split layer the states of one token in different contexts stay close. The cloud clusters
every state it received (spherical k-means, k-means++ seeding) into as many clusters as public
code of the same length has distinct tokens, ranks the clusters by size and the public tokens
by frequency in public code, and labels rank r with token r — a substitution-cipher break that
needs no model at all (it works on states from any encoder, tuned or not).

The frequency-only baseline is the best guess from frequencies alone: the most frequent public
token at every position. An attack is only informative where it beats it. FrequencySampler draws
guesses from the public frequencies (the floor of the bag-of-words text scores). FrequencyCeiling is a
yardstick, not an attack: the same rank matching with perfect clusters (it reads the truth)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from umbra.attacks.transcript import ObservedSequence
from umbra.errors import ConfigError


@dataclass(frozen=True)
class FrequencyConfig:
    iterations: int = 25  # Lloyd iterations of spherical k-means
    clusters: int | None = None  # None: distinct tokens in public code of the received length
    distinct_draws: int = 3  # public samples averaged to estimate that number
    seed: int = 0

    def validate(self) -> None:
        if self.iterations < 1 or self.distinct_draws < 1 or (self.clusters is not None and self.clusters < 1):
            raise ConfigError("frequency analysis needs iterations, distinct_draws (and clusters) >= 1")


def expected_distinct(public_blocks: np.ndarray, n: int, draws: int, rng: np.random.Generator) -> int:
    """Distinct ids in ~n public tokens taken as whole blocks in random order (text-like)."""
    per = public_blocks.shape[1]
    counts = []
    for _ in range(draws):
        order = rng.permutation(public_blocks.shape[0])
        take = public_blocks[order[: max(1, -(-n // per))]].ravel()[:n]
        counts.append(np.unique(take).size)
    return max(1, int(round(float(np.mean(counts)))))


@torch.no_grad()
def spherical_kmeans(x: torch.Tensor, k: int, iterations: int, seed: int) -> torch.Tensor:
    """Unit-norm centroids [k,C] of unit-norm points x [N,C] (k <= N). Seeding is greedy
    k-means++: each step draws 2 + ⌊ln k⌋ candidates ∝ distance and keeps the one that lowers
    the total distance most — plain k-means++ often seeds a huge cluster (a frequent token)
    twice and merges two rare ones, which frequency analysis cannot recover from."""
    g = torch.Generator().manual_seed(seed)
    n = x.shape[0]
    trials = 2 + int(np.log(max(k, 1)))
    first = int(torch.randint(n, (1,), generator=g))
    centroids = [x[first]]
    best = (1 - x @ x[first]).clamp_min(0)  # 1 − cos = ½‖x − c‖² to the nearest chosen centroid
    for _ in range(1, k):
        total = float(best.sum())
        if total <= 0:
            cand = torch.randint(n, (trials,), generator=g)
        else:
            cand = torch.multinomial(best / total, trials, replacement=True, generator=g)
        dist = torch.minimum(best[None], (1 - x[cand] @ x.T).clamp_min(0))  # [trials, N]
        pick = int(dist.sum(-1).argmin())
        centroids.append(x[cand[pick]])
        best = dist[pick]
    c = torch.stack(centroids)
    for _ in range(iterations):
        assign = (x @ c.T).argmax(-1)
        sums = torch.zeros_like(c).index_add_(0, assign, x)
        empty = sums.norm(dim=-1) == 0
        if empty.any():  # re-seed empty clusters at the worst-served points
            worst = (x @ c.T).max(-1).values.argsort()[: int(empty.sum())]
            sums[empty] = x[worst]
        c = torch.nn.functional.normalize(sums, dim=-1)
    return c


class FrequencyAnalysis:
    name = "frequency"

    def __init__(self, public_blocks: np.ndarray, public_counts: np.ndarray, config: FrequencyConfig = FrequencyConfig()):
        config.validate()
        self.config = config
        self.blocks = public_blocks
        self.ranked = np.argsort(-public_counts, kind="stable")  # public ids, most frequent first

    def run(self, sequences: list[ObservedSequence]) -> list[np.ndarray]:
        if not sequences:
            return []
        labels, sizes = cluster_labels(sequences, self.blocks, self.config)
        k = int(sizes.numel())
        rank_of_cluster = torch.empty(k, dtype=torch.long)
        rank_of_cluster[sizes.argsort(descending=True, stable=True)] = torch.arange(k)
        token_of_cluster = self.ranked[rank_of_cluster.numpy()]
        return [token_of_cluster[lab].astype(np.int64) for lab in labels]


def cluster_labels(sequences: list[ObservedSequence], public_blocks: np.ndarray,
                   config: FrequencyConfig) -> tuple[list[np.ndarray], torch.Tensor]:
    """Cluster every received state: (labels [T] per sequence, cluster sizes over scored positions).
    Clusters are fitted on the scored (fresh, real) states, each received state once."""
    fresh = torch.cat([s.hidden[torch.from_numpy(s.scored)] for s in sequences]).float()
    if fresh.shape[0] == 0:
        raise ConfigError("no received positions to cluster")
    x = torch.nn.functional.normalize(fresh, dim=-1)
    rng = np.random.default_rng(config.seed)
    k = config.clusters or expected_distinct(public_blocks, x.shape[0], config.distinct_draws, rng)
    k = min(k, x.shape[0])
    centroids = spherical_kmeans(x, k, config.iterations, config.seed)
    sizes = torch.bincount((x @ centroids.T).argmax(-1), minlength=k)
    labels = [(torch.nn.functional.normalize(s.hidden.float(), dim=-1) @ centroids.T).argmax(-1).numpy()
              for s in sequences]
    return labels, sizes


class FrequencyCeiling:
    """NOT an attack (it reads the truth): frequency-rank matching with perfect clusters, one per
    true token — the most rank-based frequency analysis could recover from this much traffic if
    the cloud told tokens apart exactly (INDVocab gives equal tokens equal rows; its ε does not
    change this number). A yardstick for the frequency attack."""

    name = "frequency_ceiling"

    def __init__(self, public_counts: np.ndarray):
        self.ranked = np.argsort(-public_counts, kind="stable")

    def run(self, sequences: list[ObservedSequence]) -> list[np.ndarray]:
        if not sequences:
            return []
        scored = np.concatenate([s.truth[s.scored] for s in sequences])
        tokens, counts = np.unique(scored, return_counts=True)
        rank = np.empty(tokens.size, dtype=np.int64)
        rank[np.argsort(-counts, kind="stable")] = np.arange(tokens.size)
        guess_of = dict(zip(tokens.tolist(), self.ranked[rank].tolist()))
        return [np.array([guess_of.get(int(t), -1) for t in s.truth], dtype=np.int64) for s in sequences]


class FrequencySampler:
    """Independent guesses drawn from public token frequencies (seeded): it uses nothing the cloud
    received. Its position-wise recovery is tiny, but its ROUGE-1 / BLEU-1 show how much of those
    bag-of-words scores any code-looking output gets for free (common lexemes such as `(`, `)`,
    `.`, `=` match whatever the truth is) — the floor under NOIR's clear-gist rule."""

    name = "sampler"

    def __init__(self, public_counts: np.ndarray, seed: int = 0):
        self.p = public_counts / public_counts.sum()
        self.seed = seed

    def run(self, sequences: list[ObservedSequence]) -> list[np.ndarray]:
        rng = np.random.default_rng(self.seed)
        return [rng.choice(self.p.size, size=s.length, p=self.p).astype(np.int64) for s in sequences]


class FrequencyBaseline:
    """Guess the most frequent public token everywhere."""

    name = "baseline"

    def __init__(self, public_counts: np.ndarray):
        self.top = int(np.argmax(public_counts))

    def run(self, sequences: list[ObservedSequence]) -> list[np.ndarray]:
        return [np.full(s.length, self.top, dtype=np.int64) for s in sequences]
