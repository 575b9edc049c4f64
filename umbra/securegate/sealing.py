"""Revealing adapters at rest: AES-256-GCM under a key derived with HKDF from the access key,
in the context (bundle, adapter, key id) — the sealed-blob format of umbra/privacy/aead.py.

    blob = seal_adapter(plain, key, "team-a")        # plain: the adapter's safetensors bytes
    plain = open_adapter(blob, key, "team-a")        # SealError: wrong key, wrong context, tampered

One ciphertext per access key: several keys may open the same adapter, each through its own
file, so revoking one key deletes its file and leaves the others' working. A ciphertext stays
readable with the key it was sealed under: copies of an old file are not protected by rotation
(docs/securegate.md). Decrypted adapters live only in memory."""

from __future__ import annotations

from keys.access_keys import AccessKey
from umbra.privacy.aead import SealError, open_sealed, read_header, seal

MAGIC = b"UMBRA-RA\x01"
_WHAT = "sealed revealing adapter"


def _info(bundle_id: str, adapter: str, key_id: str) -> bytes:
    return b"\x00".join([b"umbra/securegate/revealing-adapter/v1", bundle_id.encode(), adapter.encode(), key_id.encode()])


def seal_adapter(plain: bytes, key: AccessKey, adapter: str) -> bytes:
    fields = {"bundle_id": key.bundle_id, "adapter": adapter, "key_id": key.key_id}
    return seal(plain, key.secret, _info(key.bundle_id, adapter, key.key_id), MAGIC, fields)


def open_adapter(blob: bytes, key: AccessKey, adapter: str) -> bytes:
    """The adapter's plaintext bytes. The context comes from the caller (the manifest), not the
    file's header, so a file moved to another adapter or key slot fails like a wrong key."""
    header, plain = open_sealed(blob, key.secret, _info(key.bundle_id, adapter, key.key_id), MAGIC, _WHAT)
    if (header.get("bundle_id"), header.get("adapter"), header.get("key_id")) != (key.bundle_id, adapter, key.key_id):
        raise SealError(f"the {_WHAT} cannot be decrypted: wrong key or tampered file")
    return plain


def sealed_fields(blob: bytes) -> dict:
    """The public header of a sealed adapter (bundle, adapter, key id): no secret."""
    return read_header(blob, MAGIC, _WHAT)[0]
