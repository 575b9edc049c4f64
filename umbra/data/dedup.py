"""Exact and near-duplicate removal by content hashing.

Exact duplicates share the sha256 of their bytes. Near duplicates share the sha256 of their text
with every whitespace character removed (re-indented, re-wrapped or CRLF/LF variants).
`DedupIndex` adds MinHash near duplicates (umbra/data/near_dup.py) for the private domains."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from umbra.data.config import MinHashConfig
from umbra.data.near_dup import MinHashIndex

_WHITESPACE = re.compile(r"\s+")


def content_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def normalized_sha256(text: str) -> str:
    """Hash of the text with all whitespace stripped: equal for whitespace-only variants."""
    return hashlib.sha256(_WHITESPACE.sub("", text).encode("utf-8")).hexdigest()


@dataclass
class DedupStats:
    exact: int = 0  # files dropped as byte-identical to an earlier file
    near: int = 0  # files dropped as whitespace-variants of an earlier file


class Deduplicator:
    """Keeps the first occurrence of each exact and each normalized content hash."""

    def __init__(self) -> None:
        self._exact: set[str] = set()
        self._near: set[str] = set()
        self.stats = DedupStats()

    def classify(self, text: str) -> str | None:
        """Register `text`; return "exact" / "near" if it duplicates an earlier one, else None."""
        exact = content_sha256(text)
        if exact in self._exact:
            self.stats.exact += 1
            return "exact"
        near = normalized_sha256(text)
        if near in self._near:
            self.stats.near += 1
            self._exact.add(exact)
            return "near"
        self._exact.add(exact)
        self._near.add(near)
        return None


def dedup(texts: Iterable[str]) -> Iterator[tuple[int, str]]:
    """Yield (index, text) of the first occurrence of each distinct (normalized) text."""
    d = Deduplicator()
    for i, text in enumerate(texts):
        if d.classify(text) is None:
            yield i, text


class DedupIndex:
    """A set of reference files (per language for MinHash) that new files are matched against:
    `match` says whether a text is an exact copy, a whitespace variant or a MinHash near
    duplicate (estimated Jaccard >= threshold) of a file added before."""

    def __init__(self, cfg: MinHashConfig) -> None:
        self.cfg = cfg
        self._exact: set[str] = set()
        self._whitespace: set[str] = set()
        self._minhash: dict[str, MinHashIndex] = {}
        self.files = 0

    def add(self, lang: str, text: str, signature: np.ndarray) -> None:
        self._exact.add(content_sha256(text))
        self._whitespace.add(normalized_sha256(text))
        self._minhash.setdefault(lang, MinHashIndex(self.cfg)).add(signature)
        self.files += 1

    def match(self, lang: str, text: str, signature: np.ndarray) -> str | None:
        """"exact" / "whitespace" / "minhash" when `text` duplicates an added file, else None."""
        if content_sha256(text) in self._exact:
            return "exact"
        if normalized_sha256(text) in self._whitespace:
            return "whitespace"
        index = self._minhash.get(lang)
        if index is not None and index.is_near_duplicate(signature):
            return "minhash"
        return None
