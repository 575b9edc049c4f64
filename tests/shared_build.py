"""Builds that a test run makes once, whatever the number of pytest-xdist workers: the first
worker to ask builds into a directory of the run's shared temp dir (keyed by the build's inputs)
under a file lock; the others wait for it and read the same directory. Without xdist it is one
process's session-scoped build, as before. The directories are read-only to the tests."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Callable

from filelock import FileLock

_DONE = ".built"  # written last: a directory without it is a build that died half-way


def run_temp(tmp_path_factory) -> Path:
    """The temp dir all workers of this run share (the session's own one without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory, name: str, inputs: tuple, build: Callable[[Path], object]) -> Path:
    """The directory `build(directory)` fills, built once per run for `name` and `inputs`."""
    key = hashlib.sha256(repr((name, inputs)).encode()).hexdigest()[:16]
    root = run_temp(tmp_path_factory) / "built-once"
    root.mkdir(exist_ok=True)
    directory = root / f"{name}-{key}"
    with FileLock(str(directory) + ".lock"):
        if not (directory / _DONE).exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            build(directory)
            (directory / _DONE).touch()
    return directory
