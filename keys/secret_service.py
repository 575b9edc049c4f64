"""One Secret Service connection per process, for KeyStore on Linux.

keyring's SecretService backend opens a new D-Bus connection (and a new Secret Service session,
a Diffie-Hellman exchange) for every get, set and delete, and closes it again. GNOME Keyring
registers a client lazily, after its first message, and a request that arrives first aborts the
whole daemon (`gkd_secret_service_get_pkcs11_session: assertion 'client' failed`; GNOME Keyring
42 to 50, upstream gnome-keyring#190). With a connection per call every call is a first message:
a few hundred key reads in a row, or two processes at once, take down the user's keyring.

SecretServiceCalls does what the backend does — same attributes, label, collection and unlock
prompts, so entries written by either are read by the other — over one connection and one
session per process (per bus address; a forked child opens its own). A connection the daemon has
dropped (it restarted) is opened again once per call. Under concurrent writers GNOME Keyring
also answers "no such object" about an item it has just created or is replacing: such a call is
tried again (TRANSIENT_ATTEMPTS), and a write or delete whose reply was lost but which took
(read back) counts as done. Calls are serialised: a jeepney blocking connection is not
thread-safe."""

from __future__ import annotations

import os
import threading
import time

from keyring.backend import KeyringBackend
from keyring.errors import KeyringLocked, PasswordDeleteError

SECRET_SERVICE_BACKEND = "keyring.backends.SecretService.Keyring"
TRANSIENT_ATTEMPTS = 4  # tries of a call the daemon answers "no such object"
TRANSIENT_BACKOFF_S = 0.05  # x the attempt number


class SecretServiceCalls:
    """get_password / set_password / delete_password of keyring's SecretService backend, over the
    process's shared connection (CONNECTION)."""

    def __init__(self, backend: KeyringBackend):
        self.backend = backend  # for its attribute scheme (_query), appid and preferred_collection

    def get_password(self, service: str, username: str) -> str | None:
        return self._run(lambda collection: self._read(collection, service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        attributes = self.backend._query(service, username, application=self.backend.appid)
        label = f"Password for '{username}' on '{service}'"
        self._run(lambda collection: collection.create_item(label, attributes, password.encode("utf-8"), replace=True),
                  landed=lambda collection: self._read(collection, service, username) == password)

    def delete_password(self, service: str, username: str) -> None:
        def op(collection):
            for item in collection.search_items(self.backend._query(service, username)):
                item.delete()
                return
            raise PasswordDeleteError("No such password!")

        self._run(op, landed=lambda collection: self._read(collection, service, username) is None)

    def _read(self, collection, service: str, username: str) -> str | None:
        for item in collection.search_items(self.backend._query(service, username)):
            _unlock(item)
            return item.get_secret().decode("utf-8")
        return None

    def _run(self, op, landed=None):
        return CONNECTION.run(op, getattr(self.backend, "preferred_collection", None), landed)


class SharedConnection:
    """The process's one connection and session to the Secret Service, per bus address and
    collection; a forked child, or a changed DBUS_SESSION_BUS_ADDRESS, opens its own."""

    def __init__(self):
        self.opened = 0  # connections opened so far (tests read it)
        self._lock = threading.Lock()
        self._key: tuple | None = None  # (pid, bus address, collection path) of the open connection
        self._connection = None
        self._collection = None

    def run(self, op, collection_path: str | None, landed=None):
        """op(collection); if the daemon dropped the connection (it restarted), once more afresh."""
        from secretstorage.exceptions import SecretServiceNotAvailableException

        with self._lock:
            try:
                return _tried(op, self._open(collection_path), landed)
            except (SecretServiceNotAvailableException, ConnectionError, OSError):
                self._drop()
            return _tried(op, self._open(collection_path), landed)

    def _open(self, collection_path: str | None):
        """The collection on the shared connection, opened (and unlocked) if need be."""
        import secretstorage
        from secretstorage.util import open_session

        key = (os.getpid(), os.environ.get("DBUS_SESSION_BUS_ADDRESS"), collection_path)
        if self._key != key:
            self._drop(close=self._key is not None and self._key[0] == key[0])  # never close a parent's socket
        if self._collection is None:
            connection = secretstorage.dbus_init()
            self.opened += 1
            try:
                collection = (secretstorage.Collection(connection, collection_path) if collection_path
                              else secretstorage.get_default_collection(connection))
                collection.session = open_session(connection)  # one key exchange per connection
            except BaseException:
                connection.close()
                raise
            self._key, self._connection, self._collection = key, connection, collection
        if self._collection.is_locked():
            self._collection.unlock()  # the desktop's unlock prompt, as keyring's backend does
            if self._collection.is_locked():
                raise KeyringLocked("Failed to unlock the collection!")
        return self._collection

    def _drop(self, close: bool = True) -> None:
        if self._connection is not None and close:
            try:
                self._connection.close()
            except OSError:
                pass
        self._key = self._connection = self._collection = None


def _tried(op, collection, landed):
    """op(collection), tried again on the daemon's transient "no such object" (never on a locked
    keyring or a dismissed prompt: that would prompt again); `landed(collection)`, if given, first
    asks whether a failed write or delete took."""
    from secretstorage.exceptions import ItemNotFoundException

    for attempt in range(1, TRANSIENT_ATTEMPTS + 1):
        try:
            return op(collection)
        except ItemNotFoundException:
            if attempt == TRANSIENT_ATTEMPTS:
                raise
        try:
            if landed is not None and landed(collection):
                return None
        except ItemNotFoundException:  # the read back met the same race: not known to have taken
            pass
        time.sleep(TRANSIENT_BACKOFF_S * attempt)
    return None  # not reached: the last attempt returns or raises


def _unlock(item) -> None:
    if item.is_locked():
        item.unlock()
        if item.is_locked():  # the user dismissed the prompt
            raise KeyringLocked("Failed to unlock the item!")


CONNECTION = SharedConnection()


def keyring_calls(backend: KeyringBackend):
    """What KeyStore calls get/set/delete_password on: SecretServiceCalls for keyring's
    SecretService backend, the backend itself for every other."""
    if f"{type(backend).__module__}.{type(backend).__qualname__}" == SECRET_SERVICE_BACKEND:
        return SecretServiceCalls(backend)
    return backend
