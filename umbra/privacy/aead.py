"""Sealed blobs: AES-256-GCM under a key derived with HKDF-SHA256 from a keyring secret.

    blob = seal(plain, secret, info, magic, {"bundle_id": ..., ...})
    header, plain = open_sealed(blob, secret, info, magic)      # SealError on any mismatch

Layout: MAGIC | header length (uint32 LE) | header (JSON) | ciphertext + 16-byte GCM tag. The
header carries the caller's public fields plus a fresh 16-byte HKDF salt and 12-byte nonce, and
the whole prefix is authenticated as associated data, so a header edited on disk fails the tag.
`info` is the HKDF context: it binds the derived AES key to what it protects (the permutation of
one bundle, or one revealing adapter of one bundle under one access key), so the same secret
never encrypts two kinds of thing under one key. The raw secret is never used as a cipher key.

Used by the bundle's permutation (sealed.py) and SecureGate's revealing adapters
(umbra/securegate/sealing.py)."""

from __future__ import annotations

import json
import secrets
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from umbra.errors import ConfigError

ALGORITHM = {"alg": "AES-256-GCM", "kdf": "HKDF-SHA256"}


class SealError(ConfigError):
    """A sealed blob that is malformed, or that this secret and context do not open."""


def derive_key(secret: bytes, salt: bytes, info: bytes) -> bytes:
    """The 32-byte AES key for `secret` under `salt` and context `info`."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(secret)


def seal(plain: bytes, secret: bytes, info: bytes, magic: bytes, fields: dict) -> bytes:
    salt, nonce = secrets.token_bytes(16), secrets.token_bytes(12)
    header = json.dumps({"v": 1, **ALGORITHM, **fields, "salt": salt.hex(), "nonce": nonce.hex()},
                        sort_keys=True).encode()
    prefix = magic + struct.pack("<I", len(header)) + header
    return prefix + AESGCM(derive_key(secret, salt, info)).encrypt(nonce, plain, prefix)


def read_header(blob: bytes, magic: bytes, what: str = "sealed blob") -> tuple[dict, bytes, bytes]:
    """(header, authenticated prefix, ciphertext); SealError if the framing is wrong."""
    head = len(magic) + 4
    if len(blob) < head or not blob.startswith(magic):
        raise SealError(f"not a {what} (bad magic)")
    (n,) = struct.unpack("<I", blob[len(magic):head])
    if head + n > len(blob):
        raise SealError(f"{what} is truncated")
    try:
        header = json.loads(blob[head:head + n])
        if not isinstance(header, dict):
            raise TypeError("header is not an object")
        bytes.fromhex(header["salt"]), bytes.fromhex(header["nonce"])
    except (ValueError, KeyError, TypeError) as exc:
        raise SealError(f"{what} has a malformed header") from exc
    return header, blob[:head + n], blob[head + n:]


def open_sealed(blob: bytes, secret: bytes, info: bytes, magic: bytes, what: str = "sealed blob") -> tuple[dict, bytes]:
    """(header, plaintext). SealError when the blob is malformed, truncated, tampered with, or the
    secret or context is not the one it was sealed under (one message for all of these)."""
    try:
        header, prefix, ciphertext = read_header(blob, magic, what)  # framing errors too: no oracle on which
        plain = AESGCM(derive_key(secret, bytes.fromhex(header["salt"]), info)).decrypt(
            bytes.fromhex(header["nonce"]), ciphertext, prefix)
    except (SealError, InvalidTag, ValueError) as exc:
        raise SealError(f"the {what} cannot be decrypted: wrong key or tampered file") from exc
    return header, plain
