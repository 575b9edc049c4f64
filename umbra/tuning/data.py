"""STuning data: the corpus train split packed exactly as in pretraining (plain next-token + FIM,
umbra.training.packing), as blocks of PUBLIC token ids.

The tune loop maps each batch to private ids (π) in memory right before the encoder; nothing
here knows π, so the on-disk epoch cache holds public ids only (the client's own corpus under
the public tokenizer, which reveals nothing about π)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from umbra.data.corpus import LANGS, Document, read_split
from umbra.data.tokenizer import EOS
from umbra.errors import ConfigError
from umbra.training.fim import SENTINELS
from umbra.training.packing import PackedStream, StreamSpec, load_raw_tokenizer
from umbra.tuning.config import TuneConfig


class TuneData:
    """Batches of public ids addressed by (epoch, block), deterministic in the config's seed."""

    def __init__(self, docs: list[Document], tokenizer, config: TuneConfig, cache_dir: Path | None = None,
                 vocab_size: int | None = None):
        missing = [s for s in (*SENTINELS, EOS) if tokenizer.token_to_id(s) is None]
        if missing:
            raise ConfigError(f"the tokenizer lacks the packing's special tokens {missing} (StarCoder-style FIM)")
        if vocab_size is not None and tokenizer.get_vocab_size() > vocab_size:
            raise ConfigError(f"tokenizer has {tokenizer.get_vocab_size()} tokens, the model only {vocab_size}")
        self.stream = PackedStream(docs, tokenizer, StreamSpec(config.seed, config.context_length, config.fim),
                                   cache_dir)
        self.fingerprint = self.stream.fingerprint  # corpus + tokenizer + packing spec

    @classmethod
    def from_corpus(cls, corpus_dir: Path, tokenizer_dir: Path, config: TuneConfig, *, split: str = "train",
                    langs: tuple[str, ...] = LANGS, cache_dir: Path | None = None,
                    vocab_size: int | None = None) -> "TuneData":
        """`tokenizer_dir`: the public tokenizer (a bundle's `base/` directory)."""
        return cls(read_split(Path(corpus_dir), split, langs), load_raw_tokenizer(Path(tokenizer_dir)), config,
                   cache_dir, vocab_size)

    def batch(self, epoch: int, block: int, batch_size: int) -> tuple[np.ndarray, int, int]:
        """(public ids int64 [B, T], next epoch, next block) — see PackedStream.batch."""
        blocks, epoch, block = self.stream.batch(epoch, block, batch_size)
        return blocks.astype(np.int64), epoch, block
