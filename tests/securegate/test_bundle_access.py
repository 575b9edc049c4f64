"""The access section of a bundle (umbra/securegate/bundle_access.py): revealing adapters stored
only sealed, the paper's per-team table (several adapters, several keys each, every key opening
its own ciphertext only), rotation (new key id, old key opens nothing anywhere, adapters not
retrained), revocation, import/export (the failures: test_bundle_access_failures.py; the table:
conftest.py, access_table.py)."""

from __future__ import annotations

import dataclasses

import pytest

from keys import KeyNotFound
from keys.access_keys import generate, held_key_ids, load_key
from umbra.errors import ConfigError
from umbra.privacy.aead import SealError
from umbra.privacy.bundle import load_bundle
from umbra.privacy.bundle_adapters import remove_adapter
from umbra.privacy.manifest import Manifest
from umbra.securegate.access import AccessControl
from umbra.securegate.bundle_access import (STEPS, export_key, import_key, key_entries, key_statuses,
                                            revealing_adapters, revoke_key, rotate_key)
from umbra.securegate.errors import AccessError
from umbra.securegate.sealing import open_adapter, sealed_fields

from .access_table import GATE, TABLE, same_adapter, unlocks
from .helpers import keyring_snapshot, referenced_files_whole, same_weights, snapshot
from .needles import scan


# -- add, the table, no plaintext --------------------------------------------------------------

def test_a_revealing_adapter_is_in_the_manifest_with_no_file(table):
    m = Manifest.read(table["dir"])
    for name, adapter in table["adapters"].items():
        entry = m.adapters[name]
        assert entry["role"] == "revealing" and entry["file"] == "" and entry["sha256"] == ""
        assert entry["kind"] == adapter.kind.value and entry["parameters"] == adapter.parameter_count
        assert entry["training"] == {"method": "test"}
    assert set(revealing_adapters(m)) == set(TABLE)
    keys = key_entries(m)
    assert {n: e.adapter for n, e in keys.items()} == {k: a for a, ks in TABLE.items() for k in ks}
    for name, e in keys.items():
        assert e.file.startswith(f"access/{name}.") and e.file.endswith(".sealed") and len(e.sha256) == 64
        assert e.key_id == table["keys"][name].key_id and e.rotated is None
        fields = sealed_fields((table["dir"] / e.file).read_bytes())
        assert (fields["bundle_id"], fields["adapter"], fields["key_id"]) == (m.bundle_id, e.adapter, e.key_id)
    gate = m.access["gate"]
    assert gate["classes"] == sorted(TABLE) and gate["file"].startswith("access/gate.")
    referenced_files_whole(table["dir"])
    # the revealing adapters are not loaded as plaintext adapters; the secure one is
    loaded = load_bundle(table["dir"], store=table["store"])
    assert set(loaded.adapters) == {"secure"}


def test_no_plaintext_revealing_adapter_bytes_anywhere_in_the_bundle(table):
    """Neither adapter_bytes() of each revealing adapter, nor the plaintext its ciphertexts
    decrypt to, nor its tensor data, nor windows of any tensor (fp32, fp16, bf16) is in a file."""
    from .needles import Needles

    files = [p for p in table["dir"].rglob("*") if p.is_file()]
    ours = Needles()
    for name, adapter in table["adapters"].items():
        ours.adapter(adapter, bundle_dir=table["dir"])
    for key in table["keys"].values():
        ours.key(key)
    ours.sealed_in(table["dir"])  # decrypts each ciphertext: its plaintext and AES key are needles too
    assert len([k for k in ours.needles if k.startswith("plaintext ")]) == 2 * (len(TABLE) + len(table["keys"]))
    assert len(ours.needles) > 300
    assert scan(files, ours.needles) == []
    # the positive control: the same scan finds the plaintext secure adapter's weights
    secure = load_bundle(table["dir"], store=table["store"]).adapters["secure"]
    control = Needles()
    control.adapter(secure, bundle_dir=table["dir"])
    found = scan(files, control.needles)
    assert found and all("adapters/secure." in f for f, _ in found)


def test_each_key_opens_its_adapter_and_only_its_own_ciphertext(table, stores):
    d, m = table["dir"], Manifest.read(table["dir"])
    entries = key_entries(m)
    for name, key in table["keys"].items():
        for other_name, e in entries.items():
            blob = (d / e.file).read_bytes()
            if other_name == name:
                assert same_adapter(table, e.adapter, open_adapter(blob, key, e.adapter))
            else:
                with pytest.raises(SealError):
                    open_adapter(blob, key, e.adapter)
                with pytest.raises(SealError):  # even claiming the other entry's id
                    open_adapter(blob, dataclasses.replace(key, key_id=e.key_id), e.adapter)
        got, adapter = unlocks(table, stores, key)
        assert got == entries[name].adapter and same_weights(adapter, table["adapters"][got])
    # the table as `keys access list` shows it: every key held by the admin
    statuses = key_statuses(d, table["store"])
    assert [(s.name, s.adapter, s.held) for s in statuses] == [
        (k, a, True) for a, ks in TABLE.items() for k in ks]


def test_keys_of_two_adapters_open_one_each(table, stores):
    """A user holding keys of two adapters gets one of them (the first by key name), never a mix."""
    got, adapter = unlocks(table, stores, table["keys"]["b2"], table["keys"]["a2"])
    assert got == "alpha" and same_weights(adapter, table["adapters"]["alpha"])


# -- rotate ----------------------------------------------------------------------------------------

def test_rotate_gives_a_new_key_and_the_old_one_opens_nothing(clone, stores, needles):
    d, store = clone["dir"], clone["store"]
    old = clone["keys"]["a1"]
    before = key_entries(Manifest.read(d))
    gate_before = Manifest.read(d).access["gate"]["file"]
    steps = []
    new = needles.key(rotate_key(d, "a1", store, gate_config=GATE, progress=steps.append))
    needles.sealed_in(d)
    assert steps == list(STEPS)
    after = key_entries(Manifest.read(d))
    assert new.key_id != old.key_id and new.secret != old.secret and new.bundle_id == old.bundle_id
    assert after["a1"].key_id == new.key_id and after["a1"].adapter == "alpha"
    assert after["a1"].created == before["a1"].created and after["a1"].rotated is not None
    assert after["a1"].file != before["a1"].file and not (d / before["a1"].file).exists()
    assert {n: e for n, e in after.items() if n != "a1"} == {n: e for n, e in before.items() if n != "a1"}
    # the old key: no ciphertext under it, no keyring entry, unlocks nothing, cannot be imported
    for p in (d / "access").glob("*.sealed"):
        assert sealed_fields(p.read_bytes())["key_id"] != old.key_id
    assert old.key_id not in held_key_ids(store, old.bundle_id)
    with pytest.raises(KeyNotFound):
        load_key(store, old.bundle_id, old.key_id)
    assert unlocks(clone, stores, old) == (None, None)
    with pytest.raises(AccessError, match="not a current key"):
        import_key(d, old.text(), stores())
    # the new key opens the same adapter, unchanged (adapters are not retrained)
    got, adapter = unlocks(clone, stores, new)
    assert got == "alpha" and same_weights(adapter, clone["adapters"]["alpha"])
    assert same_adapter(clone, "alpha", open_adapter((d / after["a1"].file).read_bytes(), new, "alpha"))
    assert export_key(d, "a1", store).text() == new.text()
    # every other key still opens its own adapter
    for name in ("a2", "b1", "b2", "c1"):
        assert unlocks(clone, stores, clone["keys"][name])[0] == after[name].adapter
    # the gate was retrained without the old key: its file changed
    assert Manifest.read(d).access["gate"]["file"] != gate_before
    referenced_files_whole(d)


# -- revoke ----------------------------------------------------------------------------------------

def test_revoke_and_the_last_key_needs_drop_adapter(clone, stores):
    d, store, keys = clone["dir"], clone["store"], clone["keys"]
    gate_before = Manifest.read(d).access["gate"]["file"]
    assert revoke_key(d, "a2", store, gate_config=GATE) is None
    m = Manifest.read(d)
    assert "a2" not in key_entries(m) and "alpha" in m.adapters and m.access["gate"]["file"] != gate_before
    assert keys["a2"].key_id not in held_key_ids(store, keys["a2"].bundle_id)
    assert not list((d / "access").glob("a2.*"))
    assert unlocks(clone, stores, keys["a2"]) == (None, None)
    assert unlocks(clone, stores, keys["a1"])[0] == "alpha"
    # a1 is now alpha's last key: revoking it must be asked for, and changes nothing otherwise
    before, ring = snapshot(d), keyring_snapshot(store)
    with pytest.raises(AccessError, match="'a1' is the last key of revealing adapter 'alpha'.*--drop-adapter"):
        revoke_key(d, "a1", store, gate_config=GATE)
    assert snapshot(d) == before and keyring_snapshot(store) == ring
    assert revoke_key(d, "a1", store, drop_adapter=True, gate_config=GATE) == "alpha"
    m = Manifest.read(d)
    assert "alpha" not in m.adapters and "a1" not in key_entries(m) and m.access["gate"]["classes"] == ["beta", "gamma"]
    assert unlocks(clone, stores, keys["a1"]) == (None, None)
    assert unlocks(clone, stores, keys["b1"])[0] == "beta"
    with pytest.raises(ConfigError, match="'beta' is a revealing adapter"):
        remove_adapter(d, "beta")  # only through its keys
    # drop_adapter with other keys left drops nothing
    assert revoke_key(d, "b1", store, drop_adapter=True, gate_config=GATE) is None
    assert "beta" in Manifest.read(d).adapters
    # the last keys of all: no gate left, nothing unlocks, the bundle still loads
    revoke_key(d, "b2", store, drop_adapter=True, gate_config=GATE)
    revoke_key(d, "c1", store, drop_adapter=True, gate_config=GATE)
    m = Manifest.read(d)
    assert key_entries(m) == {} and "gate" not in m.access and revealing_adapters(m) == {}
    assert not list((d / "access").iterdir())
    assert held_key_ids(store, m.bundle_id) == []
    assert unlocks(clone, stores, *keys.values()) == (None, None)
    assert set(load_bundle(d, store=store).adapters) == {"secure"}


# -- import / export -------------------------------------------------------------------------------

def test_export_returns_the_same_text_and_import_checks_it(table, stores, sg_tmp, sg_base):
    d = table["dir"]
    for name, key in table["keys"].items():
        assert export_key(d, name, table["store"]).text() == key.text()
    user = stores()
    before = snapshot(d)
    entry = import_key(d, "\n  " + table["keys"]["b2"].text() + "\n", user)
    assert entry.name == "b2" and entry.adapter == "beta"
    assert user.list() == [table["keys"]["b2"].entry] and user.get(table["keys"]["b2"].entry) == table["keys"]["b2"].secret
    assert export_key(d, "b2", user).text() == table["keys"]["b2"].text()
    assert AccessControl(d, table["encoder"], user).unlock().name == "beta"
    assert snapshot(d) == before  # import touches the keyring only
    # refused: and then neither the keyring nor the bundle changed
    key = table["keys"]["a1"]
    other_bundle = generate("otherbundle0001")
    wrong_secret = dataclasses.replace(key, secret=bytes(32))
    refused = {
        "not a key": ("hello", AccessError, "not an Umbra access key"),
        "bad prefix": (key.text().replace("umbra-ak1", "umbra-ak2"), AccessError, "not an Umbra access key"),
        "short secret": (dataclasses.replace(key, secret=key.secret[:31]).text(), AccessError, "32 bytes"),
        "long secret": (dataclasses.replace(key, secret=key.secret + b"!").text(), AccessError, "32 bytes"),
        "another bundle": (other_bundle.text(), AccessError, "belongs to another bundle"),
        "unknown key id": (dataclasses.replace(key, key_id="0123456789abcdef").text(), AccessError, "not a current key"),
        "wrong secret": (wrong_secret.text(), SealError, "cannot be decrypted"),
        "b1's secret as a1": (dataclasses.replace(table["keys"]["b1"], key_id=key.key_id).text(), SealError,
                              "cannot be decrypted"),
    }
    ring = keyring_snapshot(user)
    for what, (text, error, match) in refused.items():
        with pytest.raises(error, match=match) as info:
            import_key(d, text, user)
        assert isinstance(info.value, ConfigError), what
        assert key.secret.hex() not in str(info.value) and text.rsplit(":", 1)[-1] not in str(info.value), what
        assert keyring_snapshot(user) == ring and snapshot(d) == before, what
