"""SecureGate access keys in the OS keyring (seed 003, DESIGN §4 and invariant 3).

An access key is 32 bytes from the OS CSPRNG (256 bits; the issue asks ≥ 128). Each key of a
bundle has a public `key_id` (random, 16 hex digits) that changes on rotation; the keyring holds
the secret under `access/<bundle_id>/<key_id>`, so a rotation adds the new entry before the
bundle's manifest commits and removes the old one after (a crash leaves an orphan, never a gap).

The text form, shown once for distribution and read back only from stdin or a hidden prompt:

    umbra-ak1:<bundle_id>:<key_id>:<secret, base64url without padding>

It names its bundle and key so `import` can store it without asking; it is never an argv, a
file, a log line or an environment variable of Umbra's. Which adapter a key opens, and its name,
are the bundle manifest's business (umbra/securegate/bundle_access.py)."""

from __future__ import annotations

import base64
import binascii
import re
import secrets
import sys
from dataclasses import dataclass

from keys.errors import KeyStoreError
from keys.store import KeyStore

PREFIX = "umbra-ak1"
SECRET_BYTES = 32
ENTRY_PREFIX = "access/"
_ID = re.compile(r"[0-9a-f]{16}")
_BUNDLE = re.compile(r"[0-9A-Za-z_-]{1,64}")


class AccessKeyError(KeyStoreError):
    """An access key that is not well-formed text, or that belongs to another bundle."""


@dataclass(frozen=True)
class AccessKey:
    bundle_id: str
    key_id: str
    secret: bytes  # 32 bytes; never printed, logged or written to a file

    def __repr__(self) -> str:  # the secret stays out of tracebacks and logs
        return f"AccessKey(bundle_id={self.bundle_id!r}, key_id={self.key_id!r})"

    @property
    def entry(self) -> str:
        return entry_name(self.bundle_id, self.key_id)

    def text(self) -> str:
        """The key as the user distributes it (see the module doc)."""
        encoded = base64.urlsafe_b64encode(self.secret).rstrip(b"=").decode("ascii")
        return f"{PREFIX}:{self.bundle_id}:{self.key_id}:{encoded}"


def new_key_id() -> str:
    return secrets.token_hex(8)


def generate(bundle_id: str) -> AccessKey:
    """A fresh access key for a bundle: CSPRNG secret, fresh key id."""
    _check_bundle(bundle_id)
    return AccessKey(bundle_id, new_key_id(), secrets.token_bytes(SECRET_BYTES))


def entry_name(bundle_id: str, key_id: str) -> str:
    return f"{ENTRY_PREFIX}{bundle_id}/{key_id}"


def parse(text: str) -> AccessKey:
    """The AccessKey in its text form; AccessKeyError (saying nothing about the secret) otherwise."""
    parts = text.strip().split(":")
    if len(parts) != 4 or parts[0] != PREFIX:
        raise AccessKeyError(f"not an Umbra access key (expected {PREFIX}:<bundle>:<key id>:<secret>)")
    _, bundle_id, key_id, encoded = parts
    if not _BUNDLE.fullmatch(bundle_id) or not _ID.fullmatch(key_id):
        raise AccessKeyError("not an Umbra access key (malformed bundle or key id)")
    try:
        secret = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError) as exc:
        raise AccessKeyError("not an Umbra access key (the secret is not base64url)") from exc
    if len(secret) != SECRET_BYTES or not re.fullmatch(r"[A-Za-z0-9_-]+", encoded):
        raise AccessKeyError(f"not an Umbra access key (the secret must be {SECRET_BYTES} bytes)")
    return AccessKey(bundle_id, key_id, secret)


def store_key(store: KeyStore, key: AccessKey) -> None:
    store.set(key.entry, key.secret)


def load_key(store: KeyStore, bundle_id: str, key_id: str) -> AccessKey:
    """The key from the keyring (KeyNotFound if this user does not hold it)."""
    secret = store.get(entry_name(bundle_id, key_id))
    return AccessKey(bundle_id, key_id, secret)


def held_key_ids(store: KeyStore, bundle_id: str) -> list[str]:
    """Key ids of this bundle whose secret this user's keyring holds (current or not)."""
    prefix = entry_name(bundle_id, "")
    return [name[len(prefix):] for name in store.list(prefix=prefix) if _ID.fullmatch(name[len(prefix):])]


def delete_key(store: KeyStore, bundle_id: str, key_id: str) -> None:
    store.delete(entry_name(bundle_id, key_id))


def read_secret_text(what: str, stream=None) -> str:
    """A secret typed at a hidden prompt (a terminal) or piped on stdin, surrounding whitespace
    dropped; never from argv. Empty or whitespace/control characters inside → KeyStoreError."""
    stream = stream or sys.stdin
    if stream.isatty():
        import getpass

        text = getpass.getpass(f"{what} (not echoed): ")
    else:
        text = stream.read()
    text = text.strip()
    if not text or any(c.isspace() or ord(c) < 32 for c in text):
        raise KeyStoreError(f"the {what} read from stdin is empty or contains whitespace / control characters")
    return text


def _check_bundle(bundle_id: str) -> None:
    if not isinstance(bundle_id, str) or not _BUNDLE.fullmatch(bundle_id):
        raise AccessKeyError(f"{bundle_id!r} is not a bundle id")
