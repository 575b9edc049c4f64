"""Helpers of the SecureGate tests: adapters with every weight drawn from a seed (so a subprocess
builds exactly the adapter the parent checks), bundle and keyring snapshots and clones, users'
keyrings (the needle scan: needles.py; another process for access changes: op_server.py).

Imported as `securegate.helpers` (tests/ is on sys.path) by the test modules and by the crash
test's subprocesses; it imports nothing from pytest."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

import torch

from keys import KeyStore
from keys.access_keys import held_key_ids
from umbra.model.adapters import Adapter, build_adapter
from umbra.privacy.bundle_adapters import bundle_shape
from umbra.privacy.manifest import Manifest
from umbra.securegate.bundle_access import key_entries

# GateConfig kwargs where the gate is not the subject (test_gate.py trains the default one). Every
# valid key and 64 fresh requests of every key class are still checked at each training (the
# gate's own check), and a key the gate misroutes still opens nothing (the seal); only the
# training-time negatives are fewer: no mining passes over Gaussian draws, 256 near misses instead
# of 2,048, fewer random keys (a key embedding costs ~1.2 ms: a KeystreamRNG per key allocates
# 2 MiB). One training takes ~0.2 CPU-s instead of ~2 (with mining) or ~5-10 (the defaults); 30 of
# 30 trainings on random secrets routed every check right in their first round.
SMALL_GATE = dict(random_keys=128, absent_tokens=128, malformed_per_key=4, other_bundle_per_key=2,
                  check_per_class=64, steps=150, near_misses=256, mine_passes=0)


# -- adapters ----------------------------------------------------------------------------------------

def make_adapter(bundle_dir, name: str, config, seed: int, std: float = 0.3) -> Adapter:
    """An adapter of the bundle's shape with EVERY weight drawn from `seed` (not only the output
    weights: the input weights of build_adapter's init could coincide with another adapter's,
    and the leak scan must find only this adapter's bytes)."""
    d = Path(bundle_dir)
    spec, shape = bundle_shape(d, Manifest.read(d))
    adapter = build_adapter(name, config, spec, shape)
    gen = torch.Generator().manual_seed(10_000 + seed)
    with torch.no_grad():
        for p in adapter.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * std)
    adapter.touch()
    return adapter.eval()


def same_weights(a: Adapter, b: Adapter) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# -- snapshots ---------------------------------------------------------------------------------------

def snapshot(d) -> dict[str, bytes]:
    """Every file under `d` (relative path -> bytes), the lock file included."""
    d = Path(d)
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def secret_collection():
    """(connection, default collection with one open session): straight to the Secret Service,
    one connection and one session for many items (KeyStore pays both per call, 20-70 ms)."""
    import secretstorage
    from secretstorage.util import open_session

    conn = secretstorage.dbus_init()
    collection = secretstorage.get_default_collection(conn)
    collection.session = open_session(conn)
    return conn, collection


def _service_items(service: str):
    """(connection, items) of one keyring service."""
    conn, collection = secret_collection()
    return conn, list(collection.search_items({"service": service}))


def keyring_snapshot(store: KeyStore) -> dict[str, bytes]:
    """Everything the keyring holds under the store's service (its index entry included), as the
    Secret Service itself returns it."""
    conn, items = _service_items(store.service)
    try:
        return {item.get_attributes()["username"]: item.get_secret() for item in items}
    finally:
        conn.close()


def new_store() -> KeyStore:
    """A KeyStore over the real Secret Service under a fresh service name (no entries)."""
    return KeyStore(service=f"umbra-test-{secrets.token_hex(6)}")


def empty_stores(stores) -> None:
    """Delete every item of these stores' services (their indexes too), in one connection."""
    conn, collection = secret_collection()
    try:
        for service in {s.service for s in stores}:
            for item in list(collection.search_items({"service": service})):
                item.delete()
    finally:
        conn.close()


def copy_entries(src: KeyStore, dst: KeyStore, prefix: str = "") -> None:
    for name in src.list(prefix=prefix):
        dst.set(name, src.get(name))


def clone_bundle(src_dir, src_store: KeyStore, dst_dir, dst_store: KeyStore) -> Path:
    """A copy of a bundle and of everything its keyring service holds (permutation key, access
    keys, the store's index) under another service: the same bundle id, independent state."""
    shutil.copytree(src_dir, dst_dir)
    conn, collection = secret_collection()
    try:
        for item in list(collection.search_items({"service": src_store.service})):
            attributes = dict(item.get_attributes(), service=dst_store.service)
            collection.create_item(item.get_label(), attributes, item.get_secret(), replace=True)
    finally:
        conn.close()
    return Path(dst_dir)


def access_ids(store: KeyStore, bundle_dir) -> set[str]:
    return set(held_key_ids(store, Manifest.read(Path(bundle_dir)).bundle_id))


def current_ids(bundle_dir) -> dict[str, str]:
    """key name -> key id of the committed manifest."""
    return {n: e.key_id for n, e in key_entries(Manifest.read(Path(bundle_dir))).items()}


def referenced_files_whole(bundle_dir) -> None:
    """Every file the manifest names exists and has its hash; the access dir holds nothing else."""
    from umbra.privacy.bundle_commit import referenced
    from umbra.privacy.manifest import sha256_file

    d = Path(bundle_dir)
    m = Manifest.read(d)
    refs = referenced(m)
    for rel in refs:
        assert (d / rel).is_file(), rel
    for name, e in key_entries(m).items():
        assert sha256_file(d / e.file) == e.sha256, name
    gate = m.access.get("gate")
    if gate:
        assert sha256_file(d / gate["file"]) == gate["sha256"]
    if (d / "access").is_dir():
        assert {f"access/{p.name}" for p in (d / "access").iterdir()} <= refs


ADDED_SEED = 77  # the adapter an `add` in another process builds: make_adapter(d, arg, LoraConfig(rank=2), ADDED_SEED)
