"""Fixtures of the lsp tests: one tiny random model with a FIM tokenizer, and the real OS keyring
(tests/keyring_fixture.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_build import built_once
from tiny_models import build_tiny_model_dir


@pytest.fixture(scope="session")
def lsp_model_dir(tmp_path_factory) -> Path:
    """A tiny llama with a StarCoder-style FIM tokenizer (what the embedded default model uses)."""
    return built_once(tmp_path_factory, "lsp-tiny-model", ("llama", "starcoder"),
                      lambda d: build_tiny_model_dir(d, family="llama", style="starcoder"))
