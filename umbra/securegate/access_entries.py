"""What a bundle's access section says (manifest.access, umbra/securegate/bundle_access.py):
its keys' entries, its revealing adapters, and reading them back — a sealed adapter's file
checked against its digest and opened with a key this keyring holds, its plaintext loaded as a
module (in memory only).

    manifest.access = {
      "keys": {NAME: {"key_id", "adapter", "file": "access/NAME.<sha>.sealed", "sha256", "created", "rotated"}},
      "gate": {"file": "access/gate.<sha>.safetensors", "sha256", "classes": [...], "config": {...}, "trained", "report"},
    }

A revealing adapter's manifest entry (role "revealing") records its kind and config but names no
file: its only copies are the per-key ciphertexts."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from keys import KeyNotFound, KeyStore
from keys.access_keys import load_key
from umbra.model.adapters.files import adapter_from_bytes
from umbra.model.adapters.modules import Adapter
from umbra.privacy.bundle_adapters import bundle_shape
from umbra.privacy.manifest import AdapterEntry, Manifest, sha256_file
from umbra.securegate.errors import AccessError
from umbra.securegate.sealing import open_adapter

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


def unknown_key(manifest: Manifest, name: str) -> AccessError:
    known = ", ".join(sorted(key_entries(manifest))) or "none"
    return AccessError(f"this bundle has no access key named {name!r} (it has: {known})")


def read_sealed(d: Path, entry: KeyEntry) -> bytes:
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
        return open_adapter(read_sealed(d, entry), key, adapter)
    names = ", ".join(e.name for e in entries) or "none"
    raise AccessError(f"no key of revealing adapter {adapter!r} is in this keyring (its keys: {names}); "
                      f"run this where they were created, or import one with `umbra keys access import`")


def load_revealing(plain: bytes, d: Path, manifest: Manifest, adapter: str, dtype=None) -> Adapter:
    """A decrypted revealing adapter as a module (in memory only), checked like any adapter file."""
    spec, shape = bundle_shape(d, manifest)
    return adapter_from_bytes(plain, f"sealed adapter {adapter}", spec, shape, name=adapter, dtype=dtype).eval()
