"""KeyStore: named binary secrets in the OS keyring, under one service name.

The `keyring` API cannot enumerate entries, so the store keeps an index entry (a JSON list of
names, no secrets) in the same service. Ordering keeps the index a superset of the stored
secrets: `set` adds the name before writing the secret, `delete` removes it after deleting the
secret, and `list` reports only names whose secret is present.

Only OS secret stores are accepted (see SECURE_BACKENDS). The fail, null and file backends
(keyrings.alt's plaintext and "encrypted file" keyrings) are refused, and so is a chainer that
contains any of them, since it would fall through to the file when the OS store says no."""

from __future__ import annotations

import base64
import binascii
import json

import keyring
import keyring.backend
import keyring.core
from keyring.backend import KeyringBackend
from keyring.backends import fail
from keyring.backends.chainer import ChainerBackend

from keys.errors import KeyNotFound, KeyStoreError, KeyStoreUnavailable, NoSecureKeyring
from keys.secret_service import keyring_calls

DEFAULT_SERVICE = "umbra"
INDEX_NAME = "__index__"
MAX_NAME_LENGTH = 200

# Backends that hand secrets to the operating system's own secret store.
SECURE_BACKENDS = frozenset(
    {
        "keyring.backends.SecretService.Keyring",  # Linux: GNOME Keyring, KeePassXC, ... over D-Bus
        "keyring.backends.libsecret.Keyring",  # Linux: the same service through libsecret
        "keyring.backends.kwallet.DBusKeyring",  # KDE Wallet 5
        "keyring.backends.kwallet.DBusKeyringKWallet4",  # KDE Wallet 4
        "keyring.backends.macOS.Keyring",  # macOS Keychain
        "keyring.backends.Windows.WinVaultKeyring",  # Windows Credential Locker
    }
)

NO_KEYRING_HELP = (
    "Umbra keeps keys only in an OS secret store and never in a file. On Linux run a Secret "
    "Service provider in your desktop session (GNOME Keyring: Debian packages gnome-keyring and "
    "dbus, with DBUS_SESSION_BUS_ADDRESS set and the login keyring unlocked); macOS Keychain and "
    "the Windows Credential Locker work as they are."
)


def backend_name(backend: KeyringBackend) -> str:
    return f"{type(backend).__module__}.{type(backend).__qualname__}"


def is_secure_backend(backend: KeyringBackend) -> bool:
    """True for an OS secret store, or a chain made only of OS secret stores."""
    if isinstance(backend, ChainerBackend):
        chain = list(backend.backends)
        return bool(chain) and all(is_secure_backend(b) for b in chain)
    return backend_name(backend) in SECURE_BACKENDS


def redetect_backend() -> None:
    """Forget keyring's cached backend list and choose again (the session bus may have come or
    gone since keyring first looked; keyring caches the viable backends once per process)."""
    reset = getattr(keyring.backend.get_all_keyring, "reset", None)
    if reset is not None:
        try:
            reset()
        except KeyError:  # nothing cached yet
            pass
    try:
        keyring.core.init_backend()
    except Exception:  # a cached backend whose priority probe now raises (bus gone)
        keyring.core.set_keyring(fail.Keyring())


def secure_backend() -> KeyringBackend:
    """The keyring's chosen backend if it is an OS secret store; else re-detect once (a session
    bus may have come up after keyring first looked); else raise NoSecureKeyring."""
    backend = keyring.get_keyring()
    if not is_secure_backend(backend):
        redetect_backend()
        backend = keyring.get_keyring()
    if not is_secure_backend(backend):
        raise NoSecureKeyring(f"no OS keyring is available (keyring selected {backend_name(backend)}). {NO_KEYRING_HELP}")
    return backend


class KeyStore:
    """get/set/delete/list of named binary secrets (stored base64) in the OS keyring."""

    def __init__(self, service: str = DEFAULT_SERVICE, backend: KeyringBackend | None = None):
        if not service or not isinstance(service, str):
            raise KeyStoreError("the keyring service name must be a non-empty string")
        if backend is not None and not is_secure_backend(backend):
            raise NoSecureKeyring(f"refusing keyring backend {backend_name(backend)}. {NO_KEYRING_HELP}")
        self.service = service
        self.backend = backend or secure_backend()
        self._calls = keyring_calls(self.backend)  # the Secret Service over one connection per process

    # -- secrets ---------------------------------------------------------------------------
    def get(self, name: str) -> bytes:
        _check_name(name)
        value = self._call("read", self._calls.get_password, self.service, name)
        if value is None:
            raise KeyNotFound(f"no key {name!r} in the OS keyring (service {self.service!r})")
        try:
            return base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as exc:
            raise KeyStoreError(f"keyring entry {name!r} of service {self.service!r} is not base64") from exc

    def set(self, name: str, secret: bytes) -> None:
        _check_name(name)
        if not isinstance(secret, (bytes, bytearray)) or not secret:
            raise KeyStoreError("a secret must be non-empty bytes")
        names = self._index()
        if name not in names:
            self._write_index(names | {name})
        self._call("write", self._calls.set_password, self.service, name, base64.b64encode(bytes(secret)).decode("ascii"))

    def delete(self, name: str) -> None:
        _check_name(name)
        if not self.exists(name):
            raise KeyNotFound(f"no key {name!r} in the OS keyring (service {self.service!r})")
        self._call("delete", self._calls.delete_password, self.service, name)
        names = self._index()
        if name in names:
            self._write_index(names - {name})

    def exists(self, name: str) -> bool:
        _check_name(name)
        return self._call("read", self._calls.get_password, self.service, name) is not None

    def list(self, prefix: str = "") -> list[str]:
        """Names of the stored secrets (optionally only those starting with `prefix`), sorted."""
        return sorted(n for n in self._index() if n.startswith(prefix) and self.exists(n))

    # -- internals -------------------------------------------------------------------------
    def _index(self) -> frozenset[str]:
        raw = self._call("read", self._calls.get_password, self.service, INDEX_NAME)
        if raw is None:
            return frozenset()
        try:
            names = json.loads(raw)
        except ValueError as exc:
            raise KeyStoreError(f"the key index of service {self.service!r} is corrupt") from exc
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise KeyStoreError(f"the key index of service {self.service!r} is corrupt")
        return frozenset(names)

    def _write_index(self, names: frozenset[str]) -> None:
        if names:
            self._call("write", self._calls.set_password, self.service, INDEX_NAME, json.dumps(sorted(names)))
        elif self._call("read", self._calls.get_password, self.service, INDEX_NAME) is not None:
            self._call("delete", self._calls.delete_password, self.service, INDEX_NAME)

    def _call(self, what: str, fn, *args):
        try:
            return fn(*args)
        except KeyStoreError:
            raise
        except Exception as exc:  # keyring, secretstorage and jeepney each raise their own types
            # The message names the failure only; keyring errors never carry the secret itself.
            raise KeyStoreUnavailable(
                f"the OS keyring refused to {what} an entry of service {self.service!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_LENGTH:
        raise KeyStoreError(f"a key name must be a string of 1..{MAX_NAME_LENGTH} characters")
    if name == INDEX_NAME or any(ord(c) < 32 for c in name):
        raise KeyStoreError(f"{name!r} is not a valid key name")
