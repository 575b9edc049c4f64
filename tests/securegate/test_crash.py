"""Crash safety of access changes (umbra/securegate/bundle_access.py): for every step of
bundle_access.STEPS that rotate_key, create_key, revoke_key and add_revealing_adapter reach,
another process running the change is SIGKILLed by its own progress callback at that step (the
op server of helpers.py forks one child per case; the child kills itself). Then, here:

- the manifest reads, load_bundle works, every file the manifest names is there with its hash;
- either the old or the new key fully works — imported into a fresh keyring it unlocks its
  revealing adapter (weights as built), and export gives back the same text — and the other
  opens nothing (no unlock, import refused, no ciphertext of the bundle under its key id);
- killed before the commit the bundle is the old one, from the commit on the new one;
- a following change succeeds and sweeps the orphans (keyring entries and files)."""

from __future__ import annotations

import os

import pytest

from keys.access_keys import AccessKey, load_key
from umbra.errors import ConfigError
from umbra.model.adapters import BottleneckConfig, LoraConfig
from umbra.privacy.bundle import BundleConfig, init_bundle, load_bundle
from umbra.privacy.bundle_adapters import add_adapter
from umbra.privacy.bundle_commit import referenced
from umbra.privacy.manifest import Manifest, sha256_file
from umbra.securegate.access import AccessControl
from umbra.securegate.bundle_access import (STEPS, add_revealing_adapter, create_key, export_key, import_key,
                                            key_entries, revoke_key, rotate_key)
from umbra.securegate.gate import GateConfig
from umbra.securegate.sealing import sealed_fields

from .helpers import ADDED_SEED, SMALL_GATE, access_ids, clone_bundle, current_ids, make_adapter, same_weights

# The gate is not this module's subject (test_gate.py trains the default one): helpers.SMALL_GATE,
# whose every training still checks every valid key and 64 fresh requests of every class, and a
# key the gate misroutes still opens nothing (the seal).
CRASH_GATE = SMALL_GATE
GATE = GateConfig(**CRASH_GATE)
# op -> (key name, arg, the steps it reports)
OPS = {
    "rotate": ("k1", "", STEPS),
    "create": ("k3", "team", STEPS),
    "revoke": ("k2", "", tuple(s for s in STEPS if s != "seal")),  # nothing is sealed
    "add": ("x1", "extra", STEPS),
}
CASES = [(op, step) for op, (_, _, steps) in OPS.items() for step in steps]
COMMITTED = ("commit", "clean")  # progress("commit") comes after the manifest is replaced


@pytest.fixture(scope="module")
def template(op_server, sg_base, sg_tmp, stores, needles):
    """A bundle with a secure adapter and revealing adapter 'team' with keys k1 and k2 (the op
    server is asked for first: it starts importing while this is built)."""
    store = stores()
    d = sg_tmp("sg-crash-template") / "bundle"
    init_bundle(sg_base, BundleConfig(epsilon=13.0), d, store=store)
    add_adapter(d, make_adapter(d, "secure", BottleneckConfig(size=8), seed=40), role="secure")
    team = make_adapter(d, "team", BottleneckConfig(size=8), seed=41)
    keys = {"k1": add_revealing_adapter(d, team, "k1", store, gate_config=GATE)}
    keys["k2"] = create_key(d, "k2", "team", store, gate_config=GATE)
    for key in keys.values():
        needles.key(key)
    needles.adapter(team, bundle_dir=d)
    needles.sealed_in(d)
    extra = make_adapter(d, "extra", LoraConfig(rank=2), ADDED_SEED)  # what `add` seals, built alike
    needles.adapter(extra, bundle_dir=d)
    return dict(dir=d, store=store, keys=keys, adapters={"team": team, "extra": extra},
                encoder=load_bundle(d, store=store).encoder)


def test_each_change_reports_the_steps_the_cases_assume(template, tmp_path, stores):
    store = stores()
    d = clone_bundle(template["dir"], template["store"], tmp_path / "b", store)
    seen = {}
    for op, (name, arg, _) in OPS.items():
        steps = []
        kw = dict(progress=steps.append, gate_config=GATE, encoder=template["encoder"])
        if op == "rotate":
            rotate_key(d, name, store, **kw)
        elif op == "create":
            create_key(d, name, arg, store, **kw)
        elif op == "revoke":
            revoke_key(d, name, store, **kw)
        else:
            add_revealing_adapter(d, make_adapter(d, arg, LoraConfig(rank=2), ADDED_SEED), name, store, **kw)
        seen[op] = tuple(steps)
    assert seen == {op: steps for op, (_, _, steps) in OPS.items()}


@pytest.fixture(scope="module")
def killed(template, op_server, sg_tmp, stores, needles):
    """Every case at once: a clone of the template per case, and each change run in its own child
    process, two at a time, killed by its own progress callback at the case's step."""
    t = template
    clones = {}
    for op, step in CASES:
        store = stores()
        clones[(op, step)] = (clone_bundle(t["dir"], t["store"], sg_tmp(f"sg-crash-{op}-{step}") / "b", store), store)
    requests = [(op, clones[(op, step)][0], clones[(op, step)][1], OPS[op][0], OPS[op][1], step) for op, step in CASES]
    results = op_server.run_many(requests, parallel=2, gate=CRASH_GATE)
    return {case: (*clones[case], result) for case, result in zip(CASES, results)}


def _works(t, d, store, stores, key: AccessKey, name: str, adapter: str) -> None:
    """The key fully works: a fresh keyring imports it, unlocks the adapter as built; export of
    the admin's copy gives the same text."""
    user = stores()
    entry = import_key(d, key.text(), user)
    assert (entry.name, entry.adapter, entry.key_id) == (name, adapter, key.key_id)
    unlocked = AccessControl(d, t["encoder"], user).unlock()
    assert unlocked is not None and unlocked.name == adapter, (name, key.key_id)
    assert same_weights(unlocked.adapter, t["adapters"][adapter])
    assert export_key(d, name, store).text() == key.text()


def _dead(t, d, stores, key: AccessKey) -> None:
    """The key opens nothing in the bundle: held, it unlocks nothing; import is refused; no
    ciphertext the manifest names is under its key id."""
    user = stores()
    user.set(key.entry, key.secret)
    assert AccessControl(d, t["encoder"], user).unlock() is None, key.key_id
    with pytest.raises(ConfigError):
        import_key(d, key.text(), stores())
    m = Manifest.read(d)
    assert key.key_id not in {e.key_id for e in key_entries(m).values()}
    for e in key_entries(m).values():
        assert sealed_fields((d / e.file).read_bytes())["key_id"] != key.key_id


def _whole(d, store) -> Manifest:
    m = Manifest.read(d)
    for rel in referenced(m):
        assert (d / rel).is_file(), rel
    for e in key_entries(m).values():
        assert sha256_file(d / e.file) == e.sha256
    assert sha256_file(d / m.access["gate"]["file"]) == m.access["gate"]["sha256"]
    load_bundle(d, store=store)
    return m


@pytest.mark.parametrize("op,step", CASES, ids=[f"{op}-killed-at-{step}" for op, step in CASES])
def test_a_change_killed_at_a_step_leaves_one_working_state(template, killed, stores, needles, op, step):
    t = template
    d, store, result = killed[(op, step)]
    name, arg, _ = OPS[op]
    before_ids = current_ids(t["dir"])
    k1, k2 = t["keys"]["k1"], t["keys"]["k2"]
    assert result["exit"] == -9, result  # killed by its own progress callback, at that step
    assert result["pid"] != os.getpid()

    # every key the dead process left in the keyring is a needle of the session's leak scan
    needles.keys_of(store, d)
    needles.sealed_in(d)
    m = _whole(d, store)
    ids = current_ids(d)
    held = access_ids(store, d)
    committed = step in COMMITTED
    orphans = {k: load_key(store, m.bundle_id, k) for k in held - set(ids.values())}

    if op == "rotate":
        if committed:
            assert ids["k1"] != k1.key_id and {n: i for n, i in ids.items() if n != "k1"} == {"k2": k2.key_id}
            new = load_key(store, m.bundle_id, ids["k1"])
            _works(t, d, store, stores, new, "k1", "team")
            _dead(t, d, stores, k1)
            assert set(orphans) == ({k1.key_id} if step == "commit" else set())
        else:
            assert ids == before_ids
            _works(t, d, store, stores, k1, "k1", "team")
            assert len(orphans) == (step in ("key", "seal", "gate"))
            for orphan in orphans.values():
                _dead(t, d, stores, orphan)
        _works(t, d, store, stores, k2, "k2", "team")
    elif op == "create":
        if committed:
            assert set(ids) == {"k1", "k2", "k3"} and ids["k1"] == k1.key_id
            _works(t, d, store, stores, load_key(store, m.bundle_id, ids["k3"]), "k3", "team")
            assert orphans == {}
        else:
            assert ids == before_ids
            assert len(orphans) == (step in ("key", "seal", "gate"))
            for orphan in orphans.values():
                _dead(t, d, stores, orphan)
        _works(t, d, store, stores, k1, "k1", "team")
    elif op == "revoke":
        if committed:
            assert ids == {"k1": k1.key_id}
            _dead(t, d, stores, k2)
            assert set(orphans) == ({k2.key_id} if step == "commit" else set())
        else:
            assert ids == before_ids and orphans == {}
            _works(t, d, store, stores, k2, "k2", "team")
        _works(t, d, store, stores, k1, "k1", "team")
    else:  # add
        if committed:
            assert m.adapters["extra"]["role"] == "revealing" and m.adapters["extra"]["file"] == ""
            _works(t, d, store, stores, load_key(store, m.bundle_id, ids["x1"]), "x1", "extra")
            assert orphans == {}
        else:
            assert "extra" not in m.adapters and ids == before_ids
            assert len(orphans) == (step in ("key", "seal", "gate"))
            for orphan in orphans.values():
                _dead(t, d, stores, orphan)
        _works(t, d, store, stores, k1, "k1", "team")

    # a following change succeeds and sweeps every orphan: keyring entries and files
    new_k1 = needles.key(rotate_key(d, "k1", store, gate_config=GATE, encoder=t["encoder"]))
    needles.sealed_in(d)
    m = _whole(d, store)
    assert access_ids(store, d) == set(current_ids(d).values())
    assert {f"access/{p.name}" for p in (d / "access").iterdir()} == {r for r in referenced(m) if r.startswith("access/")}
    _works(t, d, store, stores, new_k1, "k1", "team")
    for orphan in orphans.values():
        _dead(t, d, stores, orphan)
