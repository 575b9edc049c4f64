"""The sealed permutation: AES-256-GCM under a key in the real OS keyring; crash-safe rotation."""

from __future__ import annotations

import secrets

import pytest

from keys import KeyNotFound
from umbra.errors import ConfigError
from umbra.privacy import sealed
from umbra.privacy.ltokenizer import Permutation


def test_seal_round_trip_and_wrong_key():
    perm = Permutation.random(300)
    key = secrets.token_bytes(32)
    blob = sealed.seal(perm, key, "b1", "k1")
    assert sealed.unseal(blob, key) == perm
    with pytest.raises(ConfigError, match="cannot be decrypted"):
        sealed.unseal(blob, secrets.token_bytes(32))
    assert sealed.seal(perm, key, "b1", "k1") != blob  # fresh salt and nonce every time


def test_tampering_is_detected():
    perm = Permutation.random(64)
    key = secrets.token_bytes(32)
    blob = bytearray(sealed.seal(perm, key, "b1", "k1"))
    body = bytearray(blob)
    body[-20] ^= 1  # ciphertext
    with pytest.raises(ConfigError, match="cannot be decrypted"):
        sealed.unseal(bytes(body), key)
    header = bytes(blob).replace(b'"bundle_id": "b1"', b'"bundle_id": "b2"')  # authenticated header
    with pytest.raises(ConfigError, match="cannot be decrypted"):
        sealed.unseal(header, key)
    with pytest.raises(ConfigError, match="bad magic"):
        sealed.unseal(b"garbage" * 10, key)


def test_create_open_rotate(tmp_path, keystore):
    perm = Permutation.random(512)
    key_id = sealed.create(tmp_path, perm, "bundleA", keystore)
    assert keystore.list() == [sealed.key_entry("bundleA", key_id)]
    assert sealed.open_(tmp_path, "bundleA", keystore) == perm
    old_secret = keystore.get(sealed.key_entry("bundleA", key_id))

    old, new = sealed.rotate(tmp_path, "bundleA", keystore)
    assert old == key_id and new != key_id and sealed.current_key_id(tmp_path) == new
    assert keystore.list() == [sealed.key_entry("bundleA", new)]  # old entry gone
    assert sealed.open_(tmp_path, "bundleA", keystore) == perm
    with pytest.raises(ConfigError, match="cannot be decrypted"):  # the old key no longer decrypts
        sealed.unseal((tmp_path / sealed.FILENAME).read_bytes(), old_secret)
    assert [p.name for p in tmp_path.iterdir()] == [sealed.FILENAME]  # no temp files left


def test_open_needs_the_keyring_entry(tmp_path, keystore):
    sealed.create(tmp_path, Permutation.random(16), "bundleB", keystore)
    sealed.delete_keys("bundleB", keystore)
    with pytest.raises(KeyNotFound):
        sealed.open_(tmp_path, "bundleB", keystore)
    with pytest.raises(ConfigError, match="belongs to bundle"):
        sealed.open_(tmp_path, "other", keystore)


def test_rotation_crash_before_rename_keeps_old_key_working(tmp_path, keystore, monkeypatch):
    perm = Permutation.random(128)
    first = sealed.create(tmp_path, perm, "bundleC", keystore)

    def crash(path, data):
        raise OSError("disk full")

    monkeypatch.setattr(sealed, "write_atomic", crash)
    with pytest.raises(OSError):
        sealed.rotate(tmp_path, "bundleC", keystore)
    monkeypatch.undo()
    assert sealed.current_key_id(tmp_path) == first
    assert sealed.open_(tmp_path, "bundleC", keystore) == perm  # π not lost
    assert len(keystore.list(prefix="bundle/bundleC/")) == 2  # an orphan new key...
    _, new = sealed.rotate(tmp_path, "bundleC", keystore)
    assert keystore.list(prefix="bundle/bundleC/") == [sealed.key_entry("bundleC", new)]  # ...swept


def test_rotation_crash_before_old_key_deletion_keeps_new_key_working(tmp_path, keystore, monkeypatch):
    perm = Permutation.random(128)
    first = sealed.create(tmp_path, perm, "bundleD", keystore)

    def crash(name):
        raise RuntimeError("killed")

    monkeypatch.setattr(keystore, "delete", crash)
    with pytest.raises(RuntimeError):
        sealed.rotate(tmp_path, "bundleD", keystore)
    monkeypatch.undo()
    assert sealed.current_key_id(tmp_path) != first
    assert sealed.open_(tmp_path, "bundleD", keystore) == perm  # π not lost
