"""`umbra keys access status`: which revealing adapters this user's keys unlock, checked the way a
completion checks them (gating pass + decryption), never printing a key."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from keys import KeyStore
from keys.access_keys import held_key_ids, load_key
from umbra.privacy.manifest import Manifest
from umbra.securegate.bundle_access import key_entries, revealing_adapters


@dataclass
class AccessStatus:
    bundle: str
    secure: str | None  # the bundle's secure adapter (served without a key)
    revealing: list[str]  # the bundle's revealing adapters
    unlocked: dict[str, str] = field(default_factory=dict)  # key name -> adapter it unlocks here
    stale: int = 0  # keys held here that open nothing (rotated, revoked, or damaged)

    def lines(self) -> list[str]:
        out = [f"bundle {self.bundle}",
               f"  secure adapter (no key needed): {self.secure or 'none (the base model serves)'}",
               f"  revealing adapters: {', '.join(self.revealing) or 'none'}"]
        if self.unlocked:
            for name, adapter in sorted(self.unlocked.items()):
                out.append(f"  you can unlock: {adapter} (key {name})")
        else:
            out.append("  you can unlock: nothing — completions use the secure adapter")
        if self.stale:
            out.append(f"  {self.stale} key(s) in this keyring open nothing here (rotated or revoked): "
                       f"import the current key from its owner")
        return out


def access_status(bundle_dir, store: KeyStore) -> AccessStatus:
    from umbra.securegate.access import AccessControl
    from umbra.securegate.bundle_access import bundle_encoder

    d = Path(bundle_dir)
    manifest = Manifest.read(d)
    entries = manifest.adapter_entries()
    secure = next((n for n, e in entries.items() if e.role == "secure"), None)
    status = AccessStatus(str(d), secure, sorted(revealing_adapters(manifest)))
    held = held_key_ids(store, manifest.bundle_id)
    if not held:
        return status
    access = AccessControl(d, bundle_encoder(d, store), store)
    names = {e.key_id: e.name for e in key_entries(manifest).values()}
    for key_id in held:
        adapter = access.opens(load_key(store, manifest.bundle_id, key_id))
        if adapter is not None and key_id in names:
            status.unlocked[names[key_id]] = adapter
        else:
            status.stale += 1
    return status
