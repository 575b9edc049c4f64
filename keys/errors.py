"""Errors of the key store. All are UmbraErrors, so the CLI prints one line and exits 2."""

from umbra.errors import UmbraError


class KeyStoreError(UmbraError):
    """Base of every key-store failure."""


class NoSecureKeyring(KeyStoreError):
    """No OS secret store is reachable; Umbra refuses to keep keys anywhere else."""


class KeyStoreUnavailable(KeyStoreError):
    """The OS secret store is there but refused the operation (locked, dismissed prompt, D-Bus error)."""


class KeyNotFound(KeyStoreError):
    """No secret under that name (never created on this machine/user, deleted, or rotated away)."""
