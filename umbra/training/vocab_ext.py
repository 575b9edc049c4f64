"""A tokenizer extended with the `<file_sep>` special token, for repository-level training.

The base tokenizer (8,192 tokens, ids 0..8191) is left untouched; the extended copy appends
`<file_sep>` at id 8192 so every old id keeps its meaning, and the model's vocabulary is padded
to a multiple of 64 (8,256: faster matmuls, room for later specials). Rows that the base model
lacks are initialised by `pad_embedding` as the mean of the trained rows."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer

from umbra.errors import ConfigError

FILE_SEP = "<file_sep>"
_CONFIG_FILES = ("tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True)
class VocabExtension:
    base_dir: Path  # tokenizer directory to extend (read only)
    out_dir: Path  # where the extended tokenizer directory is written
    new_tokens: tuple[str, ...] = (FILE_SEP,)  # appended in this order after the base vocabulary
    pad_multiple: int = 64  # the model's vocab_size is rounded up to a multiple of this
    model_max_length: int = 1024  # recorded in tokenizer_config.json


def padded_vocab_size(n_tokens: int, multiple: int) -> int:
    """Smallest multiple of `multiple` that holds `n_tokens` ids."""
    if n_tokens < 1 or multiple < 1:
        raise ConfigError(f"bad vocabulary size {n_tokens} or multiple {multiple}")
    return -(-n_tokens // multiple) * multiple


def extend_tokenizer(ext: VocabExtension) -> int:
    """Write the extended tokenizer directory; return the padded model vocab size. Idempotent."""
    path = ext.base_dir / "tokenizer.json"
    if not path.exists():
        raise ConfigError(f"no tokenizer at {ext.base_dir}")
    tok = Tokenizer.from_file(str(path))
    base = tok.get_vocab_size()
    if any(tok.token_to_id(t) is not None for t in ext.new_tokens):
        raise ConfigError(f"{ext.base_dir} already has one of {list(ext.new_tokens)}")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ext.new_tokens])
    for k, t in enumerate(ext.new_tokens):
        if tok.token_to_id(t) != base + k:
            raise ConfigError(f"{t} did not get id {base + k}")
    ext.out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(ext.out_dir / "tokenizer.json"))
    for name in _CONFIG_FILES:
        cfg = json.loads((ext.base_dir / name).read_text(encoding="utf-8"))
        cfg["additional_special_tokens"] = [*cfg.get("additional_special_tokens", []), *ext.new_tokens]
        if "model_max_length" in cfg:
            cfg["model_max_length"] = ext.model_max_length
        (ext.out_dir / name).write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return padded_vocab_size(tok.get_vocab_size(), ext.pad_multiple)


def pad_embedding(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """weight [V, C] -> [rows, C]: the trained rows unchanged, the new ones their mean."""
    v, c = weight.shape
    if rows < v:
        raise ConfigError(f"cannot shrink an embedding of {v} rows to {rows}")
    mean = weight.mean(dim=0, keepdim=True)  # [1, C]
    return torch.cat([weight, mean.expand(rows - v, c)], dim=0)  # [rows, C]
