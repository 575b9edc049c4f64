"""Adapters on disk: one safetensors file each, its config and the model facts it was made for in
the file's metadata, validated on the way in — a truncated or wrong-shape file, one made for
another model or split, or one whose bytes do not match the expected hash is a ConfigError that
names the file, before anything is loaded.

`adapter_bytes` / `adapter_from_bytes` are the same format in memory (an encrypted adapter is
these bytes, sealed). `export_peft` writes a LoRA in peft's layout (`adapter_config.json` +
`adapter_model.safetensors`) for `peft.PeftModel.from_pretrained` on the transformers model of
the same base."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from umbra.atomic import write_atomic
from umbra.errors import ConfigError
from umbra.model.adapters.config import ATTENTION_TARGETS, Kind, SplitShape, config_from_dict, config_to_dict
from umbra.model.adapters.modules import Adapter, LoraAdapter, build_adapter
from umbra.model.spec import ModelSpec

FORMAT = "umbra-adapter"
FORMAT_VERSION = "1"
PEFT_CONFIG = "adapter_config.json"
PEFT_WEIGHTS = "adapter_model.safetensors"


def _facts(spec: ModelSpec, shape: SplitShape) -> dict:
    return {"hidden_size": spec.hidden_size, "num_layers": spec.num_layers, "num_heads": spec.num_heads,
            "encoder_blocks": shape.encoder_blocks, "decoder_blocks": shape.decoder_blocks}


def adapter_bytes(adapter: Adapter, spec: ModelSpec, shape: SplitShape) -> bytes:
    """The adapter as a safetensors file (config, name and model facts in its metadata)."""
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in adapter.state_dict().items()}
    metadata = {"format": FORMAT, "format_version": FORMAT_VERSION, "name": adapter.name,
                "config": json.dumps(config_to_dict(adapter.config), sort_keys=True),
                "blocks": json.dumps(list(adapter.blocks)), "model": json.dumps(_facts(spec, shape), sort_keys=True)}
    return st_save(tensors, metadata=metadata)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def save_adapter(adapter: Adapter, path: str | Path, spec: ModelSpec, shape: SplitShape) -> str:
    """Write the adapter to `path` atomically; returns the file's sha256."""
    data = adapter_bytes(adapter, spec, shape)
    write_atomic(Path(path), data)
    return sha256_bytes(data)


def read_adapter(path: str | Path, spec: ModelSpec, shape: SplitShape, *, expected_sha256: str | None = None,
                 name: str | None = None, dtype: torch.dtype | None = None) -> Adapter:
    """Load and validate an adapter file (ConfigError naming the file on any mismatch)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"adapter file {path}: cannot read it ({exc.strerror or exc})") from exc
    if expected_sha256 is not None and sha256_bytes(data) != expected_sha256:
        raise ConfigError(f"adapter file {path} does not match its hash in the manifest (corrupt or modified)")
    return adapter_from_bytes(data, str(path), spec, shape, name=name, dtype=dtype)


def adapter_from_bytes(data: bytes, where: str, spec: ModelSpec, shape: SplitShape, *, name: str | None = None,
                       dtype: torch.dtype | None = None) -> Adapter:
    try:
        tensors = st_load(data)
        with_meta = safetensors_metadata(data)
    except (SafetensorError, ValueError, OSError) as exc:
        raise ConfigError(f"adapter file {where} is truncated or not a safetensors file ({exc})") from exc
    if with_meta.get("format") != FORMAT:
        raise ConfigError(f"adapter file {where} is not an Umbra adapter (no '{FORMAT}' metadata)")
    if with_meta.get("format_version") != FORMAT_VERSION:
        raise ConfigError(f"adapter file {where} has format version {with_meta.get('format_version')!r}; "
                          f"this Umbra reads {FORMAT_VERSION}")
    config = config_from_dict(with_meta.get("config", ""), f"adapter file {where}")
    try:
        facts, blocks = json.loads(with_meta.get("model", "")), json.loads(with_meta.get("blocks", ""))
    except ValueError as exc:
        raise ConfigError(f"adapter file {where} has malformed metadata: {exc}") from exc
    if facts != _facts(spec, shape):
        raise ConfigError(f"adapter file {where} was made for another model or split ({facts}); "
                          f"this one is {_facts(spec, shape)}")
    stored_name = with_meta.get("name") or ""
    with torch.device("meta"):
        adapter = build_adapter(name or stored_name, config, spec, shape)
    if list(adapter.blocks) != blocks:
        raise ConfigError(f"adapter file {where} adapts blocks {blocks}, its placement here means {list(adapter.blocks)}")
    expected = {k: tuple(v.shape) for k, v in adapter.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in tensors.items()}
    if expected != got:
        missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
        wrong = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])
        detail = (f"missing {missing[:3]}" if missing else f"unexpected {extra[:3]}" if extra
                  else f"{wrong[0]} is {list(got[wrong[0]])}, expected {list(expected[wrong[0]])}")
        raise ConfigError(f"adapter file {where} does not fit its {config.kind.value} config: {detail}")
    bad = [k for k, v in tensors.items() if not v.is_floating_point() or not torch.isfinite(v).all()]
    if bad:
        raise ConfigError(f"adapter file {where}: tensor {bad[0]} is not finite floating point")
    adapter.load_state_dict({k: v if dtype is None else v.to(dtype) for k, v in tensors.items()}, assign=True)
    return adapter.requires_grad_(False)


def safetensors_metadata(data: bytes) -> dict:
    """The safetensors header's __metadata__ (the format: 8-byte little-endian length, JSON header)."""
    if len(data) < 8:
        raise ValueError("shorter than a safetensors header")
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    return header.get("__metadata__") or {}


def export_peft(adapter: LoraAdapter, out_dir: str | Path, base_model: str | None = None) -> Path:
    """Write a LoRA as a peft adapter directory; `peft.PeftModel.from_pretrained(model, out_dir)` then
    gives the transformers model of the same base the same outputs as this adapter in Umbra."""
    if adapter.kind is not Kind.LORA:
        raise ConfigError(f"only LoRA adapters export to peft; {adapter.name} is a {adapter.kind.value} adapter")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    c = adapter.config
    tensors = {}
    for block, per in adapter.layers.items():
        for target, pair in per.items():
            group = "self_attn" if target in ATTENTION_TARGETS else "mlp"
            prefix = f"base_model.model.model.layers.{block}.{group}.{target}"
            tensors[f"{prefix}.lora_A.weight"] = pair.a.detach().to("cpu").contiguous()
            tensors[f"{prefix}.lora_B.weight"] = pair.b.detach().to("cpu").contiguous()
    from peft import LoraConfig as PeftLoraConfig  # peft writes its own config: whatever version is installed

    config = PeftLoraConfig(r=c.rank, lora_alpha=c.alpha, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                            target_modules=sorted(c.targets), layers_to_transform=[int(b) for b in adapter.layers],
                            layers_pattern="layers", base_model_name_or_path=base_model, inference_mode=True)
    write_atomic(out / PEFT_WEIGHTS, st_save(tensors, metadata={"format": "pt"}))
    write_atomic(out / PEFT_CONFIG, (json.dumps(config.to_dict(), indent=2, sort_keys=True, default=list) + "\n")
                 .encode())
    return out
