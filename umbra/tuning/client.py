"""What STuning trains: a client's encoder and decoder and the id space they work in.

`tune()` takes anything with `encoder`, `decoder` and `permutation` — a loaded ClientBundle
(π applies), or a `TuneClient`:

    clean_client(base_dir)                   NOIR's fClean reference: the public embedding table,
                                             public ids (no INDVocab, no LTokenizer)
    defended_client(base_dir, epsilon, ...)  the bundle's defences built in memory with the same
                                             functions `umbra init` uses (INDVocab.randomize,
                                             Permutation.random, to_private_order_), for
                                             benchmarks that need many ε without a keyring

Trainable by default: the client blocks, the final norm and the LM head; the embedding table
(INDVocab) only with `train_embedding`; and a private local path's projection W when the client
has one (`private_path`, attached by umbra/tuning/private_path.py or loaded with a bundle)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from umbra.model.loader import load_client
from umbra.model.parts import ClientDecoder, ClientEncoder, SplitPlan
from umbra.model.private_path import PrivatePath
from umbra.model.spec import load_spec
from umbra.privacy.indvocab import INDVocab, INDVocabConfig
from umbra.privacy.ltokenizer import Permutation, public_rows, to_private_order_

EMBEDDING = "encoder.embed_tokens.weight"
LM_HEAD = "decoder.lm_head.weight"
VOCAB_INDEXED = frozenset({EMBEDDING, LM_HEAD})  # rows in private order in memory, public on disk


class Tunable(Protocol):
    encoder: ClientEncoder
    decoder: ClientDecoder
    permutation: Permutation | None  # None: ids are public


@dataclass(eq=False)
class TuneClient:
    encoder: ClientEncoder
    decoder: ClientDecoder
    permutation: Permutation | None = field(default=None, repr=False)
    private_path: PrivatePath | None = field(default=None, repr=False)  # umbra/tuning/private_path.py


def clean_client(base_dir: str | Path, plan: SplitPlan | None = None) -> TuneClient:
    """fClean: the base model's own client parts in public id space."""
    encoder, decoder = load_client(base_dir, plan)
    return TuneClient(encoder, decoder, None)


def defended_client(base_dir: str | Path, epsilon: float, h: float = 0.25, plan: SplitPlan | None = None,
                    seed: bytes | int | None = None) -> TuneClient:
    """INDVocab table at `epsilon` + a fresh uniform π, rows in private order (in memory only)."""
    encoder, decoder = load_client(base_dir, plan)
    with torch.no_grad():
        table = INDVocab(INDVocabConfig(epsilon, h)).randomize(encoder.embed_tokens.weight, seed)
        encoder.embed_tokens.weight.copy_(table)
    perm = Permutation.random(load_spec(base_dir).vocab_size)
    to_private_order_(encoder, decoder, perm)
    return TuneClient(encoder, decoder, perm)


def named_parameters(client: Tunable) -> dict[str, nn.Parameter]:
    """Every client parameter under a stable name ("encoder.…" / "decoder.…")."""
    params = {f"encoder.{k}": p for k, p in client.encoder.named_parameters()}
    params.update({f"decoder.{k}": p for k, p in client.decoder.named_parameters()})
    path = getattr(client, "private_path", None)
    if path is not None:
        params.update({f"private_path.{k}": p for k, p in path.named_parameters()})
    return params


def select_trainable(client: Tunable, train_embedding: bool) -> dict[str, nn.Parameter]:
    """Set requires_grad on exactly the trained parameters; return them by name, in a fixed order."""
    trainable = {}
    for name, p in named_parameters(client).items():
        p.requires_grad_(name != EMBEDDING or train_embedding)
        if p.requires_grad:
            trainable[name] = p
    return trainable


def public_copy(name: str, tensor: torch.Tensor, perm: Permutation | None) -> torch.Tensor:
    """A copy safe to write: vocab-indexed tensors back in public row order."""
    t = tensor.detach()
    if name in VOCAB_INDEXED and perm is not None:
        return public_rows(t, perm).clone()
    return t.clone()


def fingerprint(client: Tunable) -> str:
    """sha256 of the embedding table in public order: names the client without revealing π."""
    table = public_copy(EMBEDDING, client.encoder.embed_tokens.weight, client.permutation)
    return hashlib.sha256(table.float().cpu().contiguous().numpy().tobytes()).hexdigest()


def describe(client: Tunable) -> str:
    kind = "public ids (fClean)" if client.permutation is None else "private ids (π)"
    n = sum(p.numel() for p in named_parameters(client).values())
    return f"client of {n:,} parameters over {kind}"


