"""Fixtures of the engine tests: one tiny random model with a tiny FIM tokenizer (the default
model's StarCoder-style tokens), built once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from umbra.engine import ClientModel
from umbra.middle.local import LocalMiddle


@pytest.fixture(scope="session")
def tiny_dir(fim_qwen2_dir) -> Path:
    return fim_qwen2_dir


@pytest.fixture(scope="session")
def client_model(tiny_dir) -> ClientModel:
    return ClientModel.load(tiny_dir)


@pytest.fixture
def local_middle(client_model) -> LocalMiddle:
    return LocalMiddle(client_model.load_middle())
