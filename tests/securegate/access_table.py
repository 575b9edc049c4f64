"""The SecureGate tests' access table (the paper's per-team table: three revealing adapters with 2,
2 and 1 keys) and what a user holding some of its keys unlocks; the `table` and `clone` fixtures
(conftest.py) build and copy it."""

from __future__ import annotations

from umbra.privacy.manifest import Manifest
from umbra.securegate.access import AccessControl
from umbra.securegate.bundle_access import load_revealing
from umbra.securegate.gate import GateConfig

from .helpers import SMALL_GATE, same_weights

GATE = GateConfig(**SMALL_GATE)
TABLE = {"alpha": ["a1", "a2"], "beta": ["b1", "b2"], "gamma": ["c1"]}  # adapter -> its keys


def unlocks(t, stores, *keys) -> tuple[str | None, object]:
    """What a user holding exactly these keys unlocks in bundle t (a fresh AccessControl)."""
    user = stores()
    for key in keys:
        user.set(key.entry, key.secret)
    unlocked = AccessControl(t["dir"], t["encoder"], user).unlock()
    return (None, None) if unlocked is None else (unlocked.name, unlocked.adapter)


def same_adapter(t, name, plain: bytes) -> bool:
    """Decrypted bytes that load as exactly the adapter built (byte equality with adapter_bytes()
    does not hold: safetensors orders the metadata as it likes)."""
    d = t["dir"]
    return same_weights(load_revealing(plain, d, Manifest.read(d), name), t["adapters"][name])
