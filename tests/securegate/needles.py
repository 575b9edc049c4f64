"""The leak scan of the SecureGate tests: byte strings that must never appear in a file (access
keys' secrets in every form, the AES keys derived from them, plaintext revealing adapters) and a
scan of files for them."""

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
        self.keys: dict[tuple[str, str], AccessKey] = {}
        self.roots: set[Path] = set()

    def root(self, d) -> Path:
        self.roots.add(Path(d))
        return Path(d)

    def key(self, key: AccessKey) -> AccessKey:
        self.keys[(key.bundle_id, key.key_id)] = key
        tag = f"key {key.key_id}"
        secret = bytes(key.secret)
        if len(secret) >= 16:
            self.needles[f"{tag} secret"] = secret
            self.needles[f"{tag} secret hex"] = secret.hex().encode()
        self.needles[f"{tag} text"] = key.text().encode()
        self.needles[f"{tag} secret base64url"] = key.text().rsplit(":", 1)[1].encode()
        self.needles[f"{tag} seed"] = key_seed(secret, key.bundle_id)
        return key

    def keys_of(self, store: KeyStore, bundle_dir) -> None:
        """Every access key of the bundle this keyring holds (current, orphan or stale)."""
        from keys.access_keys import load_key

        bundle_id = Manifest.read(Path(bundle_dir)).bundle_id
        for key_id in held_key_ids(store, bundle_id):
            self.key(load_key(store, bundle_id, key_id))

    def sealed_blob(self, blob: bytes) -> None:
        """The AES key of a sealed revealing adapter, if its access key is registered."""
        try:
            header = read_header(blob, sealing.MAGIC)[0]
            key = self.keys.get((header["bundle_id"], header["key_id"]))
        except Exception:  # noqa: BLE001 - a corrupted copy made by a test
            return
        if key is not None:
            info = sealing._info(key.bundle_id, header["adapter"], key.key_id)
            self.needles[f"aes {key.key_id} {header['salt'][:8]}"] = derive_key(key.secret, bytes.fromhex(header["salt"]),
                                                                              info)
            try:
                plain = sealing.open_adapter(blob, key, header["adapter"])
            except Exception:  # noqa: BLE001 - a tampered copy
                return
            self.plaintext(f"{header['adapter']} under {key.key_id}", plain)

    def plaintext(self, label: str, plain: bytes) -> None:
        """A plaintext adapter file as sealed: the whole file and its tensor data (after the
        safetensors header, whose metadata order safetensors does not fix)."""
        self.needles[f"plaintext {label} file"] = plain
        head = 8 + int.from_bytes(plain[:8], "little")
        if len(plain) - head >= 16:
            self.needles[f"plaintext {label} data"] = plain[head:]

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
                    self.needles[f"adapter {adapter.name} {adapter.revision} {name}[{start}] {dtype}"] = \
                        window.view(torch.uint8).numpy().tobytes()


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
