"""Which revealing adapter this user's access keys unlock, request by request (seed 003 Alg. 2
with the lock made cryptographic):

    access = AccessControl(bundle_dir, encoder, store)
    unlocked = access.unlock()        # Unlocked(name, adapter) or None: the secure adapter serves

For every request: (1) the gating pass — each access key of this bundle in the OS keyring (or,
with none, the empty key, so a user without a key runs the same path) goes to position 0 of the
client's embedding and encoder blocks, alone, and the gate reads the state there; the Middle is
never called and the key never enters the prompt, which then runs with the key stripped;
(2) when the gate chose a revealing adapter, the ciphertext of that adapter under that key is
opened with a key derived from it (decrypted adapters are kept in memory only, per ciphertext).
A wrong, malformed, revoked, other-bundle or missing key, a key the gate misroutes, a tag that
fails, a locked or absent keyring, a corrupted file: all end in `None`, the secure adapter, with
no error and nothing logged that tells them apart (DESIGN invariant 4).

A rotation or revocation reaches a running server without a restart: the manifest is stat'ed on
every request and re-read when it changed (new gate, new key table, decrypted adapters dropped);
the keyring (one read per current key of the bundle, none without a gate) is re-read at most every
`key_ttl` seconds and whenever the manifest changed."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from keys import KeyStore
from keys.access_keys import AccessKey, load_key
from umbra.errors import UmbraError
from umbra.model.adapters.modules import Adapter
from umbra.model.parts import ClientEncoder
from umbra.privacy.manifest import FILENAME, Manifest, sha256_file
from umbra.securegate.bundle_access import KeyEntry, key_entries, load_revealing, revealing_adapters
from umbra.securegate.gate import KeyEncoder, KeyGate, gate_from_bytes
from umbra.securegate.sealing import open_adapter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unlocked:
    name: str  # the revealing adapter
    adapter: Adapter  # decrypted, in memory only


class AccessControl:
    def __init__(self, bundle_dir: str | Path, encoder: ClientEncoder, store: KeyStore | None,
                 dtype: torch.dtype | None = None, key_ttl: float = 2.0):
        self.dir = Path(bundle_dir)
        self.encoder, self.store, self.dtype, self.key_ttl = encoder, store, dtype, key_ttl
        self._lock = threading.Lock()
        self._stamp: tuple | None = None
        self._manifest: Manifest | None = None
        self._gate: KeyGate | None = None
        self._keys: dict[str, KeyEntry] = {}  # key id -> entry (current keys only)
        self._held: list[AccessKey] = []
        self._held_at = -1e9
        self._opened: dict[tuple[str, str], Adapter] = {}  # (key id, ciphertext sha256) -> adapter
        self._enc: KeyEncoder | None = None  # the gating pass's front half, for this bundle
        self._states: dict[bytes, torch.Tensor] = {}  # sha256(key) -> key position's state [C], memory only
        self.generation = 0  # bumped on every reload: the model's caches keyed on adapters follow it

    # -- state -----------------------------------------------------------------------------------
    @property
    def revealing(self) -> tuple[str, ...]:
        """Names of the bundle's revealing adapters (none of them readable without a key)."""
        self._refresh()
        return tuple(sorted(revealing_adapters(self._manifest))) if self._manifest else ()

    def _stat(self) -> tuple | None:
        try:
            st = os.stat(self.dir / FILENAME)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _refresh(self) -> None:
        stamp = self._stat()
        if stamp == self._stamp and stamp is not None:
            return
        self._stamp = stamp
        self.generation += 1
        self._opened.clear()
        self._states.clear()
        self._held_at = -1e9
        self._manifest, self._gate, self._keys, self._enc = None, None, {}, None
        try:
            manifest = Manifest.read(self.dir)
            self._manifest = manifest
            self._enc = KeyEncoder(self.encoder, manifest.bundle_id)
            self._keys = {e.key_id: e for e in key_entries(manifest).values()}
            gate = (manifest.access or {}).get("gate")
            if gate:
                path = self.dir / gate["file"]
                if sha256_file(path) != gate["sha256"]:
                    raise UmbraError("the gate file does not match the manifest")
                self._gate = gate_from_bytes(path.read_bytes(), str(path))
        except (UmbraError, OSError, KeyError, TypeError, ValueError):
            # a bundle mid-change by hand, or corrupted: nothing unlocks until it is whole again
            log.warning("the bundle's access section cannot be read; completions use the secure adapter")
            self._gate, self._keys = None, {}

    def _held_keys(self) -> list[AccessKey]:
        """This user's keys among the bundle's current ones, in key-name order. One keyring read per
        current key, at most every `key_ttl` seconds, and none at all for a bundle without access
        keys: this runs on the request path. A key held under a rotated-away or revoked id is not
        read — it could open nothing — and the request takes the no-key path."""
        if time.monotonic() - self._held_at < self.key_ttl:
            return self._held
        held: list[AccessKey] = []
        if self.store is not None and self._manifest is not None and self._gate is not None:
            for entry in sorted(self._keys.values(), key=lambda e: e.name):
                try:
                    held.append(load_key(self.store, self._manifest.bundle_id, entry.key_id))
                except UmbraError:  # not held here, unreadable, or a locked/absent keyring: that key only
                    continue
        self._held = held
        self._held_at = time.monotonic()
        return self._held

    def reload_keys(self) -> None:
        """Read the keyring again on the next request (after an import or a removal here)."""
        with self._lock:
            self._held_at = -1e9

    # -- the request path ------------------------------------------------------------------------
    def unlock(self) -> Unlocked | None:
        """The revealing adapter this user's keys unlock now, or None (the secure adapter)."""
        with self._lock:
            self._refresh()
            held = self._held_keys()
            if self._manifest is None or self._gate is None:  # no access keys: nothing to unlock
                return None
            secrets_ = [k.secret for k in held] or [b""]  # no key: the empty key, down the same path
            states = self._key_states(secrets_)  # the gating pass: client embedding + encoder only
            routes = self._gate.route(states).tolist()
            for key, cls in zip(held, routes):
                name = self._gate.adapter_of(cls)
                if name is not None:
                    found = self._open(key, name)
                    if found is not None:
                        return found
            return None

    def opens(self, key: AccessKey) -> str | None:
        """The revealing adapter this one key unlocks (gating pass and decryption), or None."""
        with self._lock:
            self._refresh()
            if self._manifest is None or self._gate is None:
                return None
            state = self._key_states([key.secret])
            name = self._gate.adapter_of(int(self._gate.route(state)[0]))
            found = self._open(key, name) if name is not None else None
            return found.name if found is not None else None

    def _key_states(self, secrets_: list[bytes]) -> torch.Tensor:
        """The key position's state of each key [N, C]. With causal attention it depends on the key
        alone (DESIGN §2), so it is computed once per key and bundle state and kept in memory; the
        gate itself runs on every request."""
        digests = [hashlib.sha256(s).digest() for s in secrets_]
        missing = [s for s, d in zip(secrets_, digests) if d not in self._states]
        if missing:
            for d, state in zip([hashlib.sha256(s).digest() for s in missing], self._enc.key_states(missing)):
                self._states[d] = state
        return torch.stack([self._states[d] for d in digests])

    def _open(self, key: AccessKey, name: str) -> Unlocked | None:
        entry = self._keys.get(key.key_id)
        if entry is None or entry.adapter != name:  # revoked, rotated away, or bound elsewhere
            return None
        cached = self._opened.get((key.key_id, entry.sha256))
        if cached is None:
            try:
                path = self.dir / entry.file
                blob = path.read_bytes()
                plain = open_adapter(blob, key, name)
                cached = load_revealing(plain, self.dir, self._manifest, name, self.dtype)
            except (UmbraError, OSError):
                return None
            self._opened[(key.key_id, entry.sha256)] = cached
        return Unlocked(name, cached)
