"""The access section of a bundle when things go wrong (umbra/securegate/bundle_access.py): every
refused change, a keyring missing entries, a corrupted sealed file, a key of another bundle, an
interrupt after the commit and two changes committing at once leave the bundle and the keyring
exactly as they were, or as the committed change left them. The table and its clones:
conftest.py, access_table.py."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from keys.access_keys import delete_key, held_key_ids, load_key
from umbra.errors import ConfigError
from umbra.model.adapters import BottleneckConfig, LoraConfig
from umbra.privacy.bundle import BundleConfig, init_bundle
from umbra.privacy.manifest import Manifest
from umbra.securegate.bundle_access import (add_revealing_adapter, create_key, export_key, import_key, key_entries,
                                            revoke_key, rotate_key)
from umbra.securegate.errors import AccessError

from .access_table import GATE, unlocks
from .helpers import current_ids, keyring_snapshot, make_adapter, referenced_files_whole, snapshot


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
    assert unlocks(clone, stores, new)[0] == "alpha"


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
    assert unlocks(clone, stores, keys["a1"]) == (None, None)
    assert unlocks(clone, stores, keys["a2"])[0] == "alpha"
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
    assert unlocks(table, stores, dataclasses.replace(mine, secret=theirs.secret)) == (None, None)
    assert unlocks(table, stores, theirs) == (None, None)  # held under its own bundle's entry


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
    assert unlocks(clone, stores, new)[0] == "gamma"
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
    assert unlocks(clone, stores, b)[0] == "alpha"
