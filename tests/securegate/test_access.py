"""AccessControl on the request path (umbra/securegate/access.py, ClientModel.unlock): the right
key unlocks its revealing adapter (the weights as built); every other situation — no key, a
wrong, malformed or other-bundle key, a key the gate routes to a ciphertext it cannot open, a
damaged sealed or gate file, a keyring that is gone — gives None and a completion that is EXACTLY
the secure adapter's, with no error. Rotation and revocation committed by another process take
effect on the next request without reloading the model. The decrypted adapter is in no file."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets

import pytest

from keys.access_keys import generate
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig
from umbra.middle.local import LocalMiddle
from umbra.model.adapters import AdapterSet, BottleneckConfig, LoraConfig
from umbra.privacy.bundle import BundleConfig, init_bundle, load_bundle
from umbra.privacy.bundle_adapters import add_adapter
from umbra.privacy.manifest import Manifest
from umbra.securegate.access import AccessControl
from umbra.securegate.bundle_access import add_revealing_adapter, create_key, key_entries
from umbra.securegate.gate import GateConfig

from .helpers import SMALL_GATE, clone_bundle, copy_entries, make_adapter, same_weights
from .needles import Needles, files_under, scan

GATE = GateConfig(**SMALL_GATE)
CONFIG = EngineConfig(stop=StopConfig(max_tokens=10, multiline=True))
PREFIX = "def greet(name):\n    message = 'hello ' + name\n    "
SUFFIX = "\n    return message\n"


@pytest.fixture(scope="module")
def world(sg_base, sg_tmp, stores, needles):
    """Bundle A: a python expert, a secure adapter, revealing adapters team (keys t1, t2) and ops
    (key o1). Bundle B: another bundle with the same adapter and key names. Admin keyrings."""
    admin = stores()
    root = sg_tmp("sg-access")
    a = root / "a"
    init_bundle(sg_base, BundleConfig(epsilon=13.0), a, store=admin)
    add_adapter(a, make_adapter(a, "python", LoraConfig(rank=4), seed=30), role="expert", language="python")
    add_adapter(a, make_adapter(a, "secure", BottleneckConfig(size=8), seed=31), role="secure")
    team = make_adapter(a, "team", BottleneckConfig(size=8), seed=32, std=0.5)
    ops = make_adapter(a, "ops", LoraConfig(rank=4), seed=33, std=0.5)
    keys = {"t1": add_revealing_adapter(a, team, "t1", admin, gate_config=GATE)}
    keys["t2"] = create_key(a, "t2", "team", admin, gate_config=GATE)
    keys["o1"] = add_revealing_adapter(a, ops, "o1", admin, gate_config=GATE)
    admin_b = stores()
    b = root / "b"
    init_bundle(sg_base, BundleConfig(epsilon=13.0), b, store=admin_b)
    keys["b:t1"] = add_revealing_adapter(b, make_adapter(b, "team", BottleneckConfig(size=8), seed=32, std=0.5), "t1",
                                         admin_b, gate_config=GATE)
    for key in keys.values():
        needles.key(key)
    for adapter in (team, ops):
        needles.adapter(adapter, bundle_dir=a)
    needles.sealed_in(a)
    needles.sealed_in(b)
    return dict(a=a, b=b, admin=admin, admin_b=admin_b, keys=keys, team=team, ops=ops, base=sg_base)


def _user(w, stores, *keys, bundle="a"):
    """A user's keyring for bundle A: its permutation key (to load the model) and these keys,
    stored under each key's own entry (whatever its bytes)."""
    store = stores()
    d = w[bundle]
    copy_entries(w["admin"] if bundle == "a" else w["admin_b"], store, prefix=f"bundle/{Manifest.read(d).bundle_id}/")
    for key in keys:
        store.set(key.entry, key.secret)
    return store


def _complete(engine, adapters=None, language="python"):
    async def go():
        if adapters is None:
            return await engine.complete(PREFIX, SUFFIX, language=language)
        async with engine.session() as session:
            return await session.complete(PREFIX, SUFFIX, adapters=adapters)
    return asyncio.run(go())


@pytest.fixture(scope="module")
def references(world, stores):
    """The secure and the revealing outputs, computed without AccessControl: adapter sets built
    from the bundle's plaintext adapters and the adapters as built (not as decrypted)."""
    model = ClientModel.from_bundle(world["a"], world["base"], store=_user(world, stores))
    engine = CompletionEngine.monolithic(model, CONFIG)
    shape = model.plan.shape(model.spec.num_layers)
    plain = model.adapters
    secure = _complete(engine, AdapterSet([plain["python"], plain["secure"]]).check_client(shape))
    team = _complete(engine, AdapterSet([plain["python"], world["team"]]).check_client(shape))
    ops = _complete(engine, AdapterSet([plain["python"], world["ops"]]).check_client(shape))
    assert len({secure.tokens, team.tokens, ops.tokens}) == 3, "the adapters must change the completion"
    return dict(secure=secure, team=team, ops=ops)


def _check(result, ref, access):
    assert result.tokens == ref.tokens and result.text == ref.text, (result.text, ref.text)
    assert result.access == access and result.expert == "python"


# -- the right key ----------------------------------------------------------------------------------

@pytest.mark.parametrize("held,adapter", [("t1", "team"), ("t2", "team"), ("o1", "ops")])
def test_the_right_key_unlocks_its_adapter_as_built(world, references, stores, held, adapter):
    store = _user(world, stores, world["keys"][held])
    model = ClientModel.from_bundle(world["a"], world["base"], store=store)
    unlocked = model.access.unlock()
    assert unlocked.name == adapter and same_weights(unlocked.adapter, world[adapter])
    assert unlocked.adapter is not world[adapter]  # decrypted from the bundle, not the object built
    result = _complete(CompletionEngine.monolithic(model, CONFIG))
    _check(result, references[adapter], f"revealing: {adapter}")
    assert result.adapters == tuple(sorted(("python", adapter)))


# -- everything else: the secure adapter, exactly ------------------------------------------------------

def _bad_keyrings(w) -> dict:
    k = w["keys"]
    t1 = k["t1"]
    flip = bytes([t1.secret[0] ^ 1]) + t1.secret[1:]
    other = generate(Manifest.read(w["a"]).bundle_id)  # a well-formed key this bundle never issued
    return {
        "no key": [],
        "a random key under t1's id": [dataclasses.replace(t1, secret=secrets.token_bytes(32))],
        "one bit of t1 flipped": [dataclasses.replace(t1, secret=flip)],
        "t1 with a trailing zero byte": [dataclasses.replace(t1, secret=t1.secret + b"\x00")],
        "t1 cut short": [dataclasses.replace(t1, secret=t1.secret[:31])],
        "t1 doubled": [dataclasses.replace(t1, secret=t1.secret * 2)],
        "a single byte": [dataclasses.replace(t1, secret=b"\x01")],
        "an unknown key id": [other],
        "bundle B's t1, held for B": [k["b:t1"]],
        "bundle B's t1 under A's t1 id": [dataclasses.replace(t1, secret=k["b:t1"].secret)],
        # the gate says 'team' (t1's secret is valid), the ciphertext of t2 does not open with it
        "t1's secret under t2's id": [dataclasses.replace(k["t2"], secret=t1.secret)],
        # the gate says 'ops', the entry is team's
        "o1's secret under t1's id": [dataclasses.replace(t1, secret=k["o1"].secret)],
        "all of the above at once": [dataclasses.replace(t1, secret=flip), other, k["b:t1"],
                                     dataclasses.replace(k["t2"], secret=k["o1"].secret)],
    }


def test_every_wrong_key_gives_exactly_the_secure_output(world, references, stores):
    for what, held in _bad_keyrings(world).items():
        store = _user(world, stores, *held)
        model = ClientModel.from_bundle(world["a"], world["base"], store=store)
        assert model.access.unlock() is None, what
        assert model.unlock() is None, what
        result = _complete(CompletionEngine.monolithic(model, CONFIG))
        _check(result, references["secure"], "secure")
        assert result.adapters == ("python", "secure"), what


def test_the_gate_routes_a_misplaced_valid_secret_and_the_encryption_stops_it(world, stores):
    """The gate only routes: t1's secret under t2's key id is routed to 'team' (so the lock that
    holds is the encryption, not the gate)."""
    from umbra.securegate.gate import KeyEncoder

    w = world
    access = AccessControl(w["a"], load_bundle(w["a"], store=w["admin"]).encoder, None)
    access.unlock()  # reads the manifest and the gate
    enc = KeyEncoder(access.encoder, Manifest.read(w["a"]).bundle_id)
    assert access._gate.route(enc.key_states([w["keys"]["t1"].secret])).tolist() == [1 + access._gate.classes.index(
        "team")]
    store = _user(w, stores, dataclasses.replace(w["keys"]["t2"], secret=w["keys"]["t1"].secret))
    assert AccessControl(w["a"], access.encoder, store).unlock() is None


def test_a_split_engine_gives_the_same_secure_output(world, stores):
    model = ClientModel.from_bundle(world["a"], world["base"], store=_user(world, stores))
    middle = LocalMiddle(model.load_middle())
    engine = CompletionEngine.split(model, middle, CONFIG)
    shape = model.plan.shape(model.spec.num_layers)
    secure = _complete(engine, AdapterSet([model.adapters["python"], model.adapters["secure"]]).check_client(shape))
    for what, held in _bad_keyrings(world).items():
        if what not in ("no key", "t1's secret under t2's id", "bundle B's t1 under A's t1 id"):
            continue
        wrong = ClientModel.from_bundle(world["a"], world["base"], store=_user(world, stores, *held))
        result = _complete(CompletionEngine.split(wrong, middle, CONFIG))
        assert result.tokens == secure.tokens and result.access == "secure", what
    right = ClientModel.from_bundle(world["a"], world["base"], store=_user(world, stores, world["keys"]["t1"]))
    result = _complete(CompletionEngine.split(right, middle, CONFIG))
    assert result.access == "revealing: team" and result.tokens != secure.tokens


@pytest.mark.parametrize("damage", ["sealed file flipped", "sealed file truncated", "sealed file deleted",
                                    "sealed file swapped", "gate file flipped", "gate file deleted",
                                    "manifest unreadable"])
def test_a_damaged_bundle_gives_the_secure_output(world, references, stores, tmp_path, damage):
    w = world
    admin = stores()
    d = clone_bundle(w["a"], w["admin"], tmp_path / "a", admin)
    m = Manifest.read(d)
    entries = key_entries(m)
    store = _user(dict(w, admin=admin, a=d), stores, w["keys"]["t1"])
    model = ClientModel.from_bundle(d, w["base"], store=store)  # loaded whole, damaged afterwards
    sealed, gate = d / entries["t1"].file, d / m.access["gate"]["file"]
    if damage == "sealed file flipped":
        blob = sealed.read_bytes()
        sealed.write_bytes(blob[:100] + bytes([blob[100] ^ 1]) + blob[101:])
    elif damage == "sealed file truncated":
        sealed.write_bytes(sealed.read_bytes()[:-16])
    elif damage == "sealed file deleted":
        sealed.unlink()
    elif damage == "sealed file swapped":
        sealed.write_bytes((d / entries["t2"].file).read_bytes())
    elif damage == "gate file flipped":
        blob = gate.read_bytes()
        gate.write_bytes(blob[:-8] + bytes([blob[-8] ^ 0x40]) + blob[-7:])
    elif damage == "gate file deleted":
        gate.unlink()
    else:
        (d / "manifest.json").write_text("{not json")
    assert model.unlock() is None
    result = _complete(CompletionEngine.monolithic(model, CONFIG))
    _check(result, references["secure"], "secure")
    if damage.startswith("sealed"):  # t2's holders are unaffected
        other = ClientModel.from_bundle(d, w["base"], store=_user(dict(w, admin=admin, a=d), stores, w["keys"]["t2"]))
        assert other.unlock() == "team"


def test_a_keyring_that_is_gone_gives_the_secure_output(world, references, stores, monkeypatch):
    """The model is loaded; then the Secret Service becomes unreachable (the session bus is
    gone), and later comes back: secure meanwhile, no error; the key works again after."""
    store = _user(world, stores, world["keys"]["t1"])
    model = ClientModel.from_bundle(world["a"], world["base"], store=store)
    engine = CompletionEngine.monolithic(model, CONFIG)
    assert model.unlock() == "team"
    with monkeypatch.context() as mp:
        mp.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path=/nonexistent/umbra-{secrets.token_hex(4)}")
        model.access.reload_keys()
        assert model.unlock() is None
        _check(_complete(engine), references["secure"], "secure")
    model.access.reload_keys()
    assert model.unlock() == "team"
    _check(_complete(engine), references["team"], "revealing: team")


def test_no_keyring_at_all_gives_the_secure_output(world, references, stores):
    model = ClientModel.from_bundle(world["a"], world["base"], store=_user(world, stores, world["keys"]["t1"]))
    model.access = AccessControl(world["a"], model.encoder, None)  # a client without any keyring
    assert model.unlock() is None
    _check(_complete(CompletionEngine.monolithic(model, CONFIG)), references["secure"], "secure")


def test_a_keyring_without_this_collection_gives_the_secure_output(world, references, stores):
    """A real Secret Service backend pointed at a collection that does not exist: every keyring
    call fails (KeyStoreUnavailable), the request is served by the secure adapter."""
    from keyring.backends import SecretService

    from keys import KeyStore, KeyStoreUnavailable

    backend = SecretService.Keyring()
    backend.preferred_collection = "/org/freedesktop/secrets/collection/umbra_absent_" + secrets.token_hex(4)
    broken = KeyStore(service=stores().service, backend=backend)
    with pytest.raises(KeyStoreUnavailable):
        broken.list()
    model = ClientModel.from_bundle(world["a"], world["base"], store=_user(world, stores, world["keys"]["t1"]))
    model.access = AccessControl(world["a"], model.encoder, broken)
    assert model.unlock() is None
    _check(_complete(CompletionEngine.monolithic(model, CONFIG)), references["secure"], "secure")


# -- changes by another process while a model is loaded ----------------------------------------------

def test_rotation_and_revocation_by_another_process_take_effect_on_the_next_request(world, references, stores,
                                                                                   tmp_path, needles, op_server):
    w = world
    admin = stores()
    d = clone_bundle(w["a"], w["admin"], tmp_path / "a", admin)
    wd = dict(w, admin=admin, a=d)
    old_t1, t2 = w["keys"]["t1"], w["keys"]["t2"]
    holder_t1 = ClientModel.from_bundle(d, w["base"], store=_user(wd, stores, old_t1))
    holder_t2 = ClientModel.from_bundle(d, w["base"], store=_user(wd, stores, t2))
    e1, e2 = CompletionEngine.monolithic(holder_t1, CONFIG), CompletionEngine.monolithic(holder_t2, CONFIG)
    _check(_complete(e1), references["team"], "revealing: team")
    _check(_complete(e2), references["team"], "revealing: team")
    # the admin rotates t1 in another process
    done = op_server.run("rotate", d, admin, "t1")
    assert done["exit"] == 0 and done["pid"] != os.getpid(), done["error"]
    new_id = key_entries(Manifest.read(d))["t1"].key_id
    assert new_id != old_t1.key_id
    from keys.access_keys import load_key

    new_t1 = needles.key(load_key(admin, old_t1.bundle_id, new_id))
    needles.sealed_in(d)
    _check(_complete(e1), references["secure"], "secure")  # the same model, next request
    _check(_complete(e2), references["team"], "revealing: team")
    # the holder imports the new key: the running model picks it up without a reload
    holder_t1.access.store.set(new_t1.entry, new_t1.secret)
    holder_t1.access.reload_keys()
    _check(_complete(e1), references["team"], "revealing: team")
    # the admin revokes t2 in another process
    done = op_server.run("revoke", d, admin, "t2")
    assert done["exit"] == 0, done["error"]
    _check(_complete(e2), references["secure"], "secure")
    _check(_complete(e1), references["team"], "revealing: team")
    # the admin drops the adapter with its last key: the router forgets it, nothing breaks
    done = op_server.run("revoke", d, admin, "t1", arg="drop")
    assert done["exit"] == 0, done["error"]
    assert "team" not in Manifest.read(d).adapters
    _check(_complete(e1), references["secure"], "secure")
    assert "team" not in holder_t1.router.revealing and "team" not in holder_t1.adapters


def test_the_decrypted_adapter_is_in_no_file(world, references, stores, tmp_path):
    """After unlocking and completing with every key, no file under the test's directories holds
    the plaintext adapter (whole or in windows) or anything derived from a key."""
    for name in ("t1", "t2", "o1"):
        model = ClientModel.from_bundle(world["a"], world["base"], store=_user(world, stores, world["keys"][name]))
        assert model.unlock() in ("team", "ops")
        _complete(CompletionEngine.monolithic(model, CONFIG))
    n = Needles()
    for key in world["keys"].values():
        n.key(key)
    n.adapter(world["team"], bundle_dir=world["a"])
    n.adapter(world["ops"], bundle_dir=world["a"])
    n.sealed_in(world["a"])
    files = files_under([world["a"].parent, tmp_path, world["base"]])
    assert len(files) > 20
    assert scan(files, n.needles) == []


def test_one_unreadable_keyring_entry_does_not_hide_the_other_keys(world, references, stores):
    """An entry of this bundle that cannot be read (not base64: written by another program) opens
    nothing, and the user's good key still unlocks its adapter."""
    import keyring

    store = _user(world, stores, world["keys"]["t1"])
    bundle_id = Manifest.read(world["a"]).bundle_id
    bad = f"access/{bundle_id}/{'0' * 16}"
    store.set(bad, b"placeholder")  # indexed like any entry, then overwritten behind Umbra's back
    keyring.get_keyring().set_password(store.service, bad, "not base64 !!")
    model = ClientModel.from_bundle(world["a"], world["base"], store=store)
    assert model.unlock() == "team"
    _check(_complete(CompletionEngine.monolithic(model, CONFIG)), references["team"], "revealing: team")
