"""The access section of a client bundle: access keys, their sealed revealing adapters and the
gate, changed only through one atomic manifest commit each (umbra/privacy/bundle_commit.py).

    manifest.access = {
      "keys": {NAME: {"key_id", "adapter", "file": "access/NAME.<sha>.sealed", "sha256", "created", "rotated"}},
      "gate": {"file": "access/gate.<sha>.safetensors", "sha256", "classes": [...], "config": {...}, "trained", "report"},
    }

A revealing adapter's manifest entry (role "revealing") records its kind and config but names no
file: its only copies are the per-key ciphertexts. Every operation runs in this order, and the
manifest commit is the one point where the bundle switches from old to new:

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
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from keys import KeyNotFound, KeyStore
from keys.access_keys import AccessKey, AccessKeyError, delete_key, generate, held_key_ids, load_key, parse, store_key
from umbra.model.adapters.config import config_to_dict
from umbra.model.adapters.files import adapter_bytes, adapter_from_bytes
from umbra.model.adapters.modules import Adapter
from umbra.privacy.bundle_adapters import bundle_shape, check_role
from umbra.privacy.bundle_commit import bundle_change, bundle_lock, now, sweep
from umbra.privacy.manifest import AdapterEntry, Manifest, sha256_file
from umbra.securegate.errors import AccessError
from umbra.securegate.gate import GateConfig, GateReport, KeyEncoder, gate_bytes, train_gate
from umbra.securegate.sealing import open_adapter, seal_adapter

Progress = Callable[[str], None]
STEPS = ("open", "key", "seal", "gate", "commit", "clean")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class KeyEntry:
    name: str
    key_id: str  # public; changes on rotation; names the keyring entry access/<bundle>/<key_id>
    adapter: str  # the revealing adapter this key opens
    file: str  # its ciphertext under this key: access/<name>.<sha256[:12]>.sealed
    sha256: str
    created: str
    rotated: str | None = None

    def to_json(self) -> dict:
        out = asdict(self)
        del out["name"]
        return out


def key_entries(manifest: Manifest) -> dict[str, KeyEntry]:
    keys = (manifest.access or {}).get("keys", {})
    if not isinstance(keys, dict):
        raise AccessError("the bundle manifest's access keys are malformed")
    try:
        return {name: KeyEntry(name=name, **data) for name, data in keys.items()}
    except TypeError as exc:
        raise AccessError(f"the bundle manifest's access keys are malformed: {exc}") from exc


def revealing_adapters(manifest: Manifest) -> dict[str, AdapterEntry]:
    return {n: e for n, e in manifest.adapter_entries().items() if e.role == "revealing"}


def check_name(name: str, what: str = "access key") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise AccessError(f"{name!r} is not a valid {what} name (letters, digits, '.', '_', '-'; at most 64)")
    return name


def _unknown_key(manifest: Manifest, name: str) -> AccessError:
    known = ", ".join(sorted(key_entries(manifest))) or "none"
    return AccessError(f"this bundle has no access key named {name!r} (it has: {known})")


def _read_sealed(d: Path, entry: KeyEntry) -> bytes:
    path = d / entry.file
    if not path.is_file() or sha256_file(path) != entry.sha256:
        raise AccessError(f"sealed adapter file {path} of key {entry.name!r} is missing or corrupted")
    return path.read_bytes()


def open_plaintext(d: Path, manifest: Manifest, adapter: str, store: KeyStore) -> bytes:
    """The revealing adapter's bytes, opened with any of its keys this keyring holds."""
    entries = [e for e in key_entries(manifest).values() if e.adapter == adapter]
    for entry in sorted(entries, key=lambda e: e.name):
        try:
            key = load_key(store, manifest.bundle_id, entry.key_id)
        except KeyNotFound:
            continue
        return open_adapter(_read_sealed(d, entry), key, adapter)
    names = ", ".join(e.name for e in entries) or "none"
    raise AccessError(f"no key of revealing adapter {adapter!r} is in this keyring (its keys: {names}); "
                      f"run this where they were created, or import one with `umbra keys access import`")


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


class _Change:
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


def _run(bundle_dir, store: KeyStore, progress, encoder, gate_config, body) -> object:
    """Run `body(change, access_change)` inside one bundle change; keyring writes and files undone
    on failure. Once the manifest is committed nothing is undone: an exception from `progress`
    (Ctrl-C while the CLI reports) must not delete the key the bundle now names."""
    ac = _Change(bundle_dir, store, progress, encoder, gate_config)
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

    return _run(bundle_dir, store, progress, encoder, gate_config, body)


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

    return _run(bundle_dir, store, progress, encoder, gate_config, body)


def rotate_key(bundle_dir, key_name: str, store: KeyStore, *, progress: Progress | None = None, encoder=None,
               gate_config: GateConfig | None = None) -> AccessKey:
    """Replace a key: new secret and key id, gate retrained, adapter re-sealed; the old key then
    opens nothing in this bundle (copies of its old ciphertext stay readable with it)."""

    def body(change, ac):
        m = change.manifest
        old = key_entries(m).get(key_name)
        if old is None:
            raise _unknown_key(m, key_name)
        try:
            old_key = load_key(ac.store, m.bundle_id, old.key_id)
        except KeyNotFound as exc:
            raise AccessError(f"rotating key {key_name!r} needs its current secret in this keyring "
                              f"(run it where the key was created, or import it first)") from exc
        plain = open_adapter(_read_sealed(ac.dir, old), old_key, old.adapter)
        ac.progress("open")
        key = ac.new_key(change, key_name)
        ac.seal(change, key_name, key, old.adapter, plain, rotated=now())
        ac.retrain_gate(change)
        return key

    return _run(bundle_dir, store, progress, encoder, gate_config, body)


def revoke_key(bundle_dir, key_name: str, store: KeyStore, *, drop_adapter: bool = False,
               progress: Progress | None = None, encoder=None, gate_config: GateConfig | None = None) -> str | None:
    """Remove a key (its ciphertext goes, the gate is retrained without it). Revoking the last key
    of an adapter leaves nothing that can open it, so it must be asked for (`drop_adapter`), and
    the adapter goes too. Returns the dropped adapter's name, if any."""

    def body(change, ac):
        m = change.manifest
        entry = key_entries(m).get(key_name)
        if entry is None:
            raise _unknown_key(m, key_name)
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

    return _run(bundle_dir, store, progress, encoder, gate_config, body)


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


def export_key(bundle_dir, key_name: str, store: KeyStore) -> AccessKey:
    m = Manifest.read(Path(bundle_dir))
    entry = key_entries(m).get(key_name)
    if entry is None:
        raise _unknown_key(m, key_name)
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
    open_adapter(_read_sealed(d, entry), key, entry.adapter)  # SealError: it does not open its adapter
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


def load_revealing(plain: bytes, d: Path, manifest: Manifest, adapter: str, dtype=None) -> Adapter:
    """A decrypted revealing adapter as a module (in memory only), checked like any adapter file."""
    spec, shape = bundle_shape(d, manifest)
    return adapter_from_bytes(plain, f"sealed adapter {adapter}", spec, shape, name=adapter, dtype=dtype).eval()
