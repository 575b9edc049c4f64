"""The bundle's permutation at rest: AES-256-GCM under a key that lives only in the OS keyring.

File `permutation.sealed`:

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

import json
import secrets
import struct
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from keys import KeyStore
from umbra.atomic import write_atomic
from umbra.errors import ConfigError
from umbra.privacy.ltokenizer import Permutation

MAGIC = b"UMBRA-SL\x01"
FILENAME = "permutation.sealed"
KEY_BYTES = 32
_INFO = b"umbra/bundle/permutation/aes-256-gcm/v1"


def key_entry(bundle_id: str, key_id: str) -> str:
    return f"bundle/{bundle_id}/{key_id}"


def _aes_key(secret: bytes, salt: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=_INFO).derive(secret)


def seal(perm: Permutation, secret: bytes, bundle_id: str, key_id: str) -> bytes:
    salt, nonce = secrets.token_bytes(16), secrets.token_bytes(12)
    header = json.dumps(
        {"v": 1, "alg": "AES-256-GCM", "kdf": "HKDF-SHA256", "bundle_id": bundle_id, "key_id": key_id,
         "salt": salt.hex(), "nonce": nonce.hex()},
        sort_keys=True,
    ).encode()
    prefix = MAGIC + struct.pack("<I", len(header)) + header
    return prefix + AESGCM(_aes_key(secret, salt)).encrypt(nonce, perm.to_bytes(), prefix)


def read_header(blob: bytes) -> tuple[dict, bytes, bytes]:
    """(header, authenticated prefix, ciphertext)."""
    head = len(MAGIC) + 4
    if len(blob) < head or not blob.startswith(MAGIC):
        raise ConfigError("not a sealed Umbra permutation (bad magic)")
    (n,) = struct.unpack("<I", blob[len(MAGIC) : head])
    try:
        header = json.loads(blob[head : head + n])
        bytes.fromhex(header["salt"]), bytes.fromhex(header["nonce"]), header["bundle_id"], header["key_id"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError("sealed permutation has a malformed header") from exc
    return header, blob[: head + n], blob[head + n :]


def unseal(blob: bytes, secret: bytes) -> Permutation:
    header, prefix, ciphertext = read_header(blob)
    try:
        plain = AESGCM(_aes_key(secret, bytes.fromhex(header["salt"]))).decrypt(
            bytes.fromhex(header["nonce"]), ciphertext, prefix
        )
    except InvalidTag as exc:
        raise ConfigError("the permutation cannot be decrypted: wrong key or tampered file") from exc
    return Permutation.from_bytes(plain)


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
