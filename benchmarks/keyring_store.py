"""The key store a benchmark or an experiment keeps its keys in: the OS keyring, under a service
name of its own (so a run never reads or overwrites a user's keys), or a private GNOME Keyring
started for the run (the one the tests use, tests/keyring_fixture.py) where no Secret Service
answers.
    store, service = keyring()      # service: the private keyring to stop, or None"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

from keys import KeyStore

ROOT = Path(__file__).resolve().parents[1]


def keyring() -> tuple[KeyStore, object | None]:
    """A KeyStore on the OS keyring; a private GNOME Keyring (as the tests use) if none answers."""
    if str(ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests"))
    from keyring_fixture import _PrivateSecretService, secret_service_usable

    service = None if secret_service_usable() else _PrivateSecretService()
    return KeyStore(service=f"umbra-bench-{secrets.token_hex(4)}"), service
