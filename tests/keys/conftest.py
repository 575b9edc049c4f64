"""Real-keyring fixtures (see tests/keyring_fixture.py)."""

from keyring_fixture import keystore, secret_service  # noqa: F401  (pytest fixtures)
