"""Fill-in-the-middle transformation at character level, applied per document before tokenizing.

A FIM document is cut at two uniformly drawn character positions into prefix / middle / suffix
and rendered either as PSM  `<fim_prefix> prefix <fim_suffix> suffix <fim_middle> middle`
or as SPM  `<fim_prefix> <fim_suffix> suffix <fim_middle> prefix middle`.
Sentinels are emitted as token ids by the packer, never as text the tokenizer could confuse."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from umbra.data.tokenizer import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX
from umbra.training.config import FimConfig

PLAIN, PSM, SPM = "plain", "psm", "spm"


@dataclass(frozen=True)
class FimExample:
    mode: str  # "plain" | "psm" | "spm"
    prefix: str  # whole document when mode == "plain"
    middle: str
    suffix: str

    def original(self) -> str:
        return self.prefix + self.middle + self.suffix


def split_points(length: int, rng: np.random.Generator) -> tuple[int, int]:
    """Two sorted character offsets in [0, length]."""
    a, b = rng.integers(0, length + 1, size=2)
    return (int(a), int(b)) if a <= b else (int(b), int(a))


def fim_transform(text: str, cfg: FimConfig, rng: np.random.Generator) -> FimExample:
    """Draw (with `rng`) whether and how to FIM-transform one document."""
    use_fim = rng.random() < cfg.rate
    use_spm = rng.random() < cfg.spm_rate
    if not use_fim:
        return FimExample(PLAIN, text, "", "")
    i, j = split_points(len(text), rng)
    return FimExample(SPM if use_spm else PSM, text[:i], text[i:j], text[j:])


def render(example: FimExample) -> list[str]:
    """The example as a list of segments; sentinel strings are whole segments of their own."""
    if example.mode == PLAIN:
        return [example.prefix]
    if example.mode == PSM:
        return [FIM_PREFIX, example.prefix, FIM_SUFFIX, example.suffix, FIM_MIDDLE, example.middle]
    return [FIM_PREFIX, FIM_SUFFIX, example.suffix, FIM_MIDDLE, example.prefix + example.middle]


SENTINELS = frozenset((FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX))
