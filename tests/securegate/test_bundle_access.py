"""The access section of a bundle (umbra/securegate/bundle_access.py): revealing adapters stored
only sealed, the paper's per-team table (several adapters, several keys each, every key opening
its own ciphertext only), rotation (new key id, old key opens nothing anywhere, adapters not
retrained), revocation, import/export, and every refused change leaving the bundle and the
keyring exactly as they were."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from keys import KeyNotFound
from keys.access_keys import delete_key, generate, held_key_ids, load_key
from umbra.errors import ConfigError
from umbra.model.adapters import BottleneckConfig, LoraConfig
from umbra.privacy.aead import SealError
from umbra.privacy.bundle import BundleConfig, init_bundle, load_bundle
from umbra.privacy.bundle_adapters import add_adapter, remove_adapter
from umbra.privacy.manifest import Manifest
from umbra.securegate.access import AccessControl
from umbra.securegate.bundle_access import (STEPS, add_revealing_adapter, create_key, export_key, import_key,
                                            key_entries, key_statuses, load_revealing, revealing_adapters, revoke_key,
                                            rotate_key)
from umbra.securegate.errors import AccessError
from umbra.securegate.gate import GateConfig
from umbra.securegate.sealing import open_adapter, sealed_fields

from .helpers import (SMALL_GATE, clone_bundle, current_ids, keyring_snapshot, make_adapter, referenced_files_whole,
                      same_weights, scan, snapshot)

GATE = GateConfig(**SMALL_GATE)
TABLE = {"alpha": ["a1", "a2"], "beta": ["b1", "b2"], "gamma": ["c1"]}  # adapter -> its keys


@pytest.fixture(scope="module")
def table(sg_base, sg_tmp, stores, needles):
    """A bundle with a secure adapter and three revealing ones (2, 2 and 1 keys), made through the
    public functions; its admin keyring; the adapters as built; the keys as returned."""
    store = stores()
    out = sg_tmp("sg-table") / "bundle"
    init_bundle(sg_base, BundleConfig(epsilon=13.0), out, store=store)
    add_adapter(out, make_adapter(out, "secure", BottleneckConfig(size=8), seed=20), role="secure")
    adapters, keys = {}, {}
    for i, (name, key_names) in enumerate(TABLE.items()):
        config = LoraConfig(rank=2) if i % 2 else BottleneckConfig(size=8)
        adapters[name] = make_adapter(out, name, config, seed=21 + i)
        needles.adapter(adapters[name], bundle_dir=out)
        steps = []
        keys[key_names[0]] = add_revealing_adapter(out, adapters[name], key_names[0], store, gate_config=GATE,
                                                   training={"method": "test"}, progress=steps.append)
        assert steps == list(STEPS)
        for extra in key_names[1:]:
            keys[extra] = create_key(out, extra, name, store, gate_config=GATE)
    for key in keys.values():
        needles.key(key)
    needles.sealed_in(out)
    encoder = load_bundle(out, store=store).encoder
    return dict(dir=out, store=store, adapters=adapters, keys=keys, encoder=encoder)


@pytest.fixture
def clone(table, tmp_path, stores):
    """A private copy of the table bundle and its admin keyring, for tests that change it."""
    store = stores()
    d = clone_bundle(table["dir"], table["store"], tmp_path / "bundle", store)
    return dict(table, dir=d, store=store)


def _unlocks(t, stores, *keys) -> tuple[str | None, object]:
    """What a user holding exactly these keys unlocks in bundle t (a fresh AccessControl)."""
    user = stores()
    for key in keys:
        user.set(key.entry, key.secret)
    unlocked = AccessControl(t["dir"], t["encoder"], user).unlock()
    return (None, None) if unlocked is None else (unlocked.name, unlocked.adapter)


def _same_adapter(t, name, plain: bytes) -> bool:
    """Decrypted bytes that load as exactly the adapter built (byte equality with adapter_bytes()
    does not hold: safetensors orders the metadata as it likes)."""
    d = t["dir"]
    return same_weights(load_revealing(plain, d, Manifest.read(d), name), t["adapters"][name])


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
    from .helpers import Needles

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
                assert _same_adapter(table, e.adapter, open_adapter(blob, key, e.adapter))
            else:
                with pytest.raises(SealError):
                    open_adapter(blob, key, e.adapter)
                with pytest.raises(SealError):  # even claiming the other entry's id
                    open_adapter(blob, dataclasses.replace(key, key_id=e.key_id), e.adapter)
        got, adapter = _unlocks(table, stores, key)
        assert got == entries[name].adapter and same_weights(adapter, table["adapters"][got])
    # the table as `keys access list` shows it: every key held by the admin
    statuses = key_statuses(d, table["store"])
    assert [(s.name, s.adapter, s.held) for s in statuses] == [
        (k, a, True) for a, ks in TABLE.items() for k in ks]


def test_keys_of_two_adapters_open_one_each(table, stores):
    """A user holding keys of two adapters gets one of them (the first by key name), never a mix."""
    got, adapter = _unlocks(table, stores, table["keys"]["b2"], table["keys"]["a2"])
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
    assert _unlocks(clone, stores, old) == (None, None)
    with pytest.raises(AccessError, match="not a current key"):
        import_key(d, old.text(), stores())
    # the new key opens the same adapter, unchanged (adapters are not retrained)
    got, adapter = _unlocks(clone, stores, new)
    assert got == "alpha" and same_weights(adapter, clone["adapters"]["alpha"])
    assert _same_adapter(clone, "alpha", open_adapter((d / after["a1"].file).read_bytes(), new, "alpha"))
    assert export_key(d, "a1", store).text() == new.text()
    # every other key still opens its own adapter
    for name in ("a2", "b1", "b2", "c1"):
        assert _unlocks(clone, stores, clone["keys"][name])[0] == after[name].adapter
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
    assert _unlocks(clone, stores, keys["a2"]) == (None, None)
    assert _unlocks(clone, stores, keys["a1"])[0] == "alpha"
    # a1 is now alpha's last key: revoking it must be asked for, and changes nothing otherwise
    before, ring = snapshot(d), keyring_snapshot(store)
    with pytest.raises(AccessError, match="'a1' is the last key of revealing adapter 'alpha'.*--drop-adapter"):
        revoke_key(d, "a1", store, gate_config=GATE)
    assert snapshot(d) == before and keyring_snapshot(store) == ring
    assert revoke_key(d, "a1", store, drop_adapter=True, gate_config=GATE) == "alpha"
    m = Manifest.read(d)
    assert "alpha" not in m.adapters and "a1" not in key_entries(m) and m.access["gate"]["classes"] == ["beta", "gamma"]
    assert _unlocks(clone, stores, keys["a1"]) == (None, None)
    assert _unlocks(clone, stores, keys["b1"])[0] == "beta"
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
    assert _unlocks(clone, stores, *keys.values()) == (None, None)
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


# -- refused changes leave everything as it was ---------------------------------------------------

def _refusals(t, sg_base):
    d, store = t["dir"], t["store"]
    fresh = lambda n: make_adapter(d, n, LoraConfig(rank=2), seed=90)  # noqa: E731
    return {
        "rotate an unknown key": (lambda: rotate_key(d, "nope", store, gate_config=GATE),
                                  r"no access key named 'nope' \(it has: a1, a2, b1, b2, c1\)"),
        "revoke an unknown key": (lambda: revoke_key(d, "nope", store, gate_config=GATE), "no access key named 'nope'"),
        "export an unknown key": (lambda: export_key(d, "nope", store), "no access key named 'nope'"),
        "create a key under a taken name": (lambda: create_key(d, "a1", "alpha", store, gate_config=GATE),
                                            "already has an access key named 'a1'"),
        "create a key for an unknown adapter": (lambda: create_key(d, "z1", "zeta", store, gate_config=GATE),
                                                r"no revealing adapter named 'zeta' \(it has: alpha, beta, gamma\)"),
        "create a key for the secure adapter": (lambda: create_key(d, "z1", "secure", store, gate_config=GATE),
                                                "no revealing adapter named 'secure'"),
        "create a key with a bad name": (lambda: create_key(d, "../x", "alpha", store, gate_config=GATE),
                                         "not a valid access key name"),
        "add an adapter under a taken name": (lambda: add_revealing_adapter(d, fresh("beta"), "z1", store,
                                                                            gate_config=GATE),
                                              "already has an adapter named 'beta'"),
        "add an adapter named like the secure one": (lambda: add_revealing_adapter(d, fresh("secure"), "z1", store,
                                                                                   gate_config=GATE),
                                                     "already has an adapter named 'secure'"),
        "add an adapter under a taken key name": (lambda: add_revealing_adapter(d, fresh("zeta"), "b2", store,
                                                                                gate_config=GATE),
                                                  "already has an access key named 'b2'"),
        "add an adapter with a bad key name": (lambda: add_revealing_adapter(d, fresh("zeta"), "", store,
                                                                             gate_config=GATE),
                                               "not a valid access key name"),
        "revoke the last key without drop": (lambda: revoke_key(d, "c1", store, gate_config=GATE), "last key"),
    }


def test_refused_changes_leave_bundle_and_keyring_as_they_were(clone, sg_base):
    d, store = clone["dir"], clone["store"]
    before, ring = snapshot(d), keyring_snapshot(store)
    for what, (attempt, match) in _refusals(clone, sg_base).items():
        with pytest.raises(ConfigError, match=match):
            attempt()
        assert snapshot(d) == before, what
        assert keyring_snapshot(store) == ring, what


def test_missing_keyring_entries_are_clear_errors_and_change_nothing(clone, stores):
    d, store, keys = clone["dir"], clone["store"], clone["keys"]
    delete_key(store, keys["b1"].bundle_id, keys["b1"].key_id)  # this keyring lost b1
    before, ring = snapshot(d), keyring_snapshot(store)
    cases = {
        "rotate a key the keyring lacks": (lambda: rotate_key(d, "b1", store, gate_config=GATE),
                                           "rotating key 'b1' needs its current secret in this keyring"),
        "export it": (lambda: export_key(d, "b1", store), "key 'b1' is not in this keyring"),
        # these get as far as storing a new key, then fail retraining the gate over every key:
        # the new keyring entry is removed again
        "create a key while another is missing": (lambda: create_key(d, "a3", "alpha", store, gate_config=GATE),
                                                  "key 'b1' is not in this keyring"),
        "rotate another key": (lambda: rotate_key(d, "a1", store, gate_config=GATE), "key 'b1' is not in this keyring"),
        "revoke another key": (lambda: revoke_key(d, "a2", store, gate_config=GATE), "key 'b1' is not in this keyring"),
    }
    for what, (attempt, match) in cases.items():
        with pytest.raises(AccessError, match=match):
            attempt()
        assert snapshot(d) == before, what
        assert keyring_snapshot(store) == ring, what
    # an adapter none of whose keys this keyring holds cannot get a new key
    delete_key(store, keys["c1"].bundle_id, keys["c1"].key_id)
    ring = keyring_snapshot(store)
    with pytest.raises(AccessError, match="no key of revealing adapter 'gamma' is in this keyring"):
        create_key(d, "c2", "gamma", store, gate_config=GATE)
    assert snapshot(d) == before and keyring_snapshot(store) == ring
    # an import of the missing key makes everything work again
    import_key(d, keys["b1"].text(), store)
    import_key(d, keys["c1"].text(), store)
    new = rotate_key(d, "a1", store, gate_config=GATE)
    assert _unlocks(clone, stores, new)[0] == "alpha"


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "deleted", "another key's file"])
def test_a_corrupted_sealed_file_is_a_clear_error_and_changes_nothing(clone, stores, damage):
    d, store, keys = clone["dir"], clone["store"], clone["keys"]
    m = Manifest.read(d)
    entries = key_entries(m)
    path = d / entries["a1"].file
    blob = path.read_bytes()
    if damage == "flipped byte":
        path.write_bytes(blob[:-40] + bytes([blob[-40] ^ 4]) + blob[-39:])
    elif damage == "truncated":
        path.write_bytes(blob[: len(blob) // 2])
    elif damage == "deleted":
        path.unlink()
    else:
        path.write_bytes((d / entries["a2"].file).read_bytes())
    before, ring = snapshot(d), keyring_snapshot(store)
    where = f"sealed adapter file {path} of key 'a1' is missing or corrupted"
    for what, attempt in {
        "rotate": lambda: rotate_key(d, "a1", store, gate_config=GATE),
        "create": lambda: create_key(d, "a3", "alpha", store, gate_config=GATE),  # opens alpha with a1 first
        "import": lambda: import_key(d, keys["a1"].text(), stores()),
    }.items():
        with pytest.raises(AccessError) as info:
            attempt()
        assert str(info.value) == where, what
        assert snapshot(d) == before and keyring_snapshot(store) == ring, what
    # at request time the damaged key opens nothing; the other key of alpha still does
    assert _unlocks(clone, stores, keys["a1"]) == (None, None)
    assert _unlocks(clone, stores, keys["a2"])[0] == "alpha"
    # revoking the damaged key repairs the bundle
    revoke_key(d, "a1", store, gate_config=GATE)
    referenced_files_whole(d)


def test_a_key_of_another_bundle_is_refused(table, sg_base, sg_tmp, stores):
    """Import refuses it; held in the keyring under this bundle's key id, it opens nothing."""
    other_store = stores()
    out = sg_tmp("sg-other-bundle") / "bundle"
    init_bundle(sg_base, BundleConfig(epsilon=13.0), out, store=other_store)
    theirs = add_revealing_adapter(out, make_adapter(out, "alpha", BottleneckConfig(size=8), seed=21), "a1",
                                   other_store, gate_config=GATE)  # same adapter and key names, other bundle
    with pytest.raises(AccessError, match="belongs to another bundle"):
        import_key(table["dir"], theirs.text(), stores())
    with pytest.raises(AccessError, match="belongs to another bundle"):
        import_key(out, table["keys"]["a1"].text(), stores())
    mine = table["keys"]["a1"]
    assert _unlocks(table, stores, dataclasses.replace(mine, secret=theirs.secret)) == (None, None)
    assert _unlocks(table, stores, theirs) == (None, None)  # held under its own bundle's entry


# -- what happens around the commit point ---------------------------------------------------------

def test_an_interrupt_after_the_commit_keeps_the_committed_key(clone, stores, needles):
    """A progress callback that raises after the manifest committed (Ctrl-C while the CLI reports
    the step): the bundle now names the new key, so its keyring entry must stay."""
    d, store = clone["dir"], clone["store"]

    def interrupt(step):
        if step == "commit":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rotate_key(d, "c1", store, gate_config=GATE, progress=interrupt)
    current = current_ids(d)["c1"]
    assert current != clone["keys"]["c1"].key_id  # committed
    assert current in held_key_ids(store, clone["keys"]["c1"].bundle_id), "the committed key was deleted"
    new = needles.key(load_key(store, clone["keys"]["c1"].bundle_id, current))
    assert _unlocks(clone, stores, new)[0] == "gamma"
    rotate_key(d, "c1", store, gate_config=GATE)  # and the next change sweeps the old one
    assert set(held_key_ids(store, new.bundle_id)) == set(current_ids(d).values())


def test_a_change_committing_meanwhile_keeps_the_key_another_change_just_stored(clone, stores, needles):
    """Change A commits and, before it sweeps the keyring, change B (another process, or thread)
    takes the bundle lock and stores its new key. A's sweep must not delete B's key: B's manifest
    will name it. (Here A = rotate b1 and B = create a3, in two threads.)"""
    d, store = clone["dir"], clone["store"]
    stored, result, errors = threading.Event(), {}, []

    def b_progress(step):
        if step == "key":
            stored.set()
            released.wait(timeout=1)  # give A every chance to sweep now (with the lock held, A waits)

    released = threading.Event()

    def run_b():
        try:
            result["b"] = create_key(d, "a3", "alpha", store, gate_config=GATE, progress=b_progress)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def a_progress(step):
        if step == "commit":  # A's manifest is written and its lock released; it has not swept yet
            thread.start()
            assert stored.wait(timeout=60)
        if step == "clean":
            released.set()

    thread = threading.Thread(target=run_b)
    rotate_key(d, "b1", store, gate_config=GATE, progress=a_progress)
    released.set()
    thread.join(timeout=120)
    assert not errors, errors
    b = needles.key(result["b"])
    assert current_ids(d)["a3"] == b.key_id
    assert b.key_id in held_key_ids(store, b.bundle_id), "the other change's committed key was swept away"
    assert _unlocks(clone, stores, b)[0] == "alpha"
