"""The leak scan of the SecureGate tests: byte strings that must never appear in a file (access
keys' secrets in every form, the AES keys derived from them, plaintext revealing adapters), a
scan of files for them, and LeakScan: the scan the directory's conftest runs at the end of every
test file, over everything the process's tests wrote so far."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from keys import KeyStore
from keys.access_keys import AccessKey, held_key_ids
from umbra.model.adapters import Adapter
from umbra.privacy.aead import derive_key, read_header
from umbra.privacy.bundle_adapters import bundle_shape
from umbra.privacy.manifest import Manifest
from umbra.securegate import sealing
from umbra.securegate.key_embedding import key_seed

class Needles:
    """Byte strings that must never appear in a file: access keys' secrets (raw, hex, base64url),
    text forms and HMAC seeds, the HKDF-derived AES keys of their sealed adapters, and plaintext
    revealing adapters (the whole safetensors file and windows of every tensor's raw bytes)."""

    def __init__(self):
        self.needles: dict[str, bytes] = {}
        self.keys: dict[tuple[str, str], AccessKey] = {}  # (bundle id, key id) -> the first key registered
        self.variants: dict[tuple[str, str], list[AccessKey]] = {}  # -> every secret seen under that id
        self.roots: set[Path] = set()
        self.services: set[str] = set()  # keyring services the tests used (swept at each scan)

    def root(self, d) -> Path:
        self.roots.add(Path(d))
        return Path(d)

    def put(self, label: str, needle: bytes) -> None:
        """Add a needle (≥ 16 bytes; a shorter string, as a test's one-byte wrong secret, occurs by
        chance anywhere); never replaces one: another value under a label taken (a test's wrong
        secret under a real key's id) gets the label with " #2", " #3", ... (no secret in labels)."""
        if len(needle) < 16:
            return
        base, n = label, 1
        while self.needles.get(label, needle) != needle:
            n += 1
            label = f"{base} #{n}"
        self.needles[label] = needle

    def key(self, key: AccessKey) -> AccessKey:
        self.keys.setdefault((key.bundle_id, key.key_id), key)
        seen = self.variants.setdefault((key.bundle_id, key.key_id), [])
        if all(bytes(k.secret) != bytes(key.secret) for k in seen):
            seen.append(key)
        tag = f"key {key.key_id}"
        secret = bytes(key.secret)
        self.put(f"{tag} secret", secret)
        self.put(f"{tag} secret hex", secret.hex().encode())
        self.put(f"{tag} text", key.text().encode())
        self.put(f"{tag} secret base64url", key.text().rsplit(":", 1)[1].encode())
        self.put(f"{tag} seed", key_seed(secret, key.bundle_id))
        return key

    def keys_of(self, store: KeyStore, bundle_dir) -> None:
        """Every access key of the bundle this keyring holds (current, orphan or stale)."""
        from keys.access_keys import load_key

        bundle_id = Manifest.read(Path(bundle_dir)).bundle_id
        for key_id in held_key_ids(store, bundle_id):
            self.key(load_key(store, bundle_id, key_id))

    def sealed_blob(self, blob: bytes) -> int:
        """The AES key of a sealed revealing adapter under every secret registered for its key id,
        and its plaintext (under the one that opens it); how many secrets (0: none registered yet,
        or the blob is no readable ciphertext)."""
        try:
            header = read_header(blob, sealing.MAGIC)[0]
            candidates = self.variants.get((header["bundle_id"], header["key_id"]), [])
        except Exception:  # noqa: BLE001 - a corrupted copy made by a test
            return 0
        for key in candidates:
            info = sealing._info(key.bundle_id, header["adapter"], key.key_id)
            aes = derive_key(key.secret, bytes.fromhex(header["salt"]), info)
            self.put(f"aes {key.key_id} {header['salt'][:8]}", aes)
            try:
                plain = sealing.open_adapter(blob, key, header["adapter"])
            except Exception:  # noqa: BLE001 - a tampered copy, or a wrong secret under that id
                continue
            self.plaintext(f"{header['adapter']} under {key.key_id}", plain)
        return len(candidates)

    def plaintext(self, label: str, plain: bytes) -> None:
        """A plaintext adapter file as sealed: the whole file and its tensor data (after the
        safetensors header, whose metadata order safetensors does not fix)."""
        self.put(f"plaintext {label} file", plain)
        head = 8 + int.from_bytes(plain[:8], "little")
        if len(plain) - head >= 16:
            self.put(f"plaintext {label} data", plain[head:])

    def sealed_in(self, bundle_dir) -> None:
        access = Path(bundle_dir) / "access"
        if access.is_dir():
            for p in access.glob("*.sealed"):
                self.sealed_blob(p.read_bytes())

    def adapter(self, adapter: Adapter, bundle_dir=None) -> None:
        """A revealing adapter: its file bytes as the bundle would write them (adapter_bytes) and
        windows of its tensors' raw bytes (fp32: 4 values; fp16/bf16: 8 values)."""
        if bundle_dir is not None:
            from umbra.model.adapters.files import adapter_bytes

            d = Path(bundle_dir)
            self.plaintext(f"{adapter.name} {adapter.revision}",
                           adapter_bytes(adapter, *bundle_shape(d, Manifest.read(d))))
        for name, tensor in adapter.state_dict().items():
            flat = tensor.detach().flatten().float()
            for dtype, width in ((torch.float32, 4), (torch.float16, 8), (torch.bfloat16, 8)):
                step = max(1, flat.numel() // 8)
                for start in range(0, max(1, flat.numel() - width + 1), step):
                    window = flat[start:start + width].to(dtype)
                    if (window == 0).any():  # zero bytes are everywhere
                        continue
                    self.put(f"adapter {adapter.name} {adapter.revision} {name}[{start}] {dtype}",
                             window.view(torch.uint8).numpy().tobytes())


class KeyringSweep:
    """Every access and permutation key the tests' keyring services hold, read straight from the
    Secret Service and registered as needles. Per sweep: the collection's item list, the
    attributes of items not seen before (an item's attributes never change: Umbra and the tests
    replace secrets, never attributes), and the secrets of all of them in ONE GetSecrets call (an
    item's secret can change in place) instead of two calls per item."""

    def __init__(self):
        self.names: dict[str, tuple[str, str]] = {}  # item path -> its service and username attributes

    def __call__(self, needles: Needles) -> int:
        """Register what the services hold now; returns how many keys."""
        import base64
        import binascii

        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        from secretstorage.defines import SS_PATH, SS_PREFIX
        from secretstorage.exceptions import ItemNotFoundException
        from secretstorage.util import DBusAddressWrapper

        from .helpers import secret_collection

        if not needles.services:
            return 0
        conn, collection = secret_collection()
        try:
            paths = []
            for path in collection._collection.get_property("Items"):  # every item of the collection
                if path not in self.names:
                    try:
                        attributes = dict(DBusAddressWrapper(path, SS_PREFIX + "Item", conn).get_property("Attributes"))
                    except ItemNotFoundException:  # deleted since the list was read
                        continue
                    self.names[path] = (attributes.get("service", ""), attributes.get("username", ""))
                service, name = self.names[path]
                if service in needles.services and name.startswith(("access/", "bundle/")):
                    paths.append(path)
            if not paths:
                return 0
            session = collection.session
            service = DBusAddressWrapper(SS_PATH, SS_PREFIX + "Service", conn)
            (secrets,) = service.call("GetSecrets", "aoo", paths, session.object_path)
            count = 0
            for path in paths:
                _session, iv, value, _type = secrets[path]
                if session.encrypted:
                    dec = Cipher(algorithms.AES(session.aes_key), modes.CBC(bytes(iv))).decryptor()
                    padded = dec.update(bytes(value)) + dec.finalize()
                    value = padded[:-padded[-1]]
                try:
                    secret = base64.b64decode(bytes(value), validate=True)
                except binascii.Error:  # an entry a test wrote behind Umbra's back
                    continue
                kind, bundle_id, key_id = self.names[path][1].split("/", 2)
                if kind == "access":
                    needles.key(AccessKey(bundle_id, key_id, secret))
                else:
                    needles.put(f"permutation key {bundle_id}/{key_id}", secret)
                count += 1
            return count
        finally:
            conn.close()


class LeakScan:
    """DESIGN invariant 3 over what a process's SecureGate tests wrote, checked after each test
    file (conftest.py) instead of once at the end: every check first adds the needles the keyring
    services hold now and those derived from every ciphertext on disk (AES key, plaintext), then
    scans every file new or changed since the last check (inode, size, mtime, ctime) for EVERY
    needle, and every unchanged file for the needles registered since. So each file's last
    content has been scanned for every needle known at the last check, as one scan at the end of
    the process would; a file deleted meanwhile was still scanned while it existed."""

    def __init__(self, needles: Needles):
        self.needles = needles
        self.seen: dict[Path, tuple[int, int, int, int]] = {}  # file -> its stat when scanned
        self.known: set[str] = set()  # needle labels the unchanged files were scanned for
        self.keyring = KeyringSweep()
        self.derived: dict[Path, tuple] = {}  # ciphertext -> (its stat, secrets of its key id) when derived

    @staticmethod
    def _key_of(path: Path) -> tuple[str, str]:
        try:
            header = read_header(path.read_bytes(), sealing.MAGIC)[0]
            return header["bundle_id"], header["key_id"]
        except Exception:  # noqa: BLE001 - a corrupted copy made by a test
            return "", ""

    def check(self) -> tuple[list[Path], list[tuple[str, str]]]:
        """(every file under the roots, the (file, needle label) hits)."""
        self.keyring(self.needles)
        files = files_under(self.needles.roots)
        state = {}
        for path in files:
            st = path.stat()
            state[path] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            with open(path, "rb") as f:
                sealed = f.read(len(sealing.MAGIC)) == sealing.MAGIC
            seen = (state[path], len(self.needles.variants.get(self._key_of(path), ()))) if sealed else None
            if sealed and self.derived.get(path) != seen:  # every ciphertext on disk: its AES key and
                self.needles.sealed_blob(path.read_bytes())  # plaintext under every secret of its key id
                self.derived[path] = seen
        changed = [p for p in files if self.seen.get(p) != state[p]]
        unchanged = [p for p in files if self.seen.get(p) == state[p]]
        new = {label: n for label, n in self.needles.needles.items() if label not in self.known}
        hits = scan(changed, self.needles.needles) + (scan(unchanged, new) if new else [])
        self.seen, self.known = state, set(self.needles.needles)
        return files, sorted(set(hits))


def files_under(roots) -> list[Path]:
    out = []
    for root in roots:
        for dirpath, _, names in os.walk(root):
            out += [Path(dirpath) / n for n in names if not os.path.islink(Path(dirpath) / n)]
    return sorted(set(out))


def scan(files, needles: dict[str, bytes]) -> list[tuple[str, str]]:
    """(file, needle label) for every needle found in a file. Needles are ≥ 16 bytes; candidates
    come from their first 8 bytes at every offset (numpy, 8 alignments), then compared whole."""
    by_prefix: dict[bytes, list[tuple[str, bytes]]] = {}
    for label, n in needles.items():
        assert len(n) >= 16, label
        by_prefix.setdefault(n[:8], []).append((label, n))
    prefixes = np.frombuffer(b"".join(by_prefix), dtype="<u8")
    hits = []
    for path in files:
        data = Path(path).read_bytes()
        for o in range(8):
            m = (len(data) - o) // 8
            if m <= 0:
                continue
            values = np.frombuffer(data, dtype="<u8", count=m, offset=o)
            for i in np.nonzero(np.isin(values, prefixes))[0]:
                pos = o + 8 * int(i)
                for label, n in by_prefix[data[pos:pos + 8]]:
                    if data[pos:pos + len(n)] == n:
                        hits.append((str(path), label))
    return sorted(set(hits))
