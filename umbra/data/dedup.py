"""Exact and near-duplicate removal by content hashing.

Exact duplicates share the sha256 of their bytes. Near duplicates share the sha256 of their text
with every whitespace character removed (re-indented, re-wrapped or CRLF/LF variants)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

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
