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
