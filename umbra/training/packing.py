"""Deterministic packed training stream: documents -> FIM -> tokens + <|endoftext|> -> blocks.

Epoch `e` is a pure function of (seed, e, corpus, tokenizer, FIM config): documents are
permuted by a generator seeded with (seed, e), each document's FIM draws use a generator
seeded with (seed, e, document index), and the concatenated token stream is cut into
`context_length` blocks (the incomplete tail is dropped), and the blocks are shuffled with a
generator seeded by (seed, e, 1) so that a batch mixes many files instead of one file's
consecutive blocks. The data position is (epoch, block),
which the checkpoint stores, so a resumed run sees exactly the same batches.

With a RepoConfig of positive rate, part of the documents are first grouped into multi-file
repository-level units (repo_units.py; seeded by (seed, e, 2)) that take one slot in the
permutation; a stream without them is unchanged (same fingerprint, same tokens)."""

from __future__ import annotations

import hashlib
import io
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from umbra.atomic import write_atomic
from umbra.data.corpus import Document
from umbra.data.tokenizer import EOS
from umbra.errors import ConfigError
from umbra.training.config import FimConfig, RepoConfig
from umbra.training.fim import SENTINELS
from umbra.training.repo_units import directory_groups, epoch_items, render_item

log = logging.getLogger(__name__)

_CHUNK_DOCS = 1_000  # documents tokenized per batch call (bounds memory of Encoding objects)
_LAYOUT = b"blocks-shuffled-v2"  # bump when the epoch layout changes (invalidates cached epochs)

def load_raw_tokenizer(tokenizer_dir: Path) -> Tokenizer:
    path = tokenizer_dir / "tokenizer.json"
    if not path.exists():
        raise ConfigError(f"no tokenizer at {tokenizer_dir}; run `umbra data tokenizer`")
    tok = Tokenizer.from_file(str(path))
    tok.encode_special_tokens = True  # special-token strings inside code are plain text
    return tok

def encode_documents(tok: Tokenizer, segments_per_doc: list[list[str]],
                     sentinels: frozenset[str] = SENTINELS) -> np.ndarray:
    """Token ids of the documents, each followed by <|endoftext|>, as one uint16 array;
    segments equal to one of `sentinels` become that special token's id."""
    ids_of = {s: tok.token_to_id(s) for s in (*sentinels, EOS)}
    missing = sorted(s for s, i in ids_of.items() if i is None)
    if missing:
        raise ConfigError(f"the tokenizer lacks the special tokens {missing}")
    texts = [s for segs in segments_per_doc for s in segs if s not in sentinels and s]
    encoded = iter(tok.encode_batch(texts, add_special_tokens=False)) if texts else iter(())
    out: list[int] = []
    for segs in segments_per_doc:
        for s in segs:
            if s in sentinels:
                out.append(ids_of[s])
            elif s:
                out.extend(next(encoded).ids)
        out.append(ids_of[EOS])
    return np.asarray(out, dtype=np.uint16)

def blocks_of(stream: np.ndarray, context_length: int) -> np.ndarray:
    """Cut a token stream into full blocks of shape (n, context_length)."""
    n = len(stream) // context_length
    return stream[: n * context_length].reshape(n, context_length)

@dataclass(frozen=True)
class StreamSpec:
    seed: int
    context_length: int
    fim: FimConfig
    repo: RepoConfig | None = None  # repository-level units (None or rate 0: single documents only)

class PackedStream:
    """Training batches addressed by (epoch, block); epochs are cached in memory and on disk."""

    def __init__(self, docs: list[Document], tok: Tokenizer, spec: StreamSpec, cache_dir: Path | None):
        if not docs:
            raise ConfigError("the training split is empty")
        self.docs = docs
        self.tok = tok
        self.spec = spec
        self.cache_dir = cache_dir
        self._epoch: int | None = None
        self._blocks: np.ndarray | None = None
        repo = spec.repo if spec.repo is not None and spec.repo.rate > 0 else None
        self.repo = repo
        self.groups = directory_groups(docs, repo.max_unit_chars) if repo else []
        self.sentinels = SENTINELS | {repo.file_sep} if repo else SENTINELS
        self.fingerprint = self._fingerprint()

    def _fingerprint(self) -> str:
        h = hashlib.sha256(_LAYOUT)
        spec = asdict(self.spec)
        if self.repo is None:
            spec.pop("repo")  # streams without repo units keep their fingerprint (and caches)
        h.update(json.dumps(spec, sort_keys=True).encode())
        h.update(self.tok.to_str().encode())
        for d in self.docs:
            h.update(d.path.encode() + b"\0" + hashlib.sha256(d.text.encode()).digest())
        return h.hexdigest()[:16]

    def epoch_tokens(self, epoch: int) -> np.ndarray:
        """The full token stream of one epoch (deterministic)."""
        items = epoch_items(self.docs, self.groups, self.repo, self.spec.seed, epoch)
        file_sep = self.repo.file_sep if self.repo else ""
        parts = []
        for start in range(0, len(items), _CHUNK_DOCS):
            segments = []
            for item in items[start:start + _CHUNK_DOCS]:
                # FIM draws are seeded by the item's last document (a single document: itself)
                rng = np.random.default_rng([self.spec.seed, epoch, item[-1]])
                segments.append(render_item(self.docs, item, self.spec.fim, file_sep, rng))
            parts.append(encode_documents(self.tok, segments, self.sentinels))
        return np.concatenate(parts)

    def epoch_blocks(self, epoch: int) -> np.ndarray:
        if self._epoch == epoch and self._blocks is not None:
            return self._blocks
        cached = self.cache_dir / f"epoch{epoch}-{self.fingerprint}.npy" if self.cache_dir else None
        if cached is not None and cached.exists():
            blocks = np.load(cached)
        else:
            log.info("tokenizing epoch %d", epoch)
            blocks = blocks_of(self.epoch_tokens(epoch), self.spec.context_length)
            blocks = blocks[np.random.default_rng([self.spec.seed, epoch, 1]).permutation(len(blocks))]
            if cached is not None:
                cached.parent.mkdir(parents=True, exist_ok=True)
                buf = io.BytesIO()
                np.save(buf, blocks)
                write_atomic(cached, buf.getvalue(), 0o644)  # runs in parallel may share the cache
        if len(blocks) == 0:
            raise ConfigError("the training split is shorter than one block")
        self._epoch, self._blocks = epoch, blocks
        return blocks

    def batch(self, epoch: int, block: int, batch_size: int) -> tuple[np.ndarray, int, int]:
        """Blocks for the batch at (epoch, block) and the position after it.

        A batch never straddles epochs: an epoch's tail shorter than a batch is skipped."""
        blocks = self.epoch_blocks(epoch)
        if block + batch_size > len(blocks):
            epoch, block = epoch + 1, 0
            blocks = self.epoch_blocks(epoch)
            if batch_size > len(blocks):
                raise ConfigError(f"batch_size {batch_size} exceeds the {len(blocks)} blocks of an epoch")
        return blocks[block:block + batch_size], epoch, block + batch_size

def eval_blocks(docs: list[Document], tok: Tokenizer, context_length: int, max_tokens: int) -> np.ndarray:
    """Plain (non-FIM) validation blocks of one language, in path order, up to `max_tokens`."""
    stream = encode_documents(tok, [[d.text] for d in sorted(docs, key=lambda d: d.path)])
    return blocks_of(stream[:max_tokens], context_length)
