"""One access change of a bundle (umbra/securegate/bundle_access.py's operations run inside one):
the bundle change (umbra/privacy/bundle_commit.py) plus the keyring writes that go with it, in
this order, the manifest commit being the one point where the bundle switches from old to new:

    1 open   the adapter's plaintext, in memory, with a key of it this keyring holds
    2 key    the new key's secret into the OS keyring (its own entry, access/<bundle>/<key id>)
    3 seal   the new ciphertext, under a new content-addressed name
    4 gate   retrain the gate over every current key's embedding (all must be in this keyring),
             written under a new content-addressed name
    5 commit replace manifest.json
    6 clean  delete the keyring entries of keys the manifest no longer names

A process killed before 5 leaves the old state whole (the new entry and files are orphans that
the next change sweeps; a change that fails with an exception removes them itself); after 5, the
new state whole, even if an exception (Ctrl-C) comes after the commit. Step 6 holds the bundle
lock, so it never deletes the new key of a change that has not committed yet. `progress(step)`
is called after each step (the CLI reports it; tests kill the process there). Adapters are never
retrained."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from keys import KeyNotFound, KeyStore
from keys.access_keys import AccessKey, delete_key, generate, held_key_ids, load_key, store_key
from umbra.privacy.bundle_commit import bundle_change, bundle_lock, now, sweep
from umbra.privacy.manifest import Manifest
from umbra.securegate.access_entries import KeyEntry, key_entries
from umbra.securegate.errors import AccessError
from umbra.securegate.gate import GateConfig, GateReport, KeyEncoder, gate_bytes, train_gate
from umbra.securegate.sealing import seal_adapter

Progress = Callable[[str], None]
STEPS = ("open", "key", "seal", "gate", "commit", "clean")


def _valid_secrets(manifest: Manifest, keys: dict[str, KeyEntry], store: KeyStore,
                   new: dict[str, AccessKey]) -> dict[str, list[bytes]]:
    """adapter -> secrets of its current keys (the keyring's, or the new ones being committed)."""
    out: dict[str, list[bytes]] = {}
    for name, entry in sorted(keys.items()):
        if name in new:
            secret = new[name].secret
        else:
            try:
                secret = load_key(store, manifest.bundle_id, entry.key_id).secret
            except KeyNotFound as exc:
                raise AccessError(f"the gate is retrained over every key of the bundle, and key {name!r} is not in "
                                  f"this keyring: run this where the keys were created (or import it)") from exc
        out.setdefault(entry.adapter, []).append(secret)
    return out


class AccessChange:
    """One access change: the bundle change plus the keyring writes that go with it."""

    def __init__(self, bundle_dir, store: KeyStore, progress: Progress | None, encoder=None,
                 gate_config: GateConfig | None = None):
        self.dir, self.store = Path(bundle_dir), store
        self.progress = progress or (lambda step: None)
        self.encoder, self.gate_config = encoder, gate_config
        self.new_keys: dict[str, AccessKey] = {}
        self.wrote = False  # files stored by this change (content-addressed, unreferenced until the commit)
        self.report: GateReport | None = None

    def new_key(self, change, name: str) -> AccessKey:
        key = generate(change.manifest.bundle_id)
        store_key(self.store, key)
        self.new_keys[name] = key
        self.progress("key")
        return key

    def seal(self, change, name: str, key: AccessKey, adapter: str, plain: bytes, rotated: str | None = None) -> None:
        blob = seal_adapter(plain, key, adapter)
        self.wrote = True
        rel = change.store("access", name, blob, suffix=".sealed")
        old = change.manifest.access.get("keys", {}).get(name)
        entry = KeyEntry(name, key.key_id, adapter, rel, hashlib.sha256(blob).hexdigest(),
                         old["created"] if old and rotated else now(), rotated)
        change.manifest.access.setdefault("keys", {})[name] = entry.to_json()
        self.progress("seal")

    def retrain_gate(self, change) -> None:
        keys = key_entries(change.manifest)
        if not keys:
            change.manifest.access.pop("gate", None)
            self.progress("gate")
            return
        valid = _valid_secrets(change.manifest, keys, self.store, self.new_keys)
        encoder = self.encoder or bundle_encoder(self.dir, self.store)
        gate, self.report = train_gate(KeyEncoder(encoder, change.manifest.bundle_id), valid, self.gate_config)
        data = gate_bytes(gate)
        self.wrote = True
        rel = change.store("access", "gate", data)
        change.manifest.access["gate"] = {
            "file": rel, "sha256": hashlib.sha256(data).hexdigest(), "classes": list(gate.classes),
            "config": asdict(gate.config), "trained": now(), "report": asdict(self.report),
        }
        self.progress("gate")

    def abort(self) -> None:
        """Undo a change that failed: its files and its new keyring entries, unless the manifest on
        disk names them (the failure came after the commit, e.g. in the commit's file sweep)."""
        if not (self.new_keys or self.wrote):
            return
        try:
            with bundle_lock(self.dir):
                manifest = Manifest.read(self.dir)
                named = {e.key_id for e in key_entries(manifest).values()}
                sweep(self.dir, manifest)
        except Exception:  # noqa: BLE001 - cannot tell what was committed: keep it all, the next change sweeps
            return
        for key in self.new_keys.values():
            if key.key_id in named:
                continue
            try:
                delete_key(self.store, key.bundle_id, key.key_id)
            except Exception:  # noqa: BLE001 - an orphan entry is swept by the next change
                pass

    def clean(self) -> None:
        """Step 6, under the bundle lock: a change that stored its new key holds the lock until its
        manifest names it, so this sweep never sees that key unnamed."""
        with bundle_lock(self.dir):
            sweep_keyring(Manifest.read(self.dir), self.store)
        self.progress("clean")


def bundle_encoder(d: Path, store: KeyStore):
    """The bundle's client encoder (what the gating pass runs), loaded with its key from the keyring."""
    from umbra.privacy.bundle import load_bundle

    return load_bundle(d, store=store).encoder


def run_change(bundle_dir, store: KeyStore, progress, encoder, gate_config, body) -> object:
    """Run `body(change, access_change)` inside one bundle change; keyring writes and files undone
    on failure. Once the manifest is committed nothing is undone: an exception from `progress`
    (Ctrl-C while the CLI reports) must not delete the key the bundle now names."""
    ac = AccessChange(bundle_dir, store, progress, encoder, gate_config)
    try:
        with bundle_change(ac.dir) as change:
            change.manifest.access = dict(change.manifest.access or {})
            result = body(change, ac)
    except BaseException:
        ac.abort()
        raise
    ac.progress("commit")
    ac.clean()
    return result


def sweep_keyring(manifest: Manifest, store: KeyStore) -> list[str]:
    """Delete this keyring's access keys of the bundle that the manifest no longer names (rotated
    or revoked); they open nothing in it. Returns the key ids removed."""
    current = {e.key_id for e in key_entries(manifest).values()}
    removed = []
    for key_id in held_key_ids(store, manifest.bundle_id):
        if key_id not in current:
            delete_key(store, manifest.bundle_id, key_id)
            removed.append(key_id)
    return removed
