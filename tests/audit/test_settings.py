"""Auditing is off unless turned on: by the saved setting, or for one process by UMBRA_AUDIT."""

from __future__ import annotations

import pytest

from umbra.audit.settings import audit_dir, audit_enabled, keyring_service, set_enabled, settings_file
from umbra.errors import ConfigError


def test_off_by_default_and_the_saved_setting_turns_it_on(private_audit_env):
    assert not audit_enabled()
    path = set_enabled(True)
    assert path == settings_file() and str(path).startswith(str(private_audit_env / "config"))
    assert audit_enabled()
    set_enabled(False)
    assert not audit_enabled()


def test_environment_overrides_the_setting(monkeypatch):
    set_enabled(True)
    monkeypatch.setenv("UMBRA_AUDIT", "0")
    assert not audit_enabled()
    set_enabled(False)
    monkeypatch.setenv("UMBRA_AUDIT", "1")
    assert audit_enabled()
    monkeypatch.setenv("UMBRA_AUDIT", "maybe")
    with pytest.raises(ConfigError, match="UMBRA_AUDIT"):
        audit_enabled()


def test_directory_and_keyring_service(private_audit_env, monkeypatch):
    assert audit_dir() == private_audit_env / "audit"
    assert keyring_service() == "umbra"
    monkeypatch.setenv("UMBRA_AUDIT_SERVICE", "umbra-elsewhere")
    assert keyring_service() == "umbra-elsewhere"


def test_a_corrupt_setting_is_a_clear_error():
    settings_file().parent.mkdir(parents=True)
    settings_file().write_text("{not json")
    with pytest.raises(ConfigError, match="audit setting"):
        audit_enabled()
