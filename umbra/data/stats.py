"""Token counts per language and split, and the byte-exact round-trip check of the tokenizer."""

from __future__ import annotations

from pathlib import Path

from umbra.data.config import DataConfig
from umbra.data.corpus import LANGS, read_documents
from umbra.data.manifest import read_summary, write_summary
from umbra.data.split import RESERVED, SPLITS
from umbra.data.tokenizer import load_tokenizer
from umbra.errors import ValidationError

_BATCH = 256  # documents encoded per call


def count_tokens(tokenizer, texts: list[str]) -> int:
    total = 0
    for i in range(0, len(texts), _BATCH):
        enc = tokenizer(texts[i:i + _BATCH], add_special_tokens=False)["input_ids"]
        total += sum(len(ids) for ids in enc)
    return total


def roundtrip_failures(tokenizer, texts: list[str]) -> int:
    """How many texts do not survive decode(encode(text)) byte-exactly."""
    bad = 0
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if tokenizer.decode(ids, clean_up_tokenization_spaces=False) != text:
            bad += 1
    return bad


def token_stats(cfg: DataConfig, tokenizer_dir: Path) -> dict:
    """Tokens per (language, split); verifies the test-split round trip; updates summary.json."""
    tok = load_tokenizer(cfg.path(tokenizer_dir))
    corpus_dir = cfg.path(cfg.corpus_dir)
    tokens: dict[str, dict[str, int]] = {}
    for lang in LANGS:
        tokens[lang] = {}
        for split in (*SPLITS, RESERVED):
            texts = [d.text for d in read_documents(corpus_dir, split, lang)]
            tokens[lang][split] = count_tokens(tok, texts)
            if split == "test":
                bad = roundtrip_failures(tok, texts)
                if bad:
                    raise ValidationError(f"{bad} {lang} test files fail the tokenizer round trip")
    summary_path = cfg.path(cfg.manifest_dir) / "summary.json"
    summary = read_summary(summary_path)
    summary["tokens"] = tokens
    summary["tokenizer_vocab_size"] = len(tok)
    write_summary(summary_path, summary)
    return tokens
