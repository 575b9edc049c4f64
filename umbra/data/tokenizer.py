"""Byte-level BPE tokenizer with FIM / end-of-file / padding special tokens.

No normalizer, a byte-level pre-tokenizer without prefix space and the byte-level decoder, so
`decode(encode(text)) == text` byte-exactly (tabs, CRLF, non-ASCII). Saved as a Hugging Face fast
tokenizer directory loadable offline by `transformers.AutoTokenizer.from_pretrained`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from umbra.data.config import DataConfig
from umbra.data.corpus import LANGS, read_documents
from umbra.data.split import unit_hash
from umbra.errors import ConfigError

FIM_PREFIX = "<fim_prefix>"
FIM_MIDDLE = "<fim_middle>"
FIM_SUFFIX = "<fim_suffix>"
EOS = "<|endoftext|>"
PAD = "<pad>"
# Order fixes the ids: <|endoftext|>=0, <fim_prefix>=1, <fim_middle>=2, <fim_suffix>=3, <pad>=4.
SPECIAL_TOKENS = (EOS, FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, PAD)


@dataclass
class TokenizerConfig:
    vocab_size: int = 8192  # total vocabulary, special tokens included (8k-16k)
    min_frequency: int = 2  # merges must occur at least this often
    sample_bytes: int = 40_000_000  # bytes of training-split text used to learn merges
    seed: int = 1234  # seeded file order for the sample


def build_bpe(texts: Iterator[str], cfg: TokenizerConfig) -> Tokenizer:
    """Train a byte-level BPE on `texts`."""
    if not 512 <= cfg.vocab_size <= 65_536:
        raise ConfigError(f"vocab_size {cfg.vocab_size} out of range")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def save_hf_tokenizer(tok: Tokenizer, out_dir: Path, model_max_length: int = 512) -> Path:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json."""
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        bos_token=EOS,
        unk_token=None,
        pad_token=PAD,
        additional_special_tokens=[FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX],
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(out_dir))
    _write_compat_config(out_dir)
    return out_dir


def _write_compat_config(out_dir: Path) -> None:
    """Make the directory loadable by transformers 4.x as well as 5.x.

    transformers 5 writes `tokenizer_class: TokenizersBackend` and `extra_special_tokens`, which
    4.x does not know; the generic fast class and `additional_special_tokens` load in both."""
    path = out_dir / "tokenizer_config.json"
    cfg = json.loads(path.read_text(encoding="utf-8"))
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    extra = cfg.pop("extra_special_tokens", None)
    cfg["additional_special_tokens"] = list(extra or [FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX])
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    special = {"bos_token": EOS, "eos_token": EOS, "pad_token": PAD,
               "additional_special_tokens": cfg["additional_special_tokens"]}
    (out_dir / "special_tokens_map.json").write_text(
        json.dumps(special, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def load_tokenizer(path: Path):
    """The saved tokenizer as a transformers fast tokenizer (offline)."""
    from transformers import AutoTokenizer

    if not (path / "tokenizer.json").exists():
        raise ConfigError(f"no tokenizer at {path}; run `umbra data tokenizer`")
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def training_sample(cfg: DataConfig, tcfg: TokenizerConfig) -> Iterator[str]:
    """A seeded sample of training-split files, proportional across languages, up to a byte budget."""
    docs = [d for lang in LANGS for d in read_documents(cfg.path(cfg.corpus_dir), "train", lang)]
    docs.sort(key=lambda d: unit_hash(tcfg.seed, "tok:" + d.path))
    used = 0
    for d in docs:
        if used >= tcfg.sample_bytes:
            return
        used += len(d.text.encode("utf-8"))
        yield d.text


def train_tokenizer(cfg: DataConfig, tcfg: TokenizerConfig, out_dir: Path) -> Path:
    tok = build_bpe(training_sample(cfg, tcfg), tcfg)
    return save_hf_tokenizer(tok, cfg.path(out_dir))
