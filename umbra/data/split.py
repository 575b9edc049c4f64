"""Deterministic, by-file assignment of corpus files to splits, caps and reserved slices.

Every decision is a pure function of (seed, path): rebuilding the corpus on any machine yields
the same split, and adding a file never moves another file between splits."""

from __future__ import annotations

import hashlib

SPLITS = ("train", "valid", "test")
RESERVED = "reserved"

# Whole packages / directories kept out of pretraining, validation and test, for later
# per-language private-domain experiments. Python's is the largest; Go's is the scarce domain
# (at least 20x smaller than Python's, checked at build time).
RESERVED_PREFIXES: dict[str, tuple[str, ...]] = {
    "python": ("pypi/networkx-3.3/", "pypi/tornado-6.4.1/"),
    "java": ("jdk-17/java.sql/", "jdk-17/java.net.http/"),
    "go": ("go-1.19/container/", "go-1.19/text/tabwriter/"),
}


def unit_hash(seed: int, key: str) -> float:
    """A uniform number in [0, 1) determined by (seed, key)."""
    digest = hashlib.sha256(f"{seed}\x00{key}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def is_reserved(lang: str, path: str) -> bool:
    return any(path.startswith(p) for p in RESERVED_PREFIXES.get(lang, ()))


def assign_split(seed: int, path: str, valid_fraction: float, test_fraction: float) -> str:
    """train / valid / test for a non-reserved file, by its seeded path hash."""
    u = unit_hash(seed, "split:" + path)
    if u < test_fraction:
        return "test"
    if u < test_fraction + valid_fraction:
        return "valid"
    return "train"


def cap_order(seed: int, paths: list[str]) -> list[str]:
    """Seeded hash order in which files are admitted under a per-language byte budget."""
    return sorted(paths, key=lambda p: (unit_hash(seed, "cap:" + p), p))
