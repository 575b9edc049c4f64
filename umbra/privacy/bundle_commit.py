"""How a client bundle changes: manifest.json is the single atomic commit point.

    with bundle_change(bundle_dir) as change:        # an exclusive lock; the manifest as committed
        name = change.store("adapters", "python", data)      # a new content-addressed file
        change.manifest.adapters["python"] = {...}
    # on leaving the block: manifest.json replaced atomically, then files no manifest names swept

A change only ever adds files under new names (their sha256 in the name) and never touches a
file the committed manifest names, so until the manifest is replaced the bundle is exactly as
it was, and after it, exactly as changed: a crash, an exception in the block or a bad input
leaves it as it was (at worst with an unreferenced file, which the next change sweeps). Writers
exclude each other through an flock on `.lock`; readers need no lock."""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from umbra.atomic import write_atomic
from umbra.errors import ConfigError
from umbra.privacy.manifest import FILENAME, FORMAT_VERSION, Manifest, sha256_file

LOCK = ".lock"
SWEPT_DIRS = ("adapters", "access", "private_path")  # content-addressed files live here, and the client weights at the top


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class BundleChange:
    dir: Path
    manifest: Manifest  # edit in place; committed when the block ends without an exception

    def store(self, subdir: str, stem: str, data: bytes, suffix: str = ".safetensors") -> str:
        """Write `data` under a content-addressed name; returns the bundle-relative path."""
        digest = hashlib.sha256(data).hexdigest()
        rel = f"{subdir}/{stem}.{digest[:12]}{suffix}" if subdir else f"{stem}.{digest[:12]}{suffix}"
        path = self.dir / rel
        path.parent.mkdir(mode=0o700, exist_ok=True)
        if not (path.is_file() and sha256_file(path) == digest):
            write_atomic(path, data)
        return rel


def referenced(manifest: Manifest) -> set[str]:
    """Every bundle-relative file the manifest names."""
    files = set(manifest.files) | set(manifest.weights.values()) | {e["file"] for e in manifest.adapters.values()}
    access = manifest.access or {}
    files |= {k["file"] for k in access.get("keys", {}).values()}
    if access.get("gate"):
        files.add(access["gate"]["file"])
    path = manifest.privacy.get("private_path")  # umbra/privacy/bundle_private_path.py
    if isinstance(path, dict) and isinstance(path.get("file"), str):
        files.add(path["file"])
    return files - {""}


def sweep(bundle_dir: Path, manifest: Manifest) -> list[str]:
    """Remove weight and adapter files the committed manifest no longer names."""
    keep, removed = referenced(manifest), []
    candidates = [*bundle_dir.glob("client*.safetensors"), *bundle_dir.glob("indvocab*.safetensors")]
    for sub in SWEPT_DIRS:
        if (bundle_dir / sub).is_dir():
            candidates += [p for p in (bundle_dir / sub).iterdir() if p.is_file()]
    for path in candidates:
        rel = path.relative_to(bundle_dir).as_posix()
        if rel not in keep:
            path.unlink(missing_ok=True)
            removed.append(rel)
    return removed


@contextlib.contextmanager
def bundle_lock(bundle_dir: Path) -> Iterator[None]:
    fd = os.open(bundle_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@contextlib.contextmanager
def bundle_change(bundle_dir: str | Path) -> Iterator[BundleChange]:
    d = Path(bundle_dir)
    if not (d / FILENAME).is_file():
        raise ConfigError(f"{d} is not a client bundle (no {FILENAME}); make one with `umbra init`")
    with bundle_lock(d):
        change = BundleChange(d, Manifest.read(d))  # re-read under the lock: another writer may have committed
        yield change
        change.manifest.format_version = FORMAT_VERSION  # a version-1 bundle is migrated by its first change
        change.manifest.updated = now()
        write_atomic(d / FILENAME, change.manifest.to_json().encode())
        sweep(d, change.manifest)
