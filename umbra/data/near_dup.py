"""Near-duplicate detection: MinHash signatures over token shingles, indexed with LSH banding.

A file is tokenized into identifiers/numbers and single symbols (whitespace and layout ignored),
and its set of shingles (`shingle_tokens` consecutive tokens) is summarized by `num_perm` minima
of seeded hash functions; the share of equal minima between two signatures estimates the Jaccard
similarity of the two shingle sets. The index splits each signature into `bands` bands: two files
become candidates when any band is identical, and a candidate whose estimated Jaccard is at least
`threshold` is a near duplicate. Everything is a pure function of the text and the seed (CRC-32
token hashes, a PCG64 stream for the hash functions), so every build drops the same files."""

from __future__ import annotations

import re
import zlib

import numpy as np

from umbra.data.config import MinHashConfig
from umbra.errors import ConfigError

_TOKEN = re.compile(r"\w+|[^\w\s]")
_CHUNK = 4096  # shingles hashed per step (bounds the num_perm x chunk temporary)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)  # splitmix64 finalizer constants
_MIX2 = np.uint64(0x94D049BB133111EB)
_MAX = np.iinfo(np.uint64).max


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: spreads every input bit over the 64-bit output."""
    x = x ^ (x >> np.uint64(30))
    x = x * _MIX1
    x = x ^ (x >> np.uint64(27))
    x = x * _MIX2
    return x ^ (x >> np.uint64(31))


class MinHasher:
    """Signatures of texts under one MinHashConfig."""

    def __init__(self, cfg: MinHashConfig) -> None:
        if cfg.num_perm <= 0 or cfg.bands <= 0 or cfg.num_perm % cfg.bands:
            raise ConfigError(f"num_perm ({cfg.num_perm}) must be a positive multiple of bands ({cfg.bands})")
        if cfg.shingle_tokens <= 0 or not 0.0 < cfg.threshold <= 1.0:
            raise ConfigError(f"bad MinHash settings: shingle {cfg.shingle_tokens}, threshold {cfg.threshold}")
        self.cfg = cfg
        rng = np.random.Generator(np.random.PCG64(cfg.seed))

        def odd(n: int) -> np.ndarray:
            return rng.integers(0, _MAX, n, dtype=np.uint64, endpoint=True) | np.uint64(1)

        self._a = odd(cfg.num_perm)[:, None]  # hash i: (a_i * x + b_i) mod 2^64
        self._b = rng.integers(0, _MAX, cfg.num_perm, dtype=np.uint64, endpoint=True)[:, None]
        self._pos = odd(cfg.shingle_tokens)  # one multiplier per shingle position: order matters

    def shingles(self, text: str) -> np.ndarray:
        """Distinct 64-bit hashes of the text's token shingles (one shingle for a shorter text)."""
        tokens = np.fromiter((zlib.crc32(t.encode("utf-8")) for t in _TOKEN.findall(text)),
                             dtype=np.uint64)
        k = min(self.cfg.shingle_tokens, len(tokens))
        if k == 0:
            return np.zeros(1, dtype=np.uint64)
        n = len(tokens) - k + 1
        acc = np.zeros(n, dtype=np.uint64)
        for j in range(k):
            acc = _mix(acc ^ (tokens[j:j + n] * self._pos[j]))
        return np.unique(acc)

    def signature(self, text: str) -> np.ndarray:
        """The MinHash signature (num_perm uint64 minima) of the text's shingle set."""
        shingles = self.shingles(text)
        sig = np.full(self.cfg.num_perm, _MAX, dtype=np.uint64)
        for start in range(0, len(shingles), _CHUNK):
            block = shingles[start:start + _CHUNK][None, :]
            np.minimum(sig, (self._a * block + self._b).min(axis=1), out=sig)
        return sig


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Share of equal signature entries: an unbiased estimate of the Jaccard similarity."""
    return float(np.mean(a == b))


class MinHashIndex:
    """LSH index of signatures: `best_match` finds the most similar indexed signature among the
    candidates that share a band with the query."""

    def __init__(self, cfg: MinHashConfig) -> None:
        self.cfg = cfg
        self._rows = cfg.num_perm // cfg.bands
        self._buckets: list[dict[bytes, list[int]]] = [{} for _ in range(cfg.bands)]
        self._sigs = np.empty((1024, cfg.num_perm), dtype=np.uint64)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def _keys(self, sig: np.ndarray) -> list[bytes]:
        return [sig[i * self._rows:(i + 1) * self._rows].tobytes() for i in range(self.cfg.bands)]

    def add(self, sig: np.ndarray) -> int:
        if self._n == len(self._sigs):
            self._sigs = np.concatenate([self._sigs, np.empty_like(self._sigs)])
        self._sigs[self._n] = sig
        for bucket, key in zip(self._buckets, self._keys(sig)):
            bucket.setdefault(key, []).append(self._n)
        self._n += 1
        return self._n - 1

    def best_match(self, sig: np.ndarray) -> tuple[int, float] | None:
        """(index, estimated Jaccard) of the most similar candidate, or None without candidates."""
        found: set[int] = set()
        for bucket, key in zip(self._buckets, self._keys(sig)):
            found.update(bucket.get(key, ()))
        if not found:
            return None
        ids = np.fromiter(sorted(found), dtype=np.int64)
        sims = (self._sigs[ids] == sig[None, :]).mean(axis=1)
        best = int(np.argmax(sims))
        return int(ids[best]), float(sims[best])

    def is_near_duplicate(self, sig: np.ndarray) -> bool:
        match = self.best_match(sig)
        return match is not None and match[1] >= self.cfg.threshold
