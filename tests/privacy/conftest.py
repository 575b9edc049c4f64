"""Real-keyring fixtures (see tests/keyring_fixture.py)."""

