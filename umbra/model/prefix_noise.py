"""Keyed, prefix-determined Gaussian noise: the noise of a position is a pseudo-random function
of a secret key and everything before and at that position, never a fresh draw.

    seed_i = HMAC-SHA256(key, e_0 ‖ e_1 ‖ … ‖ e_i)        e_j: position j's entry (below)
    z_i    = BoxMuller(SHAKE-256("umbra/prefix-noise/normal/v1" ‖ seed_i))   [width] ~ N(0, I)

Entries are prefix-free byte strings: a token is b"\\x00" + its (private) id as 8 bytes LE; a
soft-prompt position is b"\\x01" + sha256 of the prompt's float32 bytes + its index (8 bytes LE).
The running HMAC is kept between calls (`NoiseStream`), so a session extends, truncates and
re-extends a prefix at O(new tokens) and gets bit-identical normals for the same prefix however
it is chunked. The normals come from SHA-3 output and float64 arithmetic only (no library RNG
whose stream could change between versions), so a re-sent prefix gets the same noise across
processes, sessions and releases.

What this buys, stated narrowly: the cloud cannot average independent draws of the noise of one
position, however often the client sends it — prefix reuse, re-prefill after the cloud lost a
session, a new session over the same file, a retry — because every send of the same prefix carries
the same noise. What it does not buy: positions whose prefixes differ get independent noise, so
states of the same token in different contexts (the same identifier in many places, a template
repeated across files) are independent noisy views, and a cloud that can group them (clustering,
frequency analysis) averages the noise away across contexts; the key itself is only as secret as
the bundle's secrets it is derived from (umbra/privacy/bundle_private_path.py)."""

from __future__ import annotations

import hashlib
import hmac
import struct

import numpy as np

from umbra.errors import ConfigError

_NORMAL_LABEL = b"umbra/prefix-noise/normal/v1"
TOKEN_TAG = b"\x00"
EMBED_TAG = b"\x01"


def token_entry(token_id: int) -> bytes:
    if token_id < 0:
        raise ConfigError(f"token ids are >= 0, got {token_id}")
    return TOKEN_TAG + struct.pack("<Q", int(token_id))


def embed_entries(prompt_digest: bytes, count: int) -> list[bytes]:
    """The entries of `count` soft-prompt positions of a prompt with this sha256 digest."""
    if len(prompt_digest) != 32:
        raise ConfigError("a soft prompt is named by its 32-byte sha256")
    return [EMBED_TAG + prompt_digest + struct.pack("<Q", i) for i in range(count)]


def normals(seeds: list[bytes], width: int) -> np.ndarray:
    """[len(seeds), width] float64 standard normals, row i a function of seeds[i] alone."""
    pairs = (width + 1) // 2
    raw = b"".join(hashlib.shake_256(_NORMAL_LABEL + s).digest(16 * pairs) for s in seeds)
    u = np.frombuffer(raw, dtype="<u8").reshape(len(seeds), pairs, 2)
    u = ((u >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / (1 << 53))  # (0, 1), never 0
    radius = np.sqrt(-2.0 * np.log(u[..., 0]))
    angle = 2.0 * np.pi * u[..., 1]
    z = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=-1).reshape(len(seeds), 2 * pairs)
    return z[:, :width]


class NoiseStream:
    """The noise of one sequence, position by position (a session, or one row of a batch)."""

    def __init__(self, key: bytes, width: int):
        if len(key) < 16:
            raise ConfigError("the noise key must have at least 16 bytes")
        self._key, self.width = key, width
        self._entries: list[bytes] = []
        self._mac = hmac.new(key, digestmod=hashlib.sha256)

    @property
    def length(self) -> int:
        return len(self._entries)

    def extend(self, entries: list[bytes]) -> np.ndarray:
        """Append positions; their normals [len(entries), width]."""
        seeds = []
        for e in entries:
            self._mac.update(e)
            self._entries.append(e)
            seeds.append(self._mac.copy().digest())
        return normals(seeds, self.width)

    def extend_ids(self, ids) -> np.ndarray:
        return self.extend([token_entry(int(i)) for i in ids])

    def truncate(self, length: int) -> None:
        """Keep the first `length` positions (the running MAC is rebuilt from them)."""
        if length < len(self._entries):
            del self._entries[length:]
            self._mac = hmac.new(self._key, b"".join(self._entries), hashlib.sha256)


def batch_normals(key: bytes, width: int, ids) -> np.ndarray:
    """[B, T, width] normals of the rows of `ids` [B, T], each row a sequence from position 0."""
    rows = np.asarray(ids, dtype=np.int64)
    if rows.ndim != 2:
        raise ConfigError(f"expected ids [batch, tokens], got shape {rows.shape}")
    return np.stack([NoiseStream(key, width).extend_ids(row) for row in rows]) if len(rows) else \
        np.zeros((0, rows.shape[1], width))
