"""Typed configs of the client's adapters, and where they sit (torch-free, so the CLI's `--help`
and the bundle manifest can read them without loading the model code).

Four kinds, one config each:

    LoraConfig        low-rank update B·A of chosen Linear layers (attention and MLP projections)
    BottleneckConfig  Houlsby adapter z + up(act(down(z))) on a sublayer's output
    SoftPromptConfig  n vectors prepended to the input (NOESIS's shared prompt)
    DeepPromptConfig  n vectors per block, read by a zero-initialised gated attention (one prompt
                      per client block: LLaMA-Adapter's "zero-init attention")

Placement (DESIGN §1, invariant 7): by default an adapter sits on the client's DECODER blocks, so
what the encoder sends — the only thing the cloud sees — cannot depend on which adapters a request
uses. ENCODER and CLIENT (both sides) are opt-in and measured by experiments/adapter_leakage.py. A
soft prompt always sits at the INPUT: its states cross the wire, so only a prompt shared by every
request (the same for every language and key) may be one. MIDDLE is for the cloud's own LoRA
(umbra/middle/lora_store.py) and never a client placement."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from enum import Enum

from umbra.errors import ConfigError

ATTENTION_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_TARGETS = ("gate_proj", "up_proj", "down_proj")
LORA_TARGETS = ATTENTION_TARGETS + MLP_TARGETS
SUBLAYERS = ("attention", "mlp")  # where a bottleneck adapter may sit
MAX_RANK = 256


class Kind(str, Enum):
    LORA = "lora"
    BOTTLENECK = "bottleneck"
    SOFT_PROMPT = "soft_prompt"
    DEEP_PROMPT = "deep_prompt"


class Placement(str, Enum):
    DECODER = "decoder"  # the client's last D blocks (default: invisible to the cloud)
    ENCODER = "encoder"  # the client's first E blocks (changes what is sent: opt-in)
    CLIENT = "client"  # both
    INPUT = "input"  # before the first block (soft prompts only)
    MIDDLE = "middle"  # the cloud's blocks (the cloud's own LoRA only)


@dataclass(frozen=True)
class SplitShape:
    """What placement needs of a model: its depth and the client's split."""

    num_layers: int  # L
    encoder_blocks: int  # E
    decoder_blocks: int  # D

    def blocks(self, placement: Placement) -> tuple[int, ...]:
        """Global block indices of a placement."""
        e, d, n = self.encoder_blocks, self.decoder_blocks, self.num_layers
        return {
            Placement.DECODER: tuple(range(n - d, n)),
            Placement.ENCODER: tuple(range(e)),
            Placement.CLIENT: tuple(range(e)) + tuple(range(n - d, n)),
            Placement.INPUT: (),
            Placement.MIDDLE: tuple(range(e, n - d)),
        }[placement]


@dataclass(frozen=True)
class LoraConfig:
    rank: int = 8  # r of A [r, in] and B [out, r]
    alpha: float = 16.0  # scale = alpha / rank (peft's `lora_alpha`)
    targets: tuple[str, ...] = LORA_TARGETS  # which Linear layers of each block
    placement: Placement = Placement.DECODER
    init_seed: int | None = None  # init of A (B starts at zero); None = fresh entropy

    kind = Kind.LORA

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def validate(self) -> "LoraConfig":
        if not 1 <= self.rank <= MAX_RANK:
            raise ConfigError(f"LoRA rank must lie in [1, {MAX_RANK}], got {self.rank}")
        if not self.alpha > 0:
            raise ConfigError(f"LoRA alpha must be > 0, got {self.alpha}")
        _check_targets(self.targets, LORA_TARGETS, "LoRA target")
        _check_placement(self, (Placement.DECODER, Placement.ENCODER, Placement.CLIENT, Placement.MIDDLE))
        return self


@dataclass(frozen=True)
class BottleneckConfig:
    size: int = 32  # bottleneck width m: down [m, C], up [C, m]
    sublayers: tuple[str, ...] = SUBLAYERS  # after attention and/or after the MLP (Houlsby: both)
    placement: Placement = Placement.DECODER
    init_seed: int | None = None  # init of `down` (`up` starts at zero)

    kind = Kind.BOTTLENECK

    def validate(self) -> "BottleneckConfig":
        if not 1 <= self.size <= 4096:
            raise ConfigError(f"bottleneck size must lie in [1, 4096], got {self.size}")
        _check_targets(self.sublayers, SUBLAYERS, "bottleneck sublayer")
        _check_placement(self, (Placement.DECODER, Placement.ENCODER, Placement.CLIENT))
        return self


@dataclass(frozen=True)
class SoftPromptConfig:
    length: int = 16  # n prompt vectors, occupying the first n positions of every session
    init_std: float = 0.02  # normal init of the vectors
    placement: Placement = Placement.INPUT
    init_seed: int | None = None

    kind = Kind.SOFT_PROMPT

    def validate(self) -> "SoftPromptConfig":
        return _check_prompt(self, (Placement.INPUT,))


@dataclass(frozen=True)
class DeepPromptConfig:
    length: int = 8  # n prompt vectors per block
    init_std: float = 0.02  # normal init of the vectors (the gate starts at zero)
    placement: Placement = Placement.DECODER
    init_seed: int | None = None

    kind = Kind.DEEP_PROMPT

    def validate(self) -> "DeepPromptConfig":
        return _check_prompt(self, (Placement.DECODER, Placement.ENCODER, Placement.CLIENT))


AdapterConfig = LoraConfig | BottleneckConfig | SoftPromptConfig | DeepPromptConfig
CONFIGS: dict[Kind, type] = {c.kind: c for c in (LoraConfig, BottleneckConfig, SoftPromptConfig, DeepPromptConfig)}


def config_to_dict(config: AdapterConfig) -> dict:
    """JSON-ready: {"kind": ..., field: value, ...} (enums as strings, tuples as lists)."""
    out: dict = {"kind": config.kind.value}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        out[f.name] = value.value if isinstance(value, Enum) else list(value) if isinstance(value, tuple) else value
    return out


def config_from_dict(data: object, where: str) -> AdapterConfig:
    """The config a dict describes; ConfigError naming `where` (a file) if it is not one."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise ConfigError(f"{where}: adapter config is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: adapter config must be an object")
    data = dict(data)
    try:
        cls = CONFIGS[Kind(data.pop("kind", None))]
    except ValueError as exc:
        raise ConfigError(f"{where}: unknown adapter kind {data.get('kind')!r} "
                          f"(known: {', '.join(k.value for k in Kind)})") from exc
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown {cls.kind.value} adapter setting(s) {', '.join(unknown)}")
    values = {}
    for name, value in data.items():
        default = fields[name].default
        try:
            if isinstance(default, Placement):
                value = Placement(value)
            elif isinstance(default, tuple):
                value = tuple(value)
            elif isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{where}: bad {cls.kind.value} adapter setting {name}={value!r}") from exc
        values[name] = value
    try:
        return cls(**values).validate()
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def _check_targets(chosen: tuple[str, ...], known: tuple[str, ...], what: str) -> None:
    if not chosen:
        raise ConfigError(f"at least one {what} is needed")
    bad = [t for t in chosen if t not in known]
    if bad or len(set(chosen)) != len(chosen):
        raise ConfigError(f"bad {what}(s) {chosen!r}; choose distinct ones of {', '.join(known)}")


def _check_prompt(config, allowed: tuple[Placement, ...]):
    what = config.kind.value.replace("_", " ")
    if not 1 <= config.length <= 512:
        raise ConfigError(f"{what} length must lie in [1, 512], got {config.length}")
    if not config.init_std > 0:
        raise ConfigError(f"{what} init_std must be > 0")
    _check_placement(config, allowed)
    return config


def _check_placement(config, allowed: tuple[Placement, ...]) -> None:
    if not isinstance(config.placement, Placement) or config.placement not in allowed:
        raise ConfigError(f"a {config.kind.value} adapter may sit at {', '.join(p.value for p in allowed)}; "
                          f"got {getattr(config.placement, 'value', config.placement)!r}")
