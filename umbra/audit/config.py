"""`umbra audit`'s settings, torch-free so that the CLI can show their defaults without loading
the attack suite."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from umbra.attacks.probe_config import ProbeConfig
from umbra.paths import repo_root


@dataclass(frozen=True)
class AuditConfig:
    corpus_dir: Path = field(default_factory=lambda: repo_root() / "data" / "corpus")  # attacker's public code
    public_blocks: int = 512  # public code blocks (train split) for the probe, codebook and frequencies
    block_length: int = 128
    probe: ProbeConfig = ProbeConfig()
    model_dir: Path | None = None  # the base model the cloud holds; None: as recorded
    last: int | None = None  # only the most recent N recordings
    cache_dir: Path | None = None  # trained probes and shadow clients; None: <audit dir>/cache
    decipher: bool = True  # run the decipherment attack (bigram decipherment of state clusters)
    # the decipherment fits on a random part of at most this many received positions and labels all of
    # them: on more traffic a fit on everything can fail where a part's reads the rest (noir+path+noise1
    # at 100x the grid's prompts: 0-18 % fitted on all, 24-33 % on 81,920; docs/privacy/frontier.md).
    # None: fit on everything
    decipher_fit_positions: int | None = 81_920
