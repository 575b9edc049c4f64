"""Fixtures of the lsp tests: one tiny random model with a FIM tokenizer, and the real OS keyring
(tests/keyring_fixture.py), and a cloud a module's language servers share."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_build import built_once
from tiny_models import build_tiny_model_dir

from server.launch import local_cloud_thread


@pytest.fixture(scope="session")
def lsp_model_dir(tmp_path_factory) -> Path:
    """A tiny llama shaped as the embedded default models are (tied, no biases, default RoPE), with
    a StarCoder-style FIM tokenizer as theirs. Seed 2: a random model's decode can be digits only,
    and the deadline tests need a whole word at their cursors, the bf16 test a prompt where the
    split and the whole model agree (seeds 0, 1 and 3 miss one of those)."""
    return built_once(tmp_path_factory, "lsp-tiny-model", ("llama-plain", "starcoder", 2),
                      lambda d: build_tiny_model_dir(d, family="llama-plain", style="starcoder", seed=2))


@pytest.fixture(scope="module")
def loopback_cloud(lsp_model_dir):
    """The real cloud service under uvicorn in a thread of this process, on a loopback port, for
    the language servers of one test module to complete through (lsp_helpers.through_cloud, the
    token in cloud_env): one service instead of a cloud process started by every server. The
    tests of the self-started cloud itself (test_lsp_lifecycle, test_lsp_server) start their own."""
    with local_cloud_thread(lsp_model_dir, settings={"torch_threads": 1}) as cloud:
        yield cloud
