"""Crash-safe file writes, for every file Umbra commits (bundle manifests and weights, adapters,
sealed secrets): temp file in the same directory → write → fsync → rename over the target →
fsync the directory. A reader sees the old file or the new one, never a mix."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_atomic(path: str | Path, data: bytes, mode: int = 0o600) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: str | Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
