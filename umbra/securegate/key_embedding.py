"""The access key's embedding: HMAC-SHA256 of the key → a CSPRNG seed → a Gaussian vector
(seed 003 App. D uses an MD5 digest averaged over the key set as the seed; DESIGN §4 asks for
better). The vector stands at position 0 of the gating pass, in place of a token embedding: it is
never a row of the tokenizer or the embedding table, never written anywhere, never sent.

    e_key = σ · z,   z ~ N(0, I_C) drawn from KeystreamRNG(HMAC-SHA256(len(secret) | secret, context)),
    context = "umbra/securegate/key-embedding/v1" | 0x00 | bundle_id

The HMAC key is length-prefixed (2 bytes, big-endian) because HMAC pads short keys with zeros:
without the prefix, a key and the same key with trailing zero bytes would give one embedding.

HMAC is a PRF keyed by the secret, so any other byte string — a typo, a truncation, a key of
another bundle, the empty key — gives an independent Gaussian draw: the gate must single out the
valid keys' points from that cloud, and nothing about a key can be learned from its embedding
without the secret. σ is the client embedding table's standard deviation, so the key position
looks, in scale, like any token to the encoder blocks."""

from __future__ import annotations

import hashlib
import hmac

import numpy as np
import torch

from umbra.privacy.csprng import KeystreamRNG

CONTEXT = b"umbra/securegate/key-embedding/v1\x00"


def key_seed(secret: bytes, bundle_id: str) -> bytes:
    """HMAC-SHA256 of the bundle context under the key (32 bytes; a key-derived secret)."""
    secret = bytes(secret)
    return hmac.new(len(secret).to_bytes(2, "big") + secret, CONTEXT + bundle_id.encode("utf-8"), hashlib.sha256).digest()


def gaussian(seed: bytes, dim: int) -> np.ndarray:
    """dim standard normal draws (float64) from a CSPRNG stream seeded by `seed` (Box–Muller)."""
    return KeystreamRNG(seed).normal(dim)


def key_embedding(secret: bytes, bundle_id: str, dim: int, scale: float,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The key's embedding [C]."""
    return torch.from_numpy(gaussian(key_seed(secret, bundle_id), dim) * float(scale)).to(dtype)


def key_embeddings(secrets_: list[bytes], bundle_id: str, dim: int, scale: float,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Embeddings [N, C] of several keys (an empty list gives [0, C])."""
    if not secrets_:
        return torch.zeros(0, dim, dtype=dtype)
    return torch.stack([key_embedding(s, bundle_id, dim, scale, dtype) for s in secrets_])
