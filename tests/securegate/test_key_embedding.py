"""The key embedding (umbra/securegate/key_embedding.py): deterministic per (secret, bundle),
an independent standard-normal draw for any other byte string (one bit flipped, a trailing zero
byte, another bundle, the empty key), and scaled by σ."""

from __future__ import annotations

import hashlib
import hmac
import math

import numpy as np
import pytest
import torch

from umbra.securegate.key_embedding import CONTEXT, gaussian, key_embedding, key_embeddings, key_seed

DIM = 8192  # correlation of two independent draws: std 1/sqrt(DIM) ≈ 0.011
BUNDLE = "bundle0123456789"
SECRET = bytes(range(1, 33))  # fixed: these tests are deterministic


def _corr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    return float((a @ b) / (a.norm() * b.norm()))


def test_deterministic_per_secret_and_bundle():
    a = key_embedding(SECRET, BUNDLE, DIM, 1.0)
    assert a.shape == (DIM,) and a.dtype == torch.float32
    assert torch.equal(a, key_embedding(bytes(SECRET), BUNDLE, DIM, 1.0))
    assert torch.equal(a, key_embedding(bytearray(SECRET), BUNDLE, DIM, 1.0))
    assert key_seed(SECRET, BUNDLE) == key_seed(SECRET, BUNDLE) and len(key_seed(SECRET, BUNDLE)) == 32
    # the seed is HMAC-SHA256 under the length-prefixed key over the context and the bundle id
    assert key_seed(SECRET, BUNDLE) == hmac.new(b"\x00\x20" + SECRET, CONTEXT + BUNDLE.encode(), hashlib.sha256).digest()
    many = key_embeddings([SECRET, b"other", b""], BUNDLE, 16, 2.0)
    assert many.shape == (3, 16) and torch.equal(many[0], key_embedding(SECRET, BUNDLE, 16, 2.0))
    assert key_embeddings([], BUNDLE, 16, 1.0).shape == (0, 16)


def _variants() -> dict[str, tuple[bytes, str]]:
    flipped_first = bytes([SECRET[0] ^ 1]) + SECRET[1:]
    flipped_last = SECRET[:-1] + bytes([SECRET[-1] ^ 0x80])
    return {
        "one bit (first byte)": (flipped_first, BUNDLE),
        "one bit (last byte)": (flipped_last, BUNDLE),
        "trailing zero byte": (SECRET + b"\x00", BUNDLE),
        "two trailing zero bytes": (SECRET + b"\x00\x00", BUNDLE),
        "truncated": (SECRET[:-1], BUNDLE),
        "another bundle": (SECRET, "bundle0123456788"),
        "bundle id with a NUL appended": (SECRET, BUNDLE + "\x00"),
        "empty key": (b"", BUNDLE),
        "zero key of the same length": (bytes(32), BUNDLE),
    }


@pytest.mark.parametrize("what", list(_variants()))
def test_any_other_input_is_an_independent_draw(what):
    secret, bundle = _variants()[what]
    base = key_embedding(SECRET, BUNDLE, DIM, 1.0)
    other = key_embedding(secret, bundle, DIM, 1.0)
    assert key_seed(secret, bundle) != key_seed(SECRET, BUNDLE)
    assert abs(_corr(base, other)) < 0.05, what  # > 4σ of two independent draws
    assert not torch.equal(base, other)


def test_the_hmac_key_is_length_prefixed_because_hmac_pads_short_keys():
    """Without the prefix, a key and the same key with trailing zero bytes are one HMAC key."""
    plain = lambda k: hmac.new(k, CONTEXT + BUNDLE.encode(), hashlib.sha256).digest()  # noqa: E731
    assert plain(SECRET) == plain(SECRET + b"\x00")  # the collision the prefix exists for
    assert plain(b"") == plain(b"\x00")
    assert key_seed(SECRET, BUNDLE) != key_seed(SECRET + b"\x00", BUNDLE)
    assert key_seed(b"", BUNDLE) != key_seed(b"\x00", BUNDLE)
    # a key longer than the SHA-256 block is hashed by HMAC: still a distinct, working key
    long = bytes(range(256)) * 2
    assert key_seed(long, BUNDLE) != key_seed(long[:-1], BUNDLE)
    assert key_seed(long, BUNDLE) != key_seed(long + b"\x00", BUNDLE)


def test_standard_normal_statistics():
    """Over many keys the embeddings are N(0, 1) draws: mean, std, tails, a KS distance, and no
    correlation between coordinates of one key or between keys."""
    keys = [hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(400)]
    x = key_embeddings(keys, BUNDLE, 512, 1.0).double().numpy()  # 204800 draws
    flat = x.ravel()
    n = flat.size
    assert abs(flat.mean()) < 5 / math.sqrt(n)
    assert abs(flat.std() - 1) < 0.01
    assert abs(np.mean(np.abs(flat) < 1) - 0.682689) < 0.005
    assert abs(np.mean(np.abs(flat) > 3) - 0.0026998) < 0.0008
    assert abs(np.mean(flat ** 3)) < 0.03 and abs(np.mean(flat ** 4) - 3) < 0.1  # skew 0, kurtosis 3
    s = np.sort(flat)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(s / math.sqrt(2)))
    ks = max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n))
    assert ks < 1.63 / math.sqrt(n)  # Kolmogorov–Smirnov at the 1 % level
    # per coordinate: each column is N(0, 1) across keys (no fixed offset in any dimension)
    assert np.abs(x.mean(0)).max() < 5 / math.sqrt(len(keys))
    # coordinates of one key and different keys are uncorrelated
    c = np.corrcoef(x)  # keys x keys
    off = c[~np.eye(len(keys), dtype=bool)]
    assert np.abs(off).max() < 6 / math.sqrt(512)
    assert abs(np.corrcoef(x[:, :-1].ravel(), x[:, 1:].ravel())[0, 1]) < 0.01
    # an odd dimension: the Box–Muller pairs are cut, not padded
    g = gaussian(keys[0], 7)
    assert g.shape == (7,) and np.isfinite(g).all()


def test_scale_is_applied():
    unit = key_embedding(SECRET, BUNDLE, 1024, 1.0)
    for scale in (0.02, 0.37, 3.0):
        scaled = key_embedding(SECRET, BUNDLE, 1024, scale)
        assert torch.allclose(scaled, unit * scale, rtol=1e-6, atol=0)
        assert abs(float(scaled.std()) - scale) < 0.1 * scale
    assert key_embedding(SECRET, BUNDLE, 8, 1.0, dtype=torch.bfloat16).dtype == torch.bfloat16


def test_the_gate_scale_is_the_embedding_table_std(sg_base):
    """KeyEncoder uses σ = std of the client embedding table: the key position looks, in scale,
    like a token."""
    from umbra.engine import ClientModel
    from umbra.securegate.gate import KeyEncoder

    model = ClientModel.load(sg_base)
    enc = KeyEncoder(model.encoder, BUNDLE)
    table = model.encoder.embed_tokens.weight.detach().float()
    assert enc.scale == pytest.approx(float(table.std()))
    assert enc.dim == table.shape[1]
    e = key_embedding(SECRET, BUNDLE, enc.dim, enc.scale)
    assert torch.allclose(key_embedding(SECRET, BUNDLE, enc.dim, 1.0) * enc.scale, e, rtol=1e-6, atol=0)
    # never a row of the embedding table
    assert torch.cdist(e[None], table).min() > 1e-3
