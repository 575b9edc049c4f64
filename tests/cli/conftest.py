"""The `umbra complete` tests' model and source file (the flags and the command: cli_helpers)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import COMPLETE_SOURCE


@pytest.fixture(scope="module")
def model_dir(fim_llama_dir) -> Path:
    return fim_llama_dir


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("src") / "add.py"
    path.write_text(COMPLETE_SOURCE)
    return path
