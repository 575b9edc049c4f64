"""LTokenizer (NOIR §7): a secret, uniformly random permutation π of the vocabulary.

Client token ids are private ids p = π(public id). The embedding rows and LM-head rows are
permuted to match, so a model fed private ids gives the public model's logits in private-id
order; sampling happens in private space and π⁻¹ maps back before detokenizing.

π lives in memory only. It is drawn from `secrets` (Fisher–Yates over os.urandom), serialized
only to be sealed (umbra/privacy/sealed.py), and its repr never shows it."""

from __future__ import annotations

import secrets
import struct
from collections.abc import Iterable

import numpy as np
import torch
from torch import nn

from umbra.errors import ValidationError

_MAGIC = b"UMBRA-PI\x01"


class Permutation:
    """π over [0, size): `forward[public] = private`, `inverse[private] = public`."""

    def __init__(self, forward: np.ndarray):
        fwd = np.asarray(forward)
        if fwd.ndim != 1 or fwd.size < 1 or not np.issubdtype(fwd.dtype, np.integer):
            raise ValidationError("a permutation must be a non-empty 1-D integer array")
        fwd = fwd.astype(np.int64)
        inv = np.full(fwd.size, -1, dtype=np.int64)
        if fwd.min() < 0 or fwd.max() >= fwd.size:
            raise ValidationError("permutation entries out of range")
        inv[fwd] = np.arange(fwd.size)
        if (inv < 0).any():
            raise ValidationError("not a permutation (repeated entries)")
        self.forward = fwd
        self.inverse = inv
        self.forward.flags.writeable = False
        self.inverse.flags.writeable = False
        self._tensors = (torch.from_numpy(fwd.copy()), torch.from_numpy(inv.copy()))

    @classmethod
    def random(cls, size: int) -> "Permutation":
        """Uniform over all size! permutations (CSPRNG: secrets.SystemRandom)."""
        if size < 1:
            raise ValidationError("vocabulary size must be >= 1")
        ids = list(range(size))
        secrets.SystemRandom().shuffle(ids)
        return cls(np.array(ids, dtype=np.int64))

    @property
    def size(self) -> int:
        return int(self.forward.size)

    def __repr__(self) -> str:  # never print π
        return f"Permutation(size={self.size})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Permutation) and np.array_equal(self.forward, other.forward)

    __hash__ = None

    # -- ids -------------------------------------------------------------------------------
    def to_private(self, ids):
        return _map(self.forward, self._tensors[0], ids)

    def to_public(self, ids):
        return _map(self.inverse, self._tensors[1], ids)

    # -- serialization (only ever fed to the sealer) -----------------------------------------
    def to_bytes(self) -> bytes:
        return _MAGIC + struct.pack("<I", self.size) + self.forward.astype("<u4").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> "Permutation":
        head = len(_MAGIC) + 4
        if len(data) < head or not data.startswith(_MAGIC):
            raise ValidationError("not a serialized permutation")
        (size,) = struct.unpack("<I", data[len(_MAGIC) : head])
        if len(data) != head + 4 * size:
            raise ValidationError("serialized permutation has the wrong length")
        return cls(np.frombuffer(data, dtype="<u4", offset=head).astype(np.int64))


def _map(table: np.ndarray, tensor: torch.Tensor, ids):
    """Map ids through `table`, keeping the container type (int, list, tuple, ndarray, tensor)."""
    n = table.size
    if isinstance(ids, torch.Tensor):
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
            raise ValidationError(f"token id out of range [0, {n})")
        return tensor.to(ids.device)[ids.long()].to(ids.dtype)
    if isinstance(ids, np.ndarray):
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise ValidationError(f"token id out of range [0, {n})")
        return table[ids]
    if isinstance(ids, (int, np.integer)):
        if not 0 <= ids < n:
            raise ValidationError(f"token id {ids} out of range [0, {n})")
        return int(table[ids])
    seq = [int(i) for i in ids]
    if any(not 0 <= i < n for i in seq):
        raise ValidationError(f"token id out of range [0, {n})")
    mapped = [int(table[i]) for i in seq]
    return tuple(mapped) if isinstance(ids, tuple) else mapped


# -- model rows ------------------------------------------------------------------------------
def _check_rows(weight: torch.Tensor, perm: Permutation, what: str) -> None:
    if weight.shape[0] != perm.size:
        raise ValidationError(f"{what} has {weight.shape[0]} rows but the permutation covers {perm.size} ids")


@torch.no_grad()
def _reorder_(param: nn.Parameter, index: torch.Tensor) -> None:
    """In place (same Parameter object, so optimizers holding it stay valid)."""
    param.copy_(param[index.to(param.device)])


def to_private_order_(encoder: nn.Module, decoder: nn.Module, perm: Permutation) -> None:
    """Public-order → private-order rows: row p of the embedding / LM head becomes public row
    π⁻¹(p). Afterwards encoder(private ids) and decoder(...)[..., p] match the public model's
    encoder(public ids) and logits[..., π⁻¹(p)]."""
    _check_rows(encoder.embed_tokens.weight, perm, "the embedding")
    _check_rows(decoder.lm_head.weight, perm, "the LM head")
    _reorder_(encoder.embed_tokens.weight, perm._tensors[1])
    _reorder_(decoder.lm_head.weight, perm._tensors[1])


def to_public_order_(encoder: nn.Module, decoder: nn.Module, perm: Permutation) -> None:
    """The inverse of to_private_order_ (row u becomes private row π(u))."""
    _check_rows(encoder.embed_tokens.weight, perm, "the embedding")
    _check_rows(decoder.lm_head.weight, perm, "the LM head")
    _reorder_(encoder.embed_tokens.weight, perm._tensors[0])
    _reorder_(decoder.lm_head.weight, perm._tensors[0])


def private_rows(weight: torch.Tensor, perm: Permutation) -> torch.Tensor:
    """A private-order copy of a vocab-indexed [V, ...] tensor."""
    _check_rows(weight, perm, "the tensor")
    return weight[perm._tensors[1].to(weight.device)]


def public_rows(weight: torch.Tensor, perm: Permutation) -> torch.Tensor:
    """A public-order copy of a private-order [V, ...] tensor."""
    _check_rows(weight, perm, "the tensor")
    return weight[perm._tensors[0].to(weight.device)]


# -- tokenizer ---------------------------------------------------------------------------------
class PrivateTokenizer:
    """Wraps any public tokenizer (encode(text) -> list[int], decode(ids) -> str) so every id it
    hands out or takes is private.

    Besides encode/decode it maps, by naming convention, attributes of the wrapped object:
    `*_id` (int or None) and `*_ids` (collections of ints) come back in private space, as do
    the results of `token_id(token)` and `encode_with_offsets(text)`. `size`, `vocab_size` and
    `has_tokens` pass through. Anything else raises AttributeError rather than risk handing out
    a public id."""

    _PASSTHROUGH = frozenset({"size", "vocab_size", "has_tokens"})

    def __init__(self, public, perm: Permutation):
        for name in ("encode", "decode"):
            if not callable(getattr(public, name, None)):
                raise ValidationError(f"the public tokenizer has no {name}() method")
        self._public = public
        self._perm = perm

    @property
    def permutation(self) -> Permutation:
        return self._perm

    def __repr__(self) -> str:
        return f"PrivateTokenizer({type(self._public).__name__}, vocab={self._perm.size})"

    def encode(self, text: str) -> list[int]:
        return self._perm.to_private(list(self._public.encode(text)))

    def decode(self, ids: Iterable[int]) -> str:
        return self._public.decode(self._perm.to_public(list(ids)))

    def encode_with_offsets(self, text: str):
        ids, offsets = self._public.encode_with_offsets(text)
        return self._perm.to_private(list(ids)), offsets

    def token_id(self, token: str) -> int | None:
        public_id = self._public.token_id(token)
        return None if public_id is None else self._perm.to_private(public_id)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        value = getattr(self._public, name)
        if name in self._PASSTHROUGH:
            return value
        if name.endswith("_id") and (value is None or isinstance(value, (int, np.integer))):
            return None if value is None else self._perm.to_private(int(value))
        if name.endswith("_ids") and isinstance(value, (list, tuple, set, frozenset)):
            mapped = self._perm.to_private([int(v) for v in value])
            return type(value)(mapped) if not isinstance(value, list) else mapped
        raise AttributeError(f"PrivateTokenizer does not forward {name!r}: it could carry public ids")
