"""Audit recordings at rest: AES-256-GCM under a key that lives only in the OS keyring.

One file per recorded command, `<audit dir>/<created>-<id>.rec`, mode 0600:

    MAGIC (9 bytes) | header length (uint32 LE) | header (JSON) | ciphertext + 16-byte GCM tag

The header (authenticated as associated data) names the store, the HKDF salt and the nonce.
The plaintext is a safetensors blob: per sequence the hidden states and positions the client
sent, which positions were new and real, and the truth (public token ids); its metadata holds the
request facts (model, split, ε in force, defences). The keyring entry `audit/<store id>` holds 32
random bytes; each file's AES key is HKDF-SHA256(that, salt). Nothing is ever written in clear,
and `clear()` deletes the files and the key."""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from keys import KeyNotFound, KeyStore
from umbra.attacks.transcript import ObservedSequence
from umbra.audit.settings import audit_dir, keyring_service
from umbra.errors import ConfigError
from umbra.atomic import write_atomic

MAGIC = b"UMBRA-AU\x01"
SUFFIX = ".rec"
_INFO = b"umbra/audit/record/aes-256-gcm/v1"
_INDEX = "store.json"


@dataclass
class AuditRecord:
    id: str
    created: str  # ISO 8601, UTC
    meta: dict  # model_dir, split, epsilon, defences, wire_dtype, ...
    sequences: list[ObservedSequence]


def _aes(secret: bytes, salt: bytes) -> AESGCM:
    return AESGCM(HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=_INFO).derive(secret))


def _pack(meta: dict, sequences: list[ObservedSequence]) -> bytes:
    tensors = {}
    for i, s in enumerate(sequences):
        tensors[f"{i}.hidden"] = s.hidden.float().contiguous()
        tensors[f"{i}.positions"] = s.positions.to(torch.int64).contiguous()
        tensors[f"{i}.fresh"] = torch.from_numpy(s.fresh.astype(np.uint8))
        tensors[f"{i}.real"] = torch.from_numpy(s.real.astype(np.uint8))
        tensors[f"{i}.truth"] = torch.from_numpy(np.asarray(s.truth, dtype=np.int64))
    return st_save(tensors, metadata={"meta": json.dumps(meta), "sequences": str(len(sequences))})


def _unpack(blob: bytes) -> tuple[dict, list[ObservedSequence]]:
    n_header = struct.unpack("<Q", blob[:8])[0]  # safetensors: u64 header length, JSON header
    header = json.loads(blob[8 : 8 + n_header])
    meta_strings = header.get("__metadata__", {})
    tensors = st_load(blob)
    seqs = []
    for i in range(int(meta_strings["sequences"])):
        seqs.append(ObservedSequence(
            hidden=tensors[f"{i}.hidden"], positions=tensors[f"{i}.positions"],
            fresh=tensors[f"{i}.fresh"].numpy().astype(bool), real=tensors[f"{i}.real"].numpy().astype(bool),
            truth=tensors[f"{i}.truth"].numpy(),
        ))
    return json.loads(meta_strings["meta"]), seqs


class AuditStore:
    def __init__(self, directory: str | Path | None = None, store: KeyStore | None = None):
        self.dir = Path(directory) if directory is not None else audit_dir()
        self._keys = store

    @property
    def keys(self) -> KeyStore:
        if self._keys is None:
            self._keys = KeyStore(keyring_service())
        return self._keys

    def _store_id(self, create: bool) -> str | None:
        index = self.dir / _INDEX
        if index.is_file():
            try:
                return json.loads(index.read_text())["store_id"]
            except (OSError, ValueError, KeyError) as exc:
                raise ConfigError(f"the audit store index {index} is corrupt: {exc}") from exc
        if not create:
            return None
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        store_id = secrets.token_hex(12)
        write_atomic(index, json.dumps({"store_id": store_id}).encode())
        return store_id

    def _secret(self, store_id: str, create: bool) -> bytes:
        name = f"audit/{store_id}"
        if create and not self.keys.exists(name):
            self.keys.set(name, secrets.token_bytes(32))
        try:
            return self.keys.get(name)
        except KeyNotFound as exc:
            raise ConfigError(f"the audit recordings in {self.dir} cannot be decrypted: their key is gone from "
                              f"the OS keyring (`umbra audit clear` removes them)") from exc

    def prepare(self) -> None:
        """Make sure the store and its key exist (fails before any traffic if there is no keyring)."""
        self._secret(self._store_id(create=True), create=True)

    def save(self, meta: dict, sequences: list[ObservedSequence]) -> Path:
        if any(s.truth is None for s in sequences):
            raise ConfigError("audit sequences need their truth")
        store_id = self._store_id(create=True)
        secret = self._secret(store_id, create=True)
        created = dt.datetime.now(dt.timezone.utc)
        rec_id = secrets.token_hex(6)
        salt, nonce = secrets.token_bytes(16), secrets.token_bytes(12)
        header = json.dumps({"v": 1, "alg": "AES-256-GCM", "kdf": "HKDF-SHA256", "store_id": store_id, "id": rec_id,
                             "created": created.isoformat(timespec="seconds"), "salt": salt.hex(),
                             "nonce": nonce.hex()}, sort_keys=True).encode()
        prefix = MAGIC + struct.pack("<I", len(header)) + header
        blob = prefix + _aes(secret, salt).encrypt(nonce, _pack(meta, sequences), prefix)
        path = self.dir / f"{created.strftime('%Y%m%dT%H%M%S.%f')}-{rec_id}{SUFFIX}"  # sorts by time
        write_atomic(path, blob)
        return path

    def paths(self) -> list[Path]:
        return sorted(self.dir.glob(f"*{SUFFIX}")) if self.dir.is_dir() else []

    def load(self, path: Path) -> AuditRecord:
        blob = path.read_bytes()
        head = len(MAGIC) + 4
        if len(blob) < head or not blob.startswith(MAGIC):
            raise ConfigError(f"{path.name} is not an Umbra audit recording")
        (n,) = struct.unpack("<I", blob[len(MAGIC) : head])
        try:
            header = json.loads(blob[head : head + n])
            salt, nonce = bytes.fromhex(header["salt"]), bytes.fromhex(header["nonce"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{path.name} has a malformed header") from exc
        if header.get("store_id") != self._store_id(create=False):
            raise ConfigError(f"{path.name} belongs to another audit store")
        try:
            plain = _aes(self._secret(header["store_id"], create=False), salt).decrypt(
                nonce, blob[head + n :], blob[: head + n])
        except InvalidTag as exc:
            raise ConfigError(f"{path.name} fails authentication (corrupt, or encrypted under another key)") from exc
        meta, seqs = _unpack(plain)
        return AuditRecord(header["id"], header["created"], meta, seqs)

    def records(self) -> list[AuditRecord]:
        return [self.load(p) for p in self.paths()]

    def clear(self) -> int:
        """Delete every recording and the store's key; returns the number of files removed."""
        paths = self.paths()
        for p in paths:
            p.unlink()
        store_id = self._store_id(create=False)
        if store_id is not None:
            if self.keys.exists(f"audit/{store_id}"):
                self.keys.delete(f"audit/{store_id}")
            (self.dir / _INDEX).unlink()
        return len(paths)
