"""The bundle's permutation at rest: AES-256-GCM under a key that lives only in the OS keyring.

File `permutation.sealed` (the sealed-blob format of aead.py):

    MAGIC (9 bytes) | header length (uint32 LE) | header (JSON) | ciphertext + 16-byte GCM tag

The header names the bundle and the key generation (`key_id`), the HKDF salt and the GCM nonce;
it is authenticated as associated data. The keyring holds 32 random bytes under the entry
`bundle/<bundle_id>/<key_id>`; the AES key is HKDF-SHA256(that, salt, info) so the raw keyring
secret is never used directly as a cipher key.

Rotation is crash-safe because every key generation has its own keyring entry: (1) the new key
goes into the keyring, (2) the new ciphertext is written to a temp file, fsynced and renamed over
the old one (the directory fsynced too), (3) only then is the old entry deleted. A crash before
(2) leaves the old file and its key; after (2), the new file and its key; at worst an orphan
entry stays behind, which the next rotation sweeps."""

from __future__ import annotations

import secrets
from pathlib import Path

from keys import KeyStore
from umbra.atomic import write_atomic
from umbra.errors import ConfigError
from umbra.privacy.aead import SealError, open_sealed
from umbra.privacy.aead import read_header as _read_header
from umbra.privacy.aead import seal as _seal
from umbra.privacy.ltokenizer import Permutation

MAGIC = b"UMBRA-SL\x01"
FILENAME = "permutation.sealed"
KEY_BYTES = 32
_INFO = b"umbra/bundle/permutation/aes-256-gcm/v1"
_WHAT = "sealed Umbra permutation"


def key_entry(bundle_id: str, key_id: str) -> str:
    return f"bundle/{bundle_id}/{key_id}"


def seal(perm: Permutation, secret: bytes, bundle_id: str, key_id: str) -> bytes:
    return _seal(perm.to_bytes(), secret, _INFO, MAGIC, {"bundle_id": bundle_id, "key_id": key_id})


def read_header(blob: bytes) -> tuple[dict, bytes, bytes]:
    """(header, authenticated prefix, ciphertext)."""
    header, prefix, ciphertext = _read_header(blob, MAGIC, _WHAT)
    if not isinstance(header.get("bundle_id"), str) or not isinstance(header.get("key_id"), str):
        raise SealError(f"{_WHAT} has a malformed header")
    return header, prefix, ciphertext


def unseal(blob: bytes, secret: bytes) -> Permutation:
    read_header(blob)
    try:
        return Permutation.from_bytes(open_sealed(blob, secret, _INFO, MAGIC, _WHAT)[1])
    except SealError as exc:
        raise ConfigError("the permutation cannot be decrypted: wrong key or tampered file") from exc


def create(bundle_dir: Path, perm: Permutation, bundle_id: str, store: KeyStore) -> str:
    """Fresh key in the keyring, sealed permutation in `bundle_dir`; returns the key_id."""
    key_id = secrets.token_hex(8)
    secret = secrets.token_bytes(KEY_BYTES)
    store.set(key_entry(bundle_id, key_id), secret)
    write_atomic(Path(bundle_dir) / FILENAME, seal(perm, secret, bundle_id, key_id))
    return key_id


def _load(bundle_dir: Path, bundle_id: str, store: KeyStore) -> tuple[dict, Permutation]:
    path = Path(bundle_dir) / FILENAME
    if not path.is_file():
        raise ConfigError(f"{bundle_dir} has no {FILENAME}")
    blob = path.read_bytes()
    header, _, _ = read_header(blob)
    if header["bundle_id"] != bundle_id:
        raise ConfigError(f"{path} belongs to bundle {header['bundle_id']}, not {bundle_id}")
    return header, unseal(blob, store.get(key_entry(bundle_id, header["key_id"])))


def open_(bundle_dir: Path, bundle_id: str, store: KeyStore) -> Permutation:
    """Decrypt the bundle's permutation with its key from the OS keyring."""
    return _load(bundle_dir, bundle_id, store)[1]


def current_key_id(bundle_dir: Path) -> str:
    return read_header((Path(bundle_dir) / FILENAME).read_bytes())[0]["key_id"]


def rotate(bundle_dir: Path, bundle_id: str, store: KeyStore) -> tuple[str, str]:
    """Re-encrypt the permutation under a new key (crash-safe order, see module doc), then drop
    every other key of this bundle. Returns (old key_id, new key_id)."""
    header, perm = _load(bundle_dir, bundle_id, store)
    new_id = secrets.token_hex(8)
    secret = secrets.token_bytes(KEY_BYTES)
    store.set(key_entry(bundle_id, new_id), secret)
    write_atomic(Path(bundle_dir) / FILENAME, seal(perm, secret, bundle_id, new_id))
    for name in store.list(prefix=f"bundle/{bundle_id}/"):
        if name != key_entry(bundle_id, new_id):
            store.delete(name)
    return header["key_id"], new_id


def delete_keys(bundle_id: str, store: KeyStore) -> list[str]:
    """Remove every keyring entry of a bundle (after the bundle itself is gone)."""
    names = store.list(prefix=f"bundle/{bundle_id}/")
    for name in names:
        store.delete(name)
    return names
