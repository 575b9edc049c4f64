"""Typed configuration of the corpus build."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class FilterConfig:
    max_file_bytes: int = 200_000  # larger files are dropped (data tables, bundles)
    min_file_bytes: int = 64  # near-empty files carry no signal
    max_line_chars: int = 1_000  # any longer line marks a minified / generated file
    max_mean_line_chars: float = 120.0  # mean line length above this: minified
    min_whitespace_ratio: float = 0.08  # fewer whitespace chars than this: minified / data blob
    max_non_ascii_ratio: float = 0.3  # mostly non-ASCII: locale data, not code


@dataclass
class MinHashConfig:
    """Near-duplicate detection by MinHash over token shingles (umbra/data/near_dup.py)."""

    shingle_tokens: int = 5  # shingle = this many consecutive tokens (identifiers, numbers, symbols)
    num_perm: int = 128  # hash functions per signature (Jaccard estimate std. error ~0.04 at 0.7)
    bands: int = 32  # LSH bands of num_perm / bands rows: a pair at Jaccard 0.7 collides w.p. > 0.999
    threshold: float = 0.7  # estimated Jaccard at or above this: near duplicate
    seed: int = 1234  # seed of the hash functions (fixed: the same files are dropped on every build)


@dataclass
class PrivateDomainConfig:
    """Per-language private domains (`umbra data private`): code the pretrained model never saw."""

    subdir: str = "private"  # under corpus_dir and manifest_dir
    # Share of files (by seeded path hash) in the test split. Go's is large so that the scarce
    # domain still has >= min_test_docs test documents.
    test_fractions: dict[str, float] = field(
        default_factory=lambda: {"python": 0.05, "java": 0.10, "go": 0.30}
    )
    # Byte budgets per language after filtering and dedup, before splitting (None: no cap);
    # files beyond the budget are dropped in a seeded hash order, as in the pretraining build.
    byte_caps: dict[str, int | None] = field(
        default_factory=lambda: {"python": 76_000_000, "java": 28_000_000, "go": None}
    )
    min_test_docs: int = 200  # every language's test split holds at least this many files
    min_python_to_go_bytes: float = 10.0  # Python's train split >= this x Go's (bytes)
    minhash: MinHashConfig = field(default_factory=MinHashConfig)


@dataclass
class DataConfig:
    root: Path = Path(".")  # repository root; all paths below are relative to it
    corpus_dir: Path = Path("data/corpus")  # gitignored corpus text (rebuildable)
    cache_dir: Path = Path("data/cache")  # gitignored sdist download cache
    manifest_dir: Path = Path("data/manifest")  # committed manifests (paths + sha256, no code)
    seed: int = 1234  # fixed seed of the split and of the per-language caps
    valid_fraction: float = 0.01  # share of files (by hash) in the validation split
    test_fraction: float = 0.01  # share of files (by hash) in the test split
    # Per-language byte budgets after filtering and dedup, before splitting; files beyond the
    # budget are dropped in a seeded hash order. Python must stay the largest domain.
    byte_caps: dict[str, int] = field(
        default_factory=lambda: {"python": 110_000_000, "java": 45_000_000, "go": 30_000_000}
    )
    filters: FilterConfig = field(default_factory=FilterConfig)
    private: PrivateDomainConfig = field(default_factory=PrivateDomainConfig)

    def path(self, rel: Path) -> Path:
        return rel if rel.is_absolute() else self.root / rel
