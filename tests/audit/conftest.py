"""Fixtures of the audit tests: the real OS keyring (see tests/keyring_fixture.py) and a private
audit directory and settings file for every test."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_audit_env(tmp_path, monkeypatch):
    """Settings, recordings and the audit switch of this test only."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("UMBRA_AUDIT_DIR", str(tmp_path / "audit"))
    monkeypatch.delenv("UMBRA_AUDIT", raising=False)
    monkeypatch.delenv("UMBRA_AUDIT_SERVICE", raising=False)
    return tmp_path
