"""Builds that a test run makes once, whatever the number of pytest-xdist workers: the first
worker to ask builds into a directory of the run's shared temp dir (keyed by the build's inputs)
under a file lock; the others wait for it and read the same directory. Without xdist it is one
process's session-scoped build, as before. The directories are read-only to the tests.

And builds that write into the checkout itself (npm in vscode-extension/: `npm ci` rewrites its
node_modules, `npm test` and `npm run package` both compile into out/): `checkout_lock(directory)`
lets one process at a time work there, across workers and across concurrent runs."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
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


def checkout_lock(directory: Path) -> FileLock:
    """A lock for work that writes into `directory` of the checkout, held by one process at a
    time (a lock file in the system temp dir, keyed by the directory's absolute path)."""
    key = hashlib.sha256(str(Path(directory).resolve()).encode()).hexdigest()[:16]
    return FileLock(str(Path(tempfile.gettempdir()) / f"umbra-checkout-{key}.lock"))
