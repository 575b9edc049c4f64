"""`umbra keys list` and `umbra keys rotate`: what the OS keyring holds for Umbra, and rotation
of a client bundle's permutation key. Only entry names are ever printed, never secrets."""

from __future__ import annotations

import sys
from pathlib import Path

from keys.store import DEFAULT_SERVICE, KeyStore


def list_keys(service: str = DEFAULT_SERVICE, out=sys.stdout) -> int:
    names = KeyStore(service).list()
    if not names:
        print(f"no keys in the OS keyring for service {service!r}", file=out)
    for name in names:
        print(name, file=out)
    return 0


def rotate_bundle(bundle_dir: str | Path, service: str = DEFAULT_SERVICE, out=sys.stdout) -> int:
    from umbra.privacy.bundle import rotate_bundle_key

    old, new = rotate_bundle_key(bundle_dir, KeyStore(service))
    print(f"rotated the permutation key of {bundle_dir}: key {old} -> {new} (old key deleted)", file=out)
    return 0
