"""What the cloud knows without the client: the PUBLIC base model (all of it — embedding,
every block, final norm, head), its public tokenizer, and public code.

Never π, never the client's randomized table or tuned blocks. Every attack builds on this."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from umbra.data.corpus import LANGS, read_documents
from umbra.engine.tokenizer import ClientTokenizer
from umbra.errors import ConfigError
from umbra.model.loader import Checkpoint, load_part
from umbra.model.parts import ClientDecoder, ClientEncoder, MiddleBlocks, SplitPlan
from umbra.model.spec import ModelSpec, load_spec


@dataclass(frozen=True)
class CorpusSample:
    corpus_dir: Path  # data/corpus
    split: str = "train"  # the attacker's public code: the training split
    langs: tuple[str, ...] = LANGS
    block_length: int = 128  # tokens per block
    blocks: int = 256  # blocks to draw
    seed: int = 0
    per_document: int = 4  # at most this many blocks from one document (variety)


class PublicModel:
    """The public split model at the client's split point, in float32, frozen."""

    def __init__(self, model_dir: str | Path, plan: SplitPlan | None = None):
        self.dir = Path(model_dir)
        self.spec: ModelSpec = load_spec(self.dir)
        self.plan = plan or SplitPlan.default(self.spec.num_layers)
        ckpt = Checkpoint(self.dir)
        part = lambda name: load_part(self.dir, name, self.plan, torch.float32, self.spec, ckpt)  # noqa: E731
        self.encoder: ClientEncoder = part("encoder")
        self.middle: MiddleBlocks = part("middle")
        self.decoder: ClientDecoder = part("decoder")
        self.tokenizer = ClientTokenizer.from_dir(self.dir)
        self.fingerprint = _fingerprint(self.dir, self.plan)
        self._isolated: torch.Tensor | None = None

    @property
    def vocab_size(self) -> int:
        return self.spec.vocab_size

    @property
    def text_ids(self) -> torch.Tensor:
        """bool [V]: ids that stand for text (not specials, not padding past the tokenizer)."""
        mask = torch.zeros(self.vocab_size, dtype=torch.bool)
        mask[: min(self.tokenizer.size, self.vocab_size)] = True
        special = [i for i in self.tokenizer.special_ids if i < self.vocab_size]
        mask[special] = False
        return mask

    @torch.no_grad()
    def states(self, ids: torch.Tensor, batch: int = 16) -> torch.Tensor:
        """Public split-layer states (encoder output) of public ids [N,T] at positions 0..T-1."""
        out = []
        for i in range(0, ids.shape[0], batch):
            x = ids[i : i + batch]
            pos = torch.arange(x.shape[1])[None].expand(x.shape[0], -1)
            out.append(self.encoder(x, pos))
        return torch.cat(out, 0)

    @torch.no_grad()
    def isolated_states(self) -> torch.Tensor:
        """[V,C]: the split-layer state of every vocabulary token alone at position 0."""
        if self._isolated is None:
            ids = torch.arange(self.vocab_size)[:, None]
            self._isolated = self.states(ids, batch=1024)[:, 0]
        return self._isolated

    @torch.no_grad()
    def logits(self, hidden: torch.Tensor, positions: torch.Tensor, middle_output: torch.Tensor | None = None):
        """Public middle (unless its output is given) + public decoder + head: [T,C] -> [T,V]."""
        pos = positions[None]
        m = self.middle(hidden[None], pos) if middle_output is None else middle_output[None]
        return self.decoder(m, pos)[0]

    def decode(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids if 0 <= int(i) < self.tokenizer.size])

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    # -- public code ------------------------------------------------------------------------------
    def sample_blocks(self, sample: CorpusSample) -> np.ndarray:
        """[blocks, block_length] public ids cut from random documents of a corpus split."""
        docs = [d for lang in sample.langs for d in _docs(sample.corpus_dir, sample.split, lang)]
        if not docs:
            raise ConfigError(f"no documents in {sample.corpus_dir}/{sample.split}")
        rng = random.Random(sample.seed)
        rng.shuffle(docs)
        out: list[np.ndarray] = []
        for text in docs:
            ids = self.encode(text[: 8 * sample.per_document * sample.block_length])  # enough characters
            starts = range(0, len(ids) - sample.block_length + 1, sample.block_length)
            for s in list(starts)[: sample.per_document]:
                out.append(np.asarray(ids[s : s + sample.block_length], dtype=np.int64))
                if len(out) == sample.blocks:
                    return np.stack(out)
        if not out:
            raise ConfigError(f"no document in {sample.corpus_dir}/{sample.split} has {sample.block_length} tokens")
        return np.stack(out)

    def frequencies(self, blocks: np.ndarray) -> np.ndarray:
        """Unigram counts [V] of public ids."""
        return np.bincount(blocks.ravel(), minlength=self.vocab_size)[: self.vocab_size]


def _docs(corpus_dir: Path, split: str, lang: str) -> list[str]:
    try:
        return [d.text for d in read_documents(Path(corpus_dir), split, lang)]
    except ConfigError:
        return []


def _fingerprint(model_dir: Path, plan: SplitPlan) -> str:
    """Short id of (weights, split) for caches: hashes of the safetensors files' sizes and heads."""
    h = hashlib.sha256(f"{plan.encoder_blocks}/{plan.decoder_blocks}".encode())
    for p in sorted(model_dir.glob("*.safetensors")):
        h.update(p.name.encode())
        h.update(str(p.stat().st_size).encode())
        with open(p, "rb") as f:
            h.update(f.read(1 << 20))
            f.seek(max(0, p.stat().st_size - (1 << 20)))
            h.update(f.read())
    return h.hexdigest()[:16]
