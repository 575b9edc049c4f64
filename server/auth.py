"""Bearer tokens: issued once, stored only as salted hashes, resolved to a client name.

A token reads `umbra_<id>_<secret>`: `id` (public, 8 random bytes) finds the entry, `secret`
(32 random bytes) is checked against SHA-256(salt || secret) in constant time. The secrets are
256-bit random, so a fast hash is enough (no password stretching needed). The token file is
JSON, mode 0600, re-read when it changes so `umbra cloud token add` needs no restart."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import time
from pathlib import Path

from umbra.errors import ConfigError, UmbraError

_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_TOKEN = re.compile(r"^umbra_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")


class Unauthorized(UmbraError):
    """Missing, malformed or unknown bearer token (HTTP 401)."""


def _digest(salt: bytes, secret: str) -> str:
    return hashlib.sha256(salt + secret.encode()).hexdigest()


class TokenStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._mtime: float | None = None
        self._entries: dict[str, dict] = {}  # token id -> {"name", "salt", "hash", "created"}

    # -- file ------------------------------------------------------------------------------------
    def _load(self) -> None:
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            self._entries, self._mtime = {}, None
            return
        if mtime == self._mtime:
            return
        try:
            data = json.loads(self.path.read_text())
            self._entries = {e["id"]: e for e in data["tokens"]}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"token file {self.path} is unreadable: {exc}") from exc
        self._mtime = mtime

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"tokens": list(self._entries.values())}, f, indent=1)
        os.replace(tmp, self.path)
        self._mtime = None

    # -- admin -----------------------------------------------------------------------------------
    def add(self, name: str) -> str:
        """Issue a token for client `name`; returns it (the only time it exists in clear)."""
        if not _NAME.match(name):
            raise ConfigError("a client name is 1-64 characters of letters, digits, '.', '_' or '-'")
        self._load()
        token_id, secret, salt = secrets.token_hex(8), secrets.token_urlsafe(32), secrets.token_bytes(16)
        self._entries[token_id] = {"id": token_id, "name": name, "salt": salt.hex(),
                                   "hash": _digest(salt, secret), "created": int(time.time())}
        self._save()
        return f"umbra_{token_id}_{secret}"

    def revoke(self, name: str) -> int:
        """Remove every token of client `name`; returns how many."""
        self._load()
        ids = [i for i, e in self._entries.items() if e["name"] == name]
        for i in ids:
            del self._entries[i]
        if ids:
            self._save()
        return len(ids)

    def names(self) -> list[tuple[str, str, int]]:
        """(name, token id, created) of every token."""
        self._load()
        return [(e["name"], e["id"], e["created"]) for e in self._entries.values()]

    # -- check -----------------------------------------------------------------------------------
    def authenticate(self, authorization: str | None) -> str:
        """`Authorization` header value -> client name, or Unauthorized."""
        if not authorization or not authorization.startswith("Bearer "):
            raise Unauthorized("missing bearer token (Authorization: Bearer <token>)")
        m = _TOKEN.match(authorization[len("Bearer "):].strip())
        self._load()
        entry = self._entries.get(m.group(1)) if m else None
        if entry is None or not hmac.compare_digest(_digest(bytes.fromhex(entry["salt"]), m.group(2)), entry["hash"]):
            raise Unauthorized("invalid bearer token")
        return entry["name"]
