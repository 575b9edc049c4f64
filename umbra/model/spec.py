"""ModelSpec: the architecture facts of a Llama-family causal LM, read once from config.json.

Llama, Qwen2 and Mistral share one block (pre-norm RMSNorm, rotary attention with grouped
KV heads, SwiGLU MLP); they differ only in biases, sliding windows and RoPE scaling, which the
spec records so the rest of the package never branches on the family name.

A config.json that states every field the spec needs (what `save_pretrained` writes) is read
directly; one that leaves a field to its family's default, or asks for YaRN RoPE scaling or a
Qwen2 sliding window, is read by transformers' AutoConfig, the reference. The direct read is the same
spec (tests/model/test_spec.py) without importing transformers, about 1.4 CPU-seconds of every
process that loads a model: the cloud, the language server, `umbra serve`, a federation client."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch

from umbra.errors import ModelLoadError

SUPPORTED_FAMILIES = ("llama", "qwen2", "mistral")
# RoPE variants whose frequencies do not depend on the running sequence length.
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


@dataclass(frozen=True)
class ModelSpec:
    family: str  # config.model_type: "llama" | "qwen2" | "mistral"
    vocab_size: int
    hidden_size: int  # C, the width of the hidden states that cross the wire
    intermediate_size: int  # SwiGLU inner width
    num_layers: int
    num_heads: int
    num_kv_heads: int  # < num_heads means grouped-query attention
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool  # LM head shares the embedding matrix (absent from the weights)
    qkv_bias: bool  # Qwen2: q/k/v projections carry a bias
    o_bias: bool  # Llama with attention_bias=True
    mlp_bias: bool  # Llama with mlp_bias=True
    # Per-layer sliding window (None = full attention); a key at slot j is visible to a query
    # at slot i iff j <= i and i - j < window.
    sliding_windows: tuple[int | None, ...] = field(default=())
    hidden_act: str = "silu"
    torch_dtype: str = "float32"
    # inv_freq of RoPE ([head_dim/2]) and the cos/sin scale: default, linear and llama3 computed
    # here, YaRN by transformers' own initialiser; each matches the reference bit for bit.
    rope_inv_freq: torch.Tensor | None = field(default=None, compare=False, repr=False)
    rope_attention_scaling: float = 1.0

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim


def _sliding_windows(config) -> tuple[int | None, ...]:
    n = config.num_hidden_layers
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if config.model_type == "qwen2" and not getattr(config, "use_sliding_window", False):
        window = None
    if window is None:
        return (None,) * n
    if layer_types is not None:
        return tuple(window if t == "sliding_attention" else None for t in layer_types)
    return (window,) * n


# RoPE variants computed here (the published formulas; tests/model/test_spec.py holds them bit for
# bit to transformers' initialisers); the others by transformers' own.
OWN_ROPE_TYPES = {"default": (), "linear": ("factor",),
                  "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}


def _llama3_scaled(inv_freq: torch.Tensor, factor: float, low: float, high: float, context: int) -> torch.Tensor:
    """Llama 3's frequency-dependent scaling: wavelengths under context/high kept, over
    context/low divided by `factor`, and between them a linear blend of the two."""
    wavelen = 2 * math.pi / inv_freq  # [head_dim/2]
    scaled = torch.where(wavelen > context / low, inv_freq / factor, inv_freq)
    smooth = (context / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    between = (wavelen >= context / high) & (wavelen <= context / low)
    return torch.where(between, blended, scaled)


def _rope(config, own: bool) -> tuple[torch.Tensor, float]:
    params = getattr(config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", "default")
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ModelLoadError(
            f"RoPE type {rope_type!r} is not supported (supported: {', '.join(SUPPORTED_ROPE_TYPES)})"
        )
    computed_here = rope_type in OWN_ROPE_TYPES and all(params.get(k) is not None for k in OWN_ROPE_TYPES[rope_type])
    if computed_here and (own or rope_type == "default"):  # transformers 5 has no "default" initialiser
        base = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))  # [head_dim/2]
        if rope_type == "linear":
            inv_freq = inv_freq / params["factor"]
        elif rope_type == "llama3":
            inv_freq = _llama3_scaled(inv_freq, params["factor"], params["low_freq_factor"],
                                      params["high_freq_factor"], params["original_max_position_embeddings"])
        return inv_freq, 1.0
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config)
    return inv_freq.float(), float(scaling)


def spec_from_config(config, own_rope: bool = True) -> ModelSpec:
    """Build a ModelSpec from a transformers PretrainedConfig of a supported family (or the
    attributes direct_config read); `own_rope=False`: every RoPE variant by transformers'
    initialisers, the reference."""
    family = getattr(config, "model_type", None)
    if family not in SUPPORTED_FAMILIES:
        raise ModelLoadError(
            f"model family {family!r} is not supported (supported: {', '.join(SUPPORTED_FAMILIES)})"
        )
    act = getattr(config, "hidden_act", "silu")
    if act != "silu":
        raise ModelLoadError(f"activation {act!r} is not supported (only silu)")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    if config.num_attention_heads % kv_heads:
        raise ModelLoadError("num_attention_heads must be a multiple of num_key_value_heads")
    inv_freq, scaling = _rope(config, own_rope)
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float32"
    return ModelSpec(
        family=family,
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        rms_norm_eps=config.rms_norm_eps,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        qkv_bias=family == "qwen2" or bool(getattr(config, "attention_bias", False)),
        o_bias=family == "llama" and bool(getattr(config, "attention_bias", False)),
        mlp_bias=bool(getattr(config, "mlp_bias", False)),
        sliding_windows=_sliding_windows(config),
        hidden_act=act,
        torch_dtype=str(dtype).replace("torch.", ""),
        rope_inv_freq=inv_freq,
        rope_attention_scaling=scaling,
    )


# What a config.json must state to be read without AutoConfig: the fields whose defaults differ
# between the families (or could), so that a missing one is never guessed.
DIRECT_KEYS = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "rms_norm_eps", "max_position_embeddings",
               "tie_word_embeddings")


def direct_config(raw: dict) -> SimpleNamespace | None:
    """The config's attributes as AutoConfig would set them, or None where only AutoConfig can say
    (a missing or null field of DIRECT_KEYS, a family's default sliding window, a RoPE type not
    in OWN_ROPE_TYPES or with other parameters, a `rope_scaling` of the oldest form (`type`), a
    Qwen2 sliding window, an unsupported family: AutoConfig then gives the reference answer or
    the reference error)."""
    if any(raw.get(k) is None for k in DIRECT_KEYS) or raw["model_type"] not in SUPPORTED_FAMILIES:
        return None
    family = raw["model_type"]
    if family == "qwen2" and raw.get("use_sliding_window"):
        return None
    if family == "mistral" and "sliding_window" not in raw:  # MistralConfig's default is 4096
        return None
    if "partial_rotary_factor" in raw:
        return None
    rope, legacy = raw.get("rope_parameters"), raw.get("rope_scaling")
    if rope is not None and ("rope_theta" in raw or legacy is not None):  # two statements: AutoConfig decides
        return None
    if rope is None and isinstance(legacy, dict) and "type" not in legacy:  # transformers 4.x: θ apart
        rope = {**legacy, "rope_theta": raw.get("rope_theta")}
    elif rope is None and legacy is None:
        rope = {"rope_type": "default", "rope_theta": raw.get("rope_theta")}
    if not isinstance(rope, dict):
        return None
    own = OWN_ROPE_TYPES.get(rope.get("rope_type"))
    if own is None or set(rope) != {"rope_type", "rope_theta", *own} or any(v is None for v in rope.values()):
        return None
    return SimpleNamespace(**{**raw, "rope_parameters": dict(rope)})


def load_spec(model_dir: str | Path) -> ModelSpec:
    """Read `config.json` of a local Hugging Face model directory (never touches the network)."""
    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path} is not a model directory (no config.json)")
    try:
        raw = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {path / 'config.json'}: {exc}") from exc
    direct = direct_config(raw) if isinstance(raw, dict) else None
    if direct is not None:
        return spec_from_config(direct)
    return reference_spec(path)


def reference_spec(path: Path, own_rope: bool = True) -> ModelSpec:
    """The spec through transformers' AutoConfig (any config its version reads); own_rope=False
    also takes RoPE's frequencies from transformers' initialisers (the tests' reference)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"cannot read {path / 'config.json'}: {exc}") from exc
    return spec_from_config(config, own_rope)
