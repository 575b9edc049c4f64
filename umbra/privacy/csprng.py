"""KeystreamRNG: a cryptographically secure random stream (AES-256-CTR) with exact samplers.

Seeded from `secrets` unless a seed is given (tests, reproducible experiments). The stream is
AES-256 in counter mode over a 128-bit counter, so it never repeats; uniforms take the top 53
bits of a 64-bit word and bounded integers use rejection (no modulo bias at all)."""

from __future__ import annotations

import hashlib
import secrets

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from umbra.errors import ValidationError

_SEED_DOMAIN = b"umbra.privacy.csprng.v1\x00"
_BLOCK_WORDS = 1 << 17  # 1 MiB of keystream per AES call


class KeystreamRNG:
    def __init__(self, seed: bytes | int | str | None = None):
        if seed is None:
            key = secrets.token_bytes(32)
        else:
            if isinstance(seed, int):
                seed = seed.to_bytes((seed.bit_length() + 8) // 8, "little", signed=True)
            elif isinstance(seed, str):
                seed = seed.encode()
            key = hashlib.sha256(_SEED_DOMAIN + bytes(seed)).digest()
        self._enc = Cipher(algorithms.AES(key), modes.CTR(b"\x00" * 16)).encryptor()
        del key
        self._zeros = bytearray()  # grown on demand up to _BLOCK_WORDS words (small draws stay small)
        self._out = bytearray(16)

    def words(self, n: int) -> np.ndarray:
        """n independent uniform 64-bit words."""
        out = np.empty(n, dtype=np.uint64)
        need = min(_BLOCK_WORDS, n) * 8
        if len(self._zeros) < need:
            self._zeros, self._out = bytearray(need), bytearray(need + 16)
        done = 0
        while done < n:
            k = min(_BLOCK_WORDS, n - done)
            self._enc.update_into(memoryview(self._zeros)[: k * 8], self._out)
            out[done : done + k] = np.frombuffer(self._out, dtype="<u8", count=k)
            done += k
        return out

    def random(self, n: int) -> np.ndarray:
        """n uniforms on the grid {0, 2^-53, ..., 1 - 2^-53} (float64)."""
        return (self.words(n) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))

    def normal(self, n: int) -> np.ndarray:
        """n independent standard normal draws (float64), by Box–Muller on `random`."""
        half = (n + 1) // 2
        u = self.random(2 * half)
        u1, u2 = 1.0 - u[:half], u[half:]  # u1 in (0, 1]: log is finite
        r = np.sqrt(-2.0 * np.log(u1))
        return np.concatenate([r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)])[:n]

    def below(self, bounds: np.ndarray) -> np.ndarray:
        """One exact uniform integer in [0, b) for each b in `bounds` (int64, all >= 1).

        A word x is accepted iff x >= 2^64 mod b; the accepted range holds a whole number of
        copies of [0, b), so x mod b is exactly uniform. Rejection chance < b / 2^64."""
        b = np.asarray(bounds, dtype=np.int64)
        if b.size and int(b.min()) < 1:
            raise ValidationError("below() needs bounds >= 1")
        bu = b.astype(np.uint64)
        threshold = (np.uint64(0) - bu) % bu  # (2^64 - b) mod b == 2^64 mod b
        out = np.empty(b.shape, dtype=np.int64)
        todo = np.arange(b.size)
        while todo.size:
            x = self.words(todo.size)
            ok = x >= threshold[todo]
            out[todo[ok]] = (x[ok] % bu[todo[ok]]).astype(np.int64)
            todo = todo[~ok]
        return out
