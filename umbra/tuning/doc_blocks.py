"""Documents as the privacy unit: each document tokenized once, one block drawn per visit.

Document-level DP (DESIGN §4) needs every gradient to come from exactly one document, so nothing
is packed across documents: a visit takes one window of `block_len` tokens at an offset drawn
from the run's CSPRNG (the whole document when shorter, right-padded), optionally FIM-transformed
inside the window (the product completes with FIM prompts). Evaluation blocks are fixed: one
plain window of each document, or every window of it (`tiles`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from umbra.data.corpus import Document
from umbra.data.tokenizer import EOS
from umbra.errors import ConfigError
from umbra.training.config import FimConfig
from umbra.training.fim import SENTINELS, fim_transform, render

PAD_ID = 0  # any id: padded positions carry no loss and no gradient


@dataclass(frozen=True)
class Blocks:
    ids: torch.Tensor  # [P, T] int64 client ids
    mask: torch.Tensor  # [P, T] bool: True at a document's real tokens
    weight: torch.Tensor  # [P] float: 1 for a document's block, 0 for a padding row

    def __len__(self) -> int:
        return self.ids.shape[0]

    def to(self, device: torch.device) -> "Blocks":
        """The same rows on `device` (the model's: they are assembled on the CPU)."""
        return Blocks(self.ids.to(device), self.mask.to(device), self.weight.to(device))


class DocumentBlocks:
    """The documents of one training set, tokenized with the model's (client) tokenizer."""

    def __init__(self, docs: Sequence[Document], tokenizer, block_len: int, fim_rate: float = 0.0):
        if block_len < 2:
            raise ConfigError(f"block_len must be >= 2, got {block_len}")
        if not 0 <= fim_rate <= 1:
            raise ConfigError(f"fim_rate must be in [0, 1], got {fim_rate}")
        self.tokenizer, self.block_len, self.fim_rate = tokenizer, block_len, fim_rate
        self.langs = [d.lang for d in docs]
        self.paths = [d.path for d in docs]
        eos = tokenizer.token_id(EOS)
        self._tail = [eos] if eos is not None else []
        self.sentinels = {s: tokenizer.token_id(s) for s in SENTINELS}
        if fim_rate > 0 and None in self.sentinels.values():
            raise ConfigError("fim_rate > 0 needs a tokenizer with the FIM sentinel tokens")
        self._ids = [np.asarray(tokenizer.encode(d.text) + self._tail, dtype=np.int64) for d in docs]

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(x) for x in self._ids], dtype=np.int64)

    def select(self, indices: Sequence[int]) -> "DocumentBlocks":
        """The same tokenized documents restricted to `indices` (no re-tokenizing)."""
        out = object.__new__(DocumentBlocks)
        out.__dict__.update(self.__dict__)
        out.langs = [self.langs[i] for i in indices]
        out.paths = [self.paths[i] for i in indices]
        out._ids = [self._ids[i] for i in indices]
        return out

    def _window(self, i: int, offset: int) -> np.ndarray:
        x = self._ids[i]
        return x[offset : offset + self.block_len]

    def _fim(self, window: np.ndarray, seed: int) -> np.ndarray:
        """The window's text cut into prefix / middle / suffix and rendered with sentinels (FimConfig's
        PSM/SPM mix), re-encoded and cut to the block length."""
        text = self.tokenizer.decode([int(t) for t in window if t not in self._tail])
        example = fim_transform(text, FimConfig(rate=1.0), np.random.default_rng(seed))
        out: list[int] = []
        for seg in render(example):
            out.extend([self.sentinels[seg]] if seg in SENTINELS else self.tokenizer.encode(seg))
        return np.asarray((out + self._tail)[: self.block_len], dtype=np.int64)

    def train_blocks(self, indices: np.ndarray, rng, rows: int | None = None) -> Blocks:
        """One block per document in `indices` (offsets, FIM draws from `rng`, a DPRandom), as `rows`
        rows (default len(indices)); rows beyond the documents are padding with weight 0."""
        n = len(indices)
        rows = n if rows is None else rows
        if rows < n:
            raise ConfigError(f"{n} documents do not fit in {rows} rows")
        lengths = np.array([len(self._ids[i]) for i in indices], dtype=np.int64)
        offsets = rng.below(np.maximum(lengths - self.block_len + 1, 1))
        fim = rng.uniform(n) < self.fim_rate
        seeds = rng.below(np.full(n, 2**62))
        windows = [self._fim(self._window(i, o), s) if f else self._window(i, o)
                   for i, o, f, s in zip(indices, offsets, fim, seeds)]
        return self._stack(windows, rows)

    def eval_blocks(self, max_blocks: int | None = None, position: float = 0.0) -> Blocks:
        """One plain window of each document (of the first `max_blocks`): at `position` of the room
        the document leaves (0 = its start, 0.5 = its middle: past license headers)."""
        if not 0.0 <= position <= 1.0:
            raise ConfigError(f"position must be in [0, 1], got {position}")
        count = len(self) if max_blocks is None else min(max_blocks, len(self))
        offsets = [int(max(0, len(self._ids[i]) - self.block_len) * position) for i in range(count)]
        return self._stack([self._window(i, o) for i, o in zip(range(count), offsets)], count)

    def tiles(self) -> tuple[Blocks, np.ndarray]:
        """Every document whole, as consecutive plain windows of `block_len` tokens (the last one
        shorter, right-padded): (blocks, doc [P] the document each row belongs to). Sum a score over
        a document's rows to score the whole document (seen in training or not, wherever the
        training windows fell)."""
        windows, doc = [], []
        for i, x in enumerate(self._ids):
            for start in range(0, len(x), self.block_len):
                windows.append(x[start : start + self.block_len])
                doc.append(i)
        return self._stack(windows, len(windows)), np.asarray(doc, dtype=np.int64)

    def _stack(self, windows: list[np.ndarray], rows: int) -> Blocks:
        """Rows assembled in numpy and handed to torch at once: the tensor operations that follow do
        not depend on the documents' lengths or count (only on `rows`)."""
        t = self.block_len
        ids = np.full((rows, t), PAD_ID, dtype=np.int64)
        mask = np.zeros((rows, t), dtype=bool)
        for r, w in enumerate(windows):
            ids[r, : len(w)] = w
            mask[r, : len(w)] = True
        weight = np.zeros(rows, dtype=np.float32)
        weight[: len(windows)] = 1.0
        return Blocks(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(weight))


def padded_rows(n: int, size: int) -> int:
    """Rows for n documents in chunks of `size`: at least one chunk (an empty draw is noised too)."""
    return max(1, -(-n // size)) * size


def split_rows(blocks: Blocks, size: int) -> list[Blocks]:
    """Chunks of exactly `size` rows (the last padded with weight-0 rows): every chunk has the same
    shape, so the operations run do not depend on which documents were sampled."""
    n = len(blocks)
    pad = padded_rows(n, size) - n
    if pad:
        t, dev = blocks.ids.shape[1], blocks.ids.device
        blocks = Blocks(torch.cat([blocks.ids, torch.full((pad, t), PAD_ID, dtype=torch.int64, device=dev)]),
                        torch.cat([blocks.mask, torch.zeros(pad, t, dtype=torch.bool, device=dev)]),
                        torch.cat([blocks.weight, torch.zeros(pad, device=dev)]))
    return [Blocks(blocks.ids[i : i + size], blocks.mask[i : i + size], blocks.weight[i : i + size])
            for i in range(0, n + pad, size)]
