"""KeyStore over the real OS keyring (GNOME Keyring's Secret Service)."""

from __future__ import annotations

import secrets
import shutil
import subprocess

import keyring
import pytest
from keyring.backends import fail, null
from keyring.backends.chainer import ChainerBackend

from keys import KeyNotFound, KeyStore, KeyStoreError, NoSecureKeyring
from keys.store import is_secure_backend, redetect_backend


def test_round_trip_through_secret_service(keystore):
    assert type(keystore.backend).__module__ == "keyring.backends.SecretService"
    secret = secrets.token_bytes(32)
    keystore.set("bundle/abc/k1", secret)
    assert keystore.get("bundle/abc/k1") == secret
    assert keystore.exists("bundle/abc/k1")
    assert keystore.list() == ["bundle/abc/k1"]
    assert keystore.list(prefix="bundle/zzz") == []
    # stored base64 under the service, as any keyring client sees it
    import base64

    assert keyring.get_password(keystore.service, "bundle/abc/k1") == base64.b64encode(secret).decode()
    keystore.set("bundle/abc/k1", b"\x00" * 32)  # overwrite
    assert keystore.get("bundle/abc/k1") == b"\x00" * 32
    keystore.delete("bundle/abc/k1")
    assert not keystore.exists("bundle/abc/k1")
    assert keystore.list() == []
    with pytest.raises(KeyNotFound):
        keystore.get("bundle/abc/k1")
    with pytest.raises(KeyNotFound):
        keystore.delete("bundle/abc/k1")


def test_visible_to_other_processes(keystore):
    """A secret set here is readable by secret-tool in a subprocess: it really is in the OS store."""
    if shutil.which("secret-tool") is None:
        pytest.fail("secret-tool not found; install the Debian package: apt-get install -y libsecret-tools")
    keystore.set("shared", b"hello-keyring")
    out = subprocess.run(
        ["secret-tool", "lookup", "service", keystore.service, "username", "shared"],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 0, out.stderr
    import base64

    assert base64.b64decode(out.stdout.strip()) == b"hello-keyring"


def test_list_ignores_stale_index_entries(keystore):
    keystore.set("a", b"1")
    keystore.set("b", b"2")
    keyring.get_keyring().delete_password(keystore.service, "b")  # deleted behind the store's back
    assert keystore.list() == ["a"]


@pytest.mark.parametrize("name", ["", "__index__", "bad\nname", "x" * 201])
def test_rejects_bad_names(keystore, name):
    with pytest.raises(KeyStoreError):
        keystore.set(name, b"secret")


def test_rejects_empty_secret(keystore):
    with pytest.raises(KeyStoreError):
        keystore.set("empty", b"")


def test_non_base64_entry_is_an_error(keystore):
    keyring.get_keyring().set_password(keystore.service, "raw", "not base64 !!")
    with pytest.raises(KeyStoreError, match="not base64"):
        keystore.get("raw")
    keyring.get_keyring().delete_password(keystore.service, "raw")


@pytest.mark.parametrize("backend", [fail.Keyring(), null.Keyring()])
def test_refuses_insecure_backends(backend):
    assert not is_secure_backend(backend)
    with pytest.raises(NoSecureKeyring, match="gnome-keyring"):
        KeyStore(backend=backend)


def test_refuses_chain_with_an_insecure_member(secret_service, monkeypatch):
    from keyring.backends import SecretService

    secure = SecretService.Keyring()
    monkeypatch.setattr(ChainerBackend, "backends", [secure, null.Keyring()])
    assert not is_secure_backend(ChainerBackend())
    monkeypatch.setattr(ChainerBackend, "backends", [secure])
    assert is_secure_backend(ChainerBackend())


def test_refuses_plaintext_file_backend():
    """keyrings.alt-style file keyrings are refused by construction (allowlist of OS stores)."""
    # Not a KeyringBackend subclass: subclassing registers it with keyring for the whole process.
    class PlaintextKeyring:  # the shape of keyrings.alt.file.PlaintextKeyring
        priority = 1

        def get_password(self, service, username):
            return None

        def set_password(self, service, username, password):
            raise AssertionError("must never be called")

        def delete_password(self, service, username):
            pass

    with pytest.raises(NoSecureKeyring):
        KeyStore(backend=PlaintextKeyring())


def test_no_secret_service_is_a_clear_error(secret_service, monkeypatch):
    """With no session bus the default backend resolution fails with NoSecureKeyring."""
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS")
    try:
        redetect_backend()
        with pytest.raises(NoSecureKeyring, match="no OS keyring"):
            KeyStore()
    finally:
        monkeypatch.undo()
        redetect_backend()
    assert type(KeyStore().backend).__module__ == "keyring.backends.SecretService"
