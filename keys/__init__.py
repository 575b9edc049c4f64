"""Secrets in the OS keyring (Secret Service, Keychain, Windows Credential Locker) — never on disk.

`KeyStore` is the only door: named binary secrets under one keyring service ("umbra"), stored
base64. It refuses every backend that is not an OS secret store (the fail/null backends, file
backends such as keyrings.alt's plaintext one, and chains that include any of them)."""

from keys.errors import KeyNotFound, KeyStoreError, KeyStoreUnavailable, NoSecureKeyring
from keys.store import DEFAULT_SERVICE, KeyStore

__all__ = [
    "DEFAULT_SERVICE",
    "KeyNotFound",
    "KeyStore",
    "KeyStoreError",
    "KeyStoreUnavailable",
    "NoSecureKeyring",
]
