"""Decipherment: break the received states as a homophonic substitution cipher with a bigram
language model of public code (issue 17; Knight et al. 2006, Ravi & Knight 2011).

INDVocab draws the table once, so equal tokens start from equal rows, and the states of one
token in different contexts stay close at the split layer: clusters of received states act as
cipher symbols, one token possibly spread over several clusters (homophones). Frequency analysis
(frequency.py) matches cluster sizes to token frequencies and fails because sizes are noisy;
decipherment also uses which clusters follow which:

1. cluster the received states (spherical k-means of frequency.py, fitted on a random subsample
   of at most `fit_states` states; every state is then assigned);
2. count cluster bigrams N[a,b] over adjacent received positions;
3. fit B[v,a] = P(cluster a | token v) by EM against a FIXED bigram model J[v,w] of public code
   (the `top_tokens` most frequent public tokens plus one "other" class), treating each adjacent
   pair as drawn from P(a,b) = Σ_vw J[v,w] B[v,a] B[w,b]. In matrix form, with R = N ⊘ BᵀJB,
       counts[v,a] = B[v,a] · ((J B) Rᵀ + (Jᵀ B) R)[v,a],   B ← counts normalized over a,
   O(V·K² + V²·K) per iteration, independent of the traffic volume (no per-position
   forward-backward). Restarts: one from frequency-rank matching, the rest random; the best
   likelihood wins;
4. label each position: the cluster's posterior argmax_v P(v) B[v,a], or (`refine`) with its
   neighbours' clusters, ∝ [Σ_u p(u|c₋) T(v|u)] · B[v,c] · [Σ_x T(x|v) B[x,c₊]].

It needs no model at all (any encoder's states, tuned or not), so INDVocab's ε cannot touch it;
it grows with traffic volume (volume.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from umbra.attacks.frequency import expected_distinct, spherical_kmeans
from umbra.attacks.transcript import ObservedSequence
from umbra.errors import ConfigError

_TINY = 1e-30


@dataclass(frozen=True)
class DecipherConfig:
    top_tokens: int = 1000  # bigram model over the most frequent public tokens (+ one "other" class)
    clusters: int | None = None  # None: cluster_ratio × distinct tokens in public code of the received length
    cluster_ratio: float = 1.0  # clusters per expected distinct token (> 1: room for homophones)
    max_clusters: int = 2048  # cap on K (EM costs O(V·K² + V²·K) per iteration)
    fit_states: int = 32768  # k-means is fitted on at most this many received states; all are assigned
    # the attack (clustering and EM) is fitted on a random part of the sequences holding at most this many
    # received positions, then every position is assigned and labelled with what it learned (None: fitted
    # on all). An attacker with much traffic can do this; on more traffic the fit on all can fail
    # where a part reads the rest (docs/privacy/frontier.md)
    fit_positions: int | None = None
    kmeans_iterations: int = 20
    em_iterations: int = 100
    restarts: int = 1  # EM starts: frequency-rank matching, then random ones; best likelihood wins
    smoothing: float = 0.01  # add-λ on public bigram counts
    tol: float = 1e-6  # stop when the mean log-likelihood per pair improves less than this
    anneal: float = 0.5  # β of the annealed E-step at the start (rises to 1 over half the iterations; 1: off)
    refine: bool = True  # label with the neighbours' clusters, not the cluster alone
    chunk: int = 16384  # positions assigned / labelled at once
    seed: int = 0

    def validate(self) -> None:
        if self.top_tokens < 1 or self.max_clusters < 1 or self.fit_states < 1 or self.restarts < 1:
            raise ConfigError("decipherment needs top_tokens, max_clusters, fit_states and restarts >= 1")
        if self.fit_positions is not None and self.fit_positions < 1:
            raise ConfigError("fit_positions must be >= 1 (None: fit on every position)")
        if self.kmeans_iterations < 1 or self.em_iterations < 1 or self.chunk < 1:
            raise ConfigError("decipherment needs kmeans_iterations, em_iterations and chunk >= 1")
        if self.clusters is not None and self.clusters < 1 or not self.cluster_ratio > 0 or self.smoothing < 0:
            raise ConfigError("clusters must be >= 1, cluster_ratio > 0 and smoothing >= 0")
        if not 0 < self.anneal <= 1:
            raise ConfigError("anneal must lie in (0, 1]")


class BigramModel:
    """The public bigram model: classes = the top-N public ids, then "other" (index N)."""

    def __init__(self, public_blocks: np.ndarray, top_tokens: int, smoothing: float, vocab: int | None = None):
        blocks = np.asarray(public_blocks, dtype=np.int64)
        if blocks.ndim != 2 or blocks.shape[1] < 2 or blocks.size == 0:
            raise ConfigError("the bigram model needs public blocks [N,T] with T >= 2")
        vocab = int(vocab or blocks.max() + 1)
        counts = np.bincount(blocks.ravel(), minlength=vocab)
        ranked = np.argsort(-counts, kind="stable")
        ranked = ranked[counts[ranked] > 0][:top_tokens]
        self.ids = ranked  # class i < N -> public id
        self.other = len(ranked)
        cls = np.full(max(vocab, int(blocks.max()) + 1), self.other, dtype=np.int64)
        cls[ranked] = np.arange(len(ranked))
        self.class_of = cls
        c = cls[blocks]
        v = self.other + 1
        pairs = np.bincount((c[:, :-1] * v + c[:, 1:]).ravel(), minlength=v * v).reshape(v, v).astype(np.float64)
        self.pair_counts, self.smoothing = pairs, float(smoothing)
        self.norm = float(pairs.sum() + smoothing * v * v)
        self.joint = (pairs + smoothing) / self.norm  # J[v,w]
        self.unigram = self.joint.sum(1)  # P(v) as a first token
        self.transition = self.joint / self.joint.sum(1, keepdims=True)  # T(w|v)

    @property
    def size(self) -> int:
        return self.other + 1

    def to_id(self, classes: np.ndarray) -> np.ndarray:
        """Class indices -> public ids, -1 for "other" (no guess)."""
        table = np.append(self.ids, -1)
        return table[classes]


def cluster_bigrams(labels: list[np.ndarray], keep: list[np.ndarray], k: int) -> np.ndarray:
    """N[a,b]: adjacent received positions (t, t+1), both real, t+1 fresh (each pair once)."""
    counts = np.zeros(k * k, dtype=np.float64)
    for lab, (real, fresh) in zip(labels, keep):
        ok = real[:-1] & real[1:] & fresh[1:]
        if ok.any():
            counts += np.bincount(lab[:-1][ok] * k + lab[1:][ok], minlength=k * k)
    return counts.reshape(k, k)


def _sparse(rows, cols, values, shape) -> torch.Tensor:
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), values, shape, check_invariants=False).coalesce()


def _pair_probs(bb: torch.Tensor, jb: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, chunk: int = 8192):
    """P[a,b] = Σ_v bb[v,a] (J bb)[v,b] at the observed pairs only (O(nnz·V), not O(K²·V))."""
    bt, jt = bb.T.contiguous(), jb.T.contiguous()
    return torch.cat([(bt[rows[i : i + chunk]] * jt[cols[i : i + chunk]]).sum(-1)
                      for i in range(0, rows.numel(), chunk)])


def em(counts: np.ndarray, lm: BigramModel, init: np.ndarray, iterations: int, tol: float,
       anneal: float = 0.5) -> tuple[np.ndarray, float]:
    """EM for B[v,a] = P(cluster a | token v) given cluster bigram counts N [K,K] and the fixed
    public bigram joint J [V,V]. Returns (B, mean log-likelihood per pair).

    J = sparse public counts + a constant (add-λ smoothing), so J·B costs O(nnz(J)·K); R = N ⊘ P
    is as sparse as N (only observed cluster pairs), so P and R's products cost O(nnz(N)·V): per
    iteration well under the dense O(V·K² + V²·K). The first half of the iterations anneal: the
    E-step posterior q ∝ J B B is raised to β (rising from `anneal` to 1), which factorizes as
    J^β B^β B^β and keeps the matrix form — it keeps EM out of the poorest local optima."""
    a, b_idx = np.nonzero(counts)
    if a.size == 0:
        raise ConfigError("no adjacent received positions to decipher")
    n = torch.from_numpy(counts[a, b_idx]).float()
    total = float(n.sum())
    k, v = counts.shape[0], lm.size
    rows, cols = torch.from_numpy(a), torch.from_numpy(b_idx)
    ja, jw = np.nonzero(lm.pair_counts)
    j_vals = torch.from_numpy(lm.pair_counts[ja, jw] + lm.smoothing).double() / lm.norm
    j_idx = (torch.from_numpy(ja), torch.from_numpy(jw))
    floor = lm.smoothing / lm.norm  # J's value where public code has no such pair
    b = torch.from_numpy(init).float()
    last, ll = -np.inf, -np.inf
    warm = iterations // 2 if anneal < 1 else 0
    for it in range(iterations):
        beta = 1.0 if it >= warm else anneal + (1 - anneal) * it / max(warm, 1)
        c0 = floor ** beta
        vals = (j_vals.pow(beta) - c0).float()
        bb = b.pow(beta) if beta != 1.0 else b
        col = c0 * bb.sum(0, keepdim=True)  # the constant part of J times bb
        jb = torch.sparse.mm(_sparse(*j_idx, vals, (v, v)), bb) + col  # [V,K] = J^β bb
        jtb = torch.sparse.mm(_sparse(*j_idx[::-1], vals, (v, v)), bb) + col  # [V,K] = (J^β)ᵀ bb
        p = _pair_probs(bb, jb, rows, cols).clamp_min(_TINY)
        w = n / p
        # (J B) Rᵀ and (Jᵀ B) R as sparse R times dense [K,V] (contiguous: 10× faster than a view)
        c = bb * (torch.sparse.mm(_sparse(rows, cols, w, (k, k)), jb.T.contiguous()).T
                  + torch.sparse.mm(_sparse(cols, rows, w, (k, k)), jtb.T.contiguous()).T)
        sums = c.sum(1, keepdim=True)
        b = torch.where(sums > 0, c / sums.clamp_min(_TINY), torch.full_like(c, 1.0 / k))
        if beta == 1.0:
            ll = float((n.double() * p.double().log()).sum()) / total
            if ll - last < tol:
                break
            last = ll
    return b.double().numpy(), ll


def _rank_init(sizes: np.ndarray, unigram: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """B₀ from frequency-rank matching: token of rank r gets most mass on clusters of nearby rank."""
    k, v = sizes.size, unigram.size
    cluster_rank = np.empty(k)
    cluster_rank[np.argsort(-sizes, kind="stable")] = np.arange(k) / max(k - 1, 1)
    token_rank = np.empty(v)
    token_rank[np.argsort(-unigram, kind="stable")] = np.arange(v) / max(v - 1, 1)
    width = 2.0 / max(k, 1)
    b = np.exp(-((token_rank[:, None] - cluster_rank[None]) / width) ** 2) + 1e-3 + 1e-3 * rng.random((v, k))
    return b / b.sum(1, keepdims=True)


class Decipherment:
    name = "decipher"

    def __init__(self, public_blocks: np.ndarray, config: DecipherConfig = DecipherConfig(), vocab: int | None = None):
        config.validate()
        self.config = config
        self.blocks = np.asarray(public_blocks, dtype=np.int64)
        self.lm = BigramModel(self.blocks, config.top_tokens, config.smoothing, vocab)
        self.last_fit: dict = {}  # diagnostics of the last run: clusters, iterations' log-likelihood

    # -- clustering -------------------------------------------------------------------------------
    def _cluster(self, sequences: list[ObservedSequence], part: list[int]) -> tuple[list[np.ndarray], np.ndarray]:
        """Centroids fitted on the sequences `part`; (labels of every sequence, cluster sizes over `part`)."""
        cfg = self.config
        masks = [sequences[i].scored for i in part]
        n = int(sum(m.sum() for m in masks))
        if n == 0:
            raise ConfigError("no received positions to decipher")
        rng = np.random.default_rng(cfg.seed)
        take = np.sort(rng.choice(n, size=min(n, cfg.fit_states), replace=False))
        sample, offset, j = [], 0, 0
        for s, m in zip([sequences[i] for i in part], masks):
            idx = np.flatnonzero(m)
            hi = np.searchsorted(take, offset + idx.size)
            if hi > j:
                sample.append(s.hidden[torch.from_numpy(idx[take[j:hi] - offset])].float())
            j, offset = hi, offset + idx.size
        x = torch.nn.functional.normalize(torch.cat(sample), dim=-1)
        k = cfg.clusters or int(round(cfg.cluster_ratio * expected_distinct(self.blocks, n, 3, rng)))
        k = max(1, min(k, cfg.max_clusters, x.shape[0]))
        centroids = spherical_kmeans(x, k, cfg.kmeans_iterations, cfg.seed)
        labels = [_assign(s.hidden, centroids, cfg.chunk) for s in sequences]
        sizes = np.zeros(k)
        for lab, m in zip([labels[i] for i in part], masks):
            sizes += np.bincount(lab[m], minlength=k)
        return labels, sizes

    # -- the attack -------------------------------------------------------------------------------
    def fit(self, sequences: list[ObservedSequence]) -> tuple[list[np.ndarray], np.ndarray]:
        """(cluster labels per sequence, B [V,K]) for the received sequences."""
        cfg = self.config
        part = self._part(sequences)
        labels, sizes = self._cluster(sequences, part)
        k = sizes.size
        counts = cluster_bigrams([labels[i] for i in part], [(sequences[i].real, sequences[i].fresh) for i in part], k)
        rng = np.random.default_rng(cfg.seed + 1)
        if counts.sum() == 0:  # no adjacent positions: cluster sizes are all there is
            self.last_fit = {"clusters": k, "pairs": 0, "log_likelihood": []}
            return labels, _rank_init(sizes, self.lm.unigram, rng)
        best, best_ll, lls = None, -np.inf, []
        for r in range(cfg.restarts):
            if r == 0:
                init = _rank_init(sizes, self.lm.unigram, rng)
            else:
                init = rng.random((self.lm.size, k)) + 0.1
                init /= init.sum(1, keepdims=True)
            b, ll = em(counts, self.lm, init, cfg.em_iterations, cfg.tol, cfg.anneal)
            lls.append(ll)
            if ll > best_ll:
                best, best_ll = b, ll
        self.last_fit = {"clusters": k, "pairs": int(counts.sum()), "log_likelihood": lls}
        return labels, best

    def _part(self, sequences: list[ObservedSequence]) -> list[int]:
        """Indices of the sequences the attack is fitted on: all, or (fit_positions) a random part,
        in order, holding at most fit_positions received positions (at least one sequence)."""
        cfg = self.config
        if cfg.fit_positions is None:
            return list(range(len(sequences)))
        sizes = [int(s.scored.sum()) for s in sequences]
        order = np.random.default_rng(cfg.seed + 2).permutation(len(sequences))
        kept, total = [], 0
        for i in order:
            if kept and total + sizes[i] > cfg.fit_positions:
                break
            kept.append(int(i))
            total += sizes[i]
        return sorted(kept)

    def run(self, sequences: list[ObservedSequence]) -> list[np.ndarray]:
        if not sequences:
            return []
        labels, b = self.fit(sequences)
        post = self.lm.unigram[:, None] * b  # [V,K] ∝ P(v | cluster)
        post = post / np.maximum(post.sum(0, keepdims=True), _TINY)
        if not self.config.refine:
            per_cluster = self.lm.to_id(post.argmax(0))
            return [per_cluster[lab].astype(np.int64) for lab in labels]
        t = self.lm.transition
        log_left = np.log(np.maximum(post.T @ t, _TINY))  # [K,V]: Σ_u p(u|c₋) T(v|u)
        log_emit = np.log(np.maximum(b.T, _TINY))  # [K,V]
        log_right = np.log(np.maximum((t @ b).T, _TINY))  # [K,V]: Σ_x T(x|v) B[x,c₊]
        log_prior = np.log(np.maximum(self.lm.unigram, _TINY))
        out = []
        for lab in labels:
            guess = np.empty(lab.size, dtype=np.int64)
            for i in range(0, lab.size, self.config.chunk):
                sl = slice(i, min(i + self.config.chunk, lab.size))
                idx = np.arange(sl.start, sl.stop)
                score = log_emit[lab[idx]].copy()
                has_left = idx > 0
                score[has_left] += log_left[lab[idx[has_left] - 1]]
                score[~has_left] += log_prior
                has_right = idx < lab.size - 1
                score[has_right] += log_right[lab[idx[has_right] + 1]]
                guess[sl] = self.lm.to_id(score.argmax(1))
            out.append(guess)
        return out


@torch.no_grad()
def _assign(hidden: torch.Tensor, centroids: torch.Tensor, chunk: int) -> np.ndarray:
    out = []
    for i in range(0, hidden.shape[0], chunk):
        x = torch.nn.functional.normalize(hidden[i : i + chunk].float(), dim=-1)
        out.append((x @ centroids.T).argmax(-1))
    return torch.cat(out).numpy().astype(np.int64) if out else np.zeros(0, dtype=np.int64)
