"""The `umbra complete` tests' model, source file and configured cloud (the flags and the command:
cli_helpers)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import COMPLETE_SOURCE

from server.launch import local_cloud_sync


@pytest.fixture(scope="module")
def model_dir(fim_llama_dir) -> Path:
    return fim_llama_dir


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("src") / "add.py"
    path.write_text(COMPLETE_SOURCE)
    return path


@pytest.fixture(scope="session")
def cloud(fim_llama_dir):
    """One real cloud service (a process of its own, on loopback) for the tests that complete
    through a cloud they are given (test_complete.py, test_complete_client_only.py): none changes
    anything in it, a keyring entry for its token is the test's own, and the client-only test
    compares its counters before and after. One start per process instead of one per test."""
    with local_cloud_sync(fim_llama_dir, settings={"torch_threads": 1}) as running:
        yield running
