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

    def path(self, rel: Path) -> Path:
        return rel if rel.is_absolute() else self.root / rel
