"""Fixtures for the cloud-service tests: the real service (uvicorn, loopback socket) serving a
tiny random model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# This directory is named `server` too: put the repository first on sys.path so `import server`
# always finds the real package, not tests/server as a namespace package.
_REPO = str(Path(__file__).resolve().parents[2])
if sys.path[0] != _REPO:
    sys.path.insert(0, _REPO)

from server.launch import local_cloud_thread  # noqa: E402

STRICT = dict(  # small limits so every one of them can be hit cheaply
    max_frame_bytes=64 * 1024,
    max_sessions_per_client=4,
    max_seq_len=64,
    debug_routes=True,
    torch_threads=1,
)


@pytest.fixture(scope="session")
def model_dir(tiny_model_dirs) -> Path:
    return tiny_model_dirs["qwen2-tied"]


@pytest.fixture(scope="module")
def cloud(model_dir):
    """A service with STRICT limits, shared by a test module."""
    with local_cloud_thread(model_dir, settings=STRICT) as c:
        yield c
