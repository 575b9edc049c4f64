"""Shared by the scrubber tests: spans as (kind, text) pairs, so a test states what was found
and exactly which characters, and nothing else."""

from __future__ import annotations

from umbra.scrub import ScrubConfig, Scrubber


def found(text: str, path: str | None = "example.py", config: ScrubConfig | None = None) -> list[tuple[str, str]]:
    """(kind, the exact text replaced) for every resolved span, in text order."""
    return [(s.kind, text[s.start:s.end]) for s in Scrubber(config).spans(text, path)]
