"""The access section of a client bundle: access keys, their sealed revealing adapters and the
gate — add a revealing adapter, create, rotate, revoke, export and import a key, list them. Each
change is one atomic manifest commit (umbra/securegate/access_change.py, which holds the steps and
what a crash at each leaves); what the section says and how it is read back is in
umbra/securegate/access_entries.py (both re-exported here, where the CLI and the tests import
them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from keys import KeyNotFound, KeyStore
from keys.access_keys import AccessKey, AccessKeyError, held_key_ids, load_key, parse, store_key
from umbra.model.adapters.config import config_to_dict
from umbra.model.adapters.files import adapter_bytes
from umbra.model.adapters.modules import Adapter
from umbra.privacy.bundle_adapters import bundle_shape, check_role
from umbra.privacy.bundle_commit import now
from umbra.privacy.manifest import AdapterEntry, Manifest
from umbra.securegate.access_change import STEPS, Progress, bundle_encoder, run_change, sweep_keyring
from umbra.securegate.access_entries import (KeyEntry, check_name, key_entries, load_revealing, open_plaintext,
                                             read_sealed, revealing_adapters, unknown_key)
from umbra.securegate.errors import AccessError
from umbra.securegate.gate import GateConfig
from umbra.securegate.sealing import open_adapter

__all__ = [  # the operations, and what their callers also import from here
    "STEPS", "KeyEntry", "KeyStatus", "Progress", "add_revealing_adapter", "bundle_encoder", "check_name",
    "create_key", "export_key", "import_key", "key_entries", "key_statuses", "load_revealing", "revealing_adapters",
    "revoke_key", "rotate_key", "sweep_keyring",
]


def add_revealing_adapter(bundle_dir, adapter: Adapter, key_name: str, store: KeyStore, *, training: dict | None = None,
                          progress: Progress | None = None, encoder=None, gate_config: GateConfig | None = None) -> AccessKey:
    """Seal a new revealing adapter under a new access key (never written in plaintext); returns
    the key, to be shown once."""
    check_name(key_name)
    check_name(adapter.name, "adapter")
    check_role(adapter, "revealing", None)

    def body(change, ac):
        m = change.manifest
        if adapter.name in m.adapters:
            raise AccessError(f"the bundle already has an adapter named {adapter.name!r}")
        if key_name in key_entries(m):
            raise AccessError(f"the bundle already has an access key named {key_name!r}")
        spec, shape = bundle_shape(ac.dir, m)
        plain = adapter_bytes(adapter, spec, shape)
        ac.progress("open")
        key = ac.new_key(change, key_name)
        m.adapters[adapter.name] = AdapterEntry(
            name=adapter.name, kind=adapter.kind.value, placement=adapter.config.placement.value, role="revealing",
            file="", sha256="", config=config_to_dict(adapter.config), parameters=adapter.parameter_count,
            created=now(), training=dict(training or {})).to_json()
        ac.seal(change, key_name, key, adapter.name, plain)
        ac.retrain_gate(change)
        return key

    return run_change(bundle_dir, store, progress, encoder, gate_config, body)


def create_key(bundle_dir, key_name: str, adapter: str, store: KeyStore, *, progress: Progress | None = None,
               encoder=None, gate_config: GateConfig | None = None) -> AccessKey:
    """A new access key for an existing revealing adapter (one of its keys must be in this keyring)."""
    check_name(key_name)

    def body(change, ac):
        m = change.manifest
        if key_name in key_entries(m):
            raise AccessError(f"the bundle already has an access key named {key_name!r} (rotate it instead)")
        if adapter not in revealing_adapters(m):
            known = ", ".join(sorted(revealing_adapters(m))) or "none"
            raise AccessError(f"the bundle has no revealing adapter named {adapter!r} (it has: {known})")
        plain = open_plaintext(ac.dir, m, adapter, ac.store)
        ac.progress("open")
        key = ac.new_key(change, key_name)
        ac.seal(change, key_name, key, adapter, plain)
        ac.retrain_gate(change)
        return key

    return run_change(bundle_dir, store, progress, encoder, gate_config, body)


def rotate_key(bundle_dir, key_name: str, store: KeyStore, *, progress: Progress | None = None, encoder=None,
               gate_config: GateConfig | None = None) -> AccessKey:
    """Replace a key: new secret and key id, gate retrained, adapter re-sealed; the old key then
    opens nothing in this bundle (copies of its old ciphertext stay readable with it)."""

    def body(change, ac):
        m = change.manifest
        old = key_entries(m).get(key_name)
        if old is None:
            raise unknown_key(m, key_name)
        try:
            old_key = load_key(ac.store, m.bundle_id, old.key_id)
        except KeyNotFound as exc:
            raise AccessError(f"rotating key {key_name!r} needs its current secret in this keyring "
                              f"(run it where the key was created, or import it first)") from exc
        plain = open_adapter(read_sealed(ac.dir, old), old_key, old.adapter)
        ac.progress("open")
        key = ac.new_key(change, key_name)
        ac.seal(change, key_name, key, old.adapter, plain, rotated=now())
        ac.retrain_gate(change)
        return key

    return run_change(bundle_dir, store, progress, encoder, gate_config, body)


def revoke_key(bundle_dir, key_name: str, store: KeyStore, *, drop_adapter: bool = False,
               progress: Progress | None = None, encoder=None, gate_config: GateConfig | None = None) -> str | None:
    """Remove a key (its ciphertext goes, the gate is retrained without it). Revoking the last key
    of an adapter leaves nothing that can open it, so it must be asked for (`drop_adapter`), and
    the adapter goes too. Returns the dropped adapter's name, if any."""

    def body(change, ac):
        m = change.manifest
        entry = key_entries(m).get(key_name)
        if entry is None:
            raise unknown_key(m, key_name)
        others = [e for e in key_entries(m).values() if e.adapter == entry.adapter and e.name != key_name]
        if not others and not drop_adapter:
            raise AccessError(f"{key_name!r} is the last key of revealing adapter {entry.adapter!r}: revoking it "
                              f"makes the adapter unreadable; pass --drop-adapter to revoke it and drop the adapter")
        ac.progress("open")
        del m.access["keys"][key_name]
        dropped = None
        if not others:
            del m.adapters[entry.adapter]
            dropped = entry.adapter
        ac.progress("key")
        ac.retrain_gate(change)
        return dropped

    return run_change(bundle_dir, store, progress, encoder, gate_config, body)


def export_key(bundle_dir, key_name: str, store: KeyStore) -> AccessKey:
    m = Manifest.read(Path(bundle_dir))
    entry = key_entries(m).get(key_name)
    if entry is None:
        raise unknown_key(m, key_name)
    try:
        return load_key(store, m.bundle_id, entry.key_id)
    except KeyNotFound as exc:
        raise AccessError(f"key {key_name!r} is not in this keyring (it was created or imported elsewhere)") from exc


def import_key(bundle_dir, text: str, store: KeyStore) -> KeyEntry:
    """Check a distributed key against the bundle (its bundle, a current key id, and that it opens
    its sealed adapter) and store it in the keyring. Returns the key's entry."""
    d = Path(bundle_dir)
    m = Manifest.read(d)
    try:
        key = parse(text)
    except AccessKeyError as exc:
        raise AccessError(str(exc)) from exc
    if key.bundle_id != m.bundle_id:
        raise AccessError(f"this access key belongs to another bundle ({key.bundle_id}), not {m.bundle_id}")
    entry = next((e for e in key_entries(m).values() if e.key_id == key.key_id), None)
    if entry is None:
        raise AccessError("this access key is not a current key of the bundle (rotated or revoked): it opens nothing")
    open_adapter(read_sealed(d, entry), key, entry.adapter)  # SealError: it does not open its adapter
    store_key(store, key)
    return entry


@dataclass(frozen=True)
class KeyStatus:
    name: str
    adapter: str
    key_id: str
    held: bool  # this keyring holds the key's current secret
    created: str
    rotated: str | None


def key_statuses(bundle_dir, store: KeyStore) -> list[KeyStatus]:
    m = Manifest.read(Path(bundle_dir))
    held = set(held_key_ids(store, m.bundle_id))
    return [KeyStatus(e.name, e.adapter, e.key_id, e.key_id in held, e.created, e.rotated)
            for e in sorted(key_entries(m).values(), key=lambda e: e.name)]
