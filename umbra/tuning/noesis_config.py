"""NOESIS's typed settings (stage 1's shared family, DP-SGD, the run), torch-free: the CLI's
parser reads the defaults. The code that uses them: dp_sgd.py, shared_params.py, noesis.py."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from umbra.errors import ConfigError
from umbra.model.adapters.config import BottleneckConfig, DeepPromptConfig, LoraConfig, SoftPromptConfig

ACCOUNTANTS = ("rdp", "prv", "gdp")  # opacus' accountants
DEFAULT_DELTA = 1e-6  # DESIGN §4: (ε, δ) = (1, 1e-6)
DEFAULT_CLIP_NORM = 1.0  # C where nothing narrower is known (seed 000 App. C.3: 1.0)


@dataclass(frozen=True)
class DPConfig:
    epsilon: float = 1.0  # target ε of the whole run (math.inf: no noise, no clipping — non-private)
    delta: float = DEFAULT_DELTA  # target δ; must be below 1 / N (one document)
    # C: bound on each document's gradient. None: the trained family's (family_clip_norm; StageOneConfig
    # resolves it), DEFAULT_CLIP_NORM where no family is named (DP-LoRA and federation train LoRA: 1.0)
    clip_norm: float | None = None
    expected_batch: int = 64  # B: expected documents per step; q = B / N
    epochs: float = 4.0  # expected passes over the documents; steps = ceil(epochs / q)
    accountant: str = "rdp"  # opacus accountant: rdp | prv | gdp
    noise_seed: int | None = None  # None: keyed from the OS CSPRNG (the only setting with a guarantee)

    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon)

    def validate(self) -> "DPConfig":
        if not (self.epsilon > 0):
            raise ConfigError(f"epsilon must be > 0 (inf for non-private), got {self.epsilon}")
        if not 0 < self.delta < 1:
            raise ConfigError(f"delta must be in (0, 1), got {self.delta}")
        if self.clip_norm is not None and not (self.clip_norm > 0 and math.isfinite(self.clip_norm)):
            raise ConfigError(f"clip_norm must be a finite number > 0, got {self.clip_norm}")
        if self.expected_batch < 1:
            raise ConfigError(f"expected_batch must be >= 1, got {self.expected_batch}")
        if not (self.epochs > 0 and math.isfinite(self.epochs)):
            raise ConfigError(f"epochs must be a finite number > 0, got {self.epochs}")
        if self.accountant not in ACCOUNTANTS:
            raise ConfigError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {self.accountant!r}")
        return self

    @property
    def clip(self) -> float:
        """The bound in force: clip_norm, or DEFAULT_CLIP_NORM where it was left to the trainer."""
        return DEFAULT_CLIP_NORM if self.clip_norm is None else self.clip_norm

    def for_family(self, family: str) -> "DPConfig":
        """This setting with an unset C resolved to `family`'s bound (a set C is kept)."""
        return self if self.clip_norm is not None else replace(self, clip_norm=family_clip_norm(family))


FAMILIES = ("soft_prompt", "deep_prompt", "lora", "bottleneck", "full")
# The clip bound C of a family where it departs from DEFAULT_CLIP_NORM: the power of ten at or just above
# the family's median per-document gradient norm at initialization on PUBLIC code, at most 1
# (experiments/noesis_clip.py measures it and checks this table). Under C the noise σC is drawn
# whatever the gradients are: the deep prompt's zero-initialized gates give ~10⁻⁴ per document, so
# at C = 1 the noise alone would steer it (docs/noesis.md, "The clip bound, per family").
FAMILY_CLIP_NORM = {"deep_prompt": 1e-3}


def family_clip_norm(family: str, default: float = DEFAULT_CLIP_NORM) -> float:
    """The clip bound C of `family` (`default` where the family keeps it)."""
    return FAMILY_CLIP_NORM.get(family, default)


@dataclass(frozen=True)
class SharedConfig:
    family: str = "soft_prompt"  # one of FAMILIES
    prompt_length: int = 32  # soft / deep prompt vectors (seed 000 Table 3: 32 is best of 8 / 32 / 120)
    rank: int = 4  # common LoRA rank (seed 000 App. C.3: 4)
    alpha: float = 8.0  # common LoRA scale numerator (scale = alpha / rank)
    bottleneck: int = 16  # bottleneck adapter width
    name: str = "shared"  # the adapter's name in the bundle
    init_seed: int = 0  # initialisation of the adapter's free weights (output weights start at zero)

    def validate(self) -> "SharedConfig":
        if self.family not in FAMILIES:
            raise ConfigError(f"shared family must be one of {', '.join(FAMILIES)}, got {self.family!r}")
        if self.prompt_length < 1 or self.rank < 1 or self.bottleneck < 1:
            raise ConfigError("prompt_length, rank and bottleneck must be >= 1")
        return self

    def adapter_config(self):
        """The adapter config of an adapter family (None for `full`)."""
        f, seed = self.family, self.init_seed
        if f == "soft_prompt":
            return SoftPromptConfig(length=self.prompt_length, init_seed=seed)
        if f == "deep_prompt":
            return DeepPromptConfig(length=self.prompt_length, init_seed=seed)
        if f == "lora":
            return LoraConfig(rank=self.rank, alpha=self.alpha, init_seed=seed)
        if f == "bottleneck":
            return BottleneckConfig(size=self.bottleneck, init_seed=seed)
        return None


@dataclass(frozen=True)
class StageOneConfig:
    shared: SharedConfig = field(default_factory=SharedConfig)  # what is shared (family, size)
    dp: DPConfig = field(default_factory=DPConfig)  # (ε, δ), C, expected batch, epochs
    context_length: int = 256  # positions per block, a soft prompt's included (block = context − prompt)
    physical_batch: int = 8  # rows per forward/backward; a step runs ceil(|S| / this) equal-shaped chunks
    lr: float = 1e-3  # AdamW (seed 000 App. C.3)
    weight_decay: float = 0.0  # on the shared parameters
    warmup_steps: int = 10  # linear warm-up, then constant
    fim_rate: float = 0.5  # share of blocks as FIM examples (completions use FIM prompts)

    def __post_init__(self) -> None:
        # An unset C is the shared family's (FAMILY_CLIP_NORM), whoever builds the config: CLI, benchmarks, tests.
        object.__setattr__(self, "dp", self.dp.for_family(self.shared.family))

    def validate(self) -> "StageOneConfig":
        self.shared.validate()
        self.dp.validate()
        if self.physical_batch < 1 or self.warmup_steps < 0 or not self.lr > 0 or self.weight_decay < 0:
            raise ConfigError("stage 1 needs physical_batch >= 1, warmup_steps >= 0, lr > 0, weight_decay >= 0")
        prompt = self.shared.prompt_length if self.shared.family == "soft_prompt" else 0
        if self.context_length - prompt < 2:
            raise ConfigError(f"context_length {self.context_length} leaves no block after a {prompt}-vector prompt")
        return self

    @property
    def block_len(self) -> int:
        """Tokens of a document per block: the context minus the soft prompt's positions."""
        prompt = self.shared.prompt_length if self.shared.family == "soft_prompt" else 0
        return self.context_length - prompt
