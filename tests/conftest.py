"""Shared fixtures: tiny random models of every supported family, saved once per run (once for all
pytest-xdist workers: tests/shared_build.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Every process a test starts (the `umbra` console program, a cloud, a language server, a worker)
# inherits one OpenMP thread unless the run says otherwise, like this process below: the
# `umbra securegate train` of tests/cli took 186 s with torch's default threads on a loaded
# 2-core machine and 26 s with one, computing the same thing.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

# Test helpers (tiny_models.py) import by name; appended so the real `server`/`keys` packages win.
sys.path.append(str(Path(__file__).parent))
# One intra-op thread: the tiny test models gain nothing from more, and on a loaded 2-core
# machine OpenMP's spinning threads make each step an order of magnitude slower.
torch.set_num_threads(1)

from shared_build import built_once  # noqa: E402
from tiny_models import FAMILIES, build_tiny_model  # noqa: E402

# The real OS keyring (`secret_service`, `keystore`) for every test that asks for it.
pytest_plugins = ["keyring_fixture", "no_server_errors", "long_tests"]  # and: the suite fails on any 5xx
# (issue 60); tests over 60 s are listed at the end with their `slow` mark (issue 62)


def pytest_addoption(parser):
    parser.addoption("--store-unit-seconds", action="store_true",
                     help="merge each test file's seconds into tests/unit_seconds.json (the order in "
                          "which pytest-xdist workers start the files: tests/xdist_units.py)")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`-n N --dist loadfile`: a file per worker, longest first (tests/xdist_units.py)."""
    if config.getoption("dist") == "loadfile":
        from xdist_units import UnitScheduling

        return UnitScheduling(config, log)
    return None


def pytest_configure(config):
    if config.getoption("--store-unit-seconds") and not hasattr(config, "workerinput"):
        from xdist_units import UnitSeconds

        config.pluginmanager.register(UnitSeconds(), "umbra-unit-seconds")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """One intra-op thread before a test's fixtures are set up, too: a module- or session-scoped
    fixture is built in the setup of the first test that asks for it, before the autouse fixture
    below runs, and under xdist the file before it in the same worker may have left another
    thread count (an in-process CLI run or a service in a fixture of its own); a model a module
    fixture trains must see the threads the module's tests see, or a float sum's order changes
    (tests/attacks/test_layer_probes.py failed so in CI)."""
    torch.set_num_threads(1)
    return (yield)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every test runs with one intra-op thread, and a test that changes it (an in-process CLI
    run with --threads, say) gives the rest of the session its setting back."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory) -> dict[str, Path]:
    """family -> directory of a saved tiny random model (6 layers; llama saved sharded)."""
    return {family: built_once(tmp_path_factory, f"tiny-{family}", (family, family == "llama"),
                               lambda d, family=family: build_tiny_model(family, d, shard=(family == "llama")))
            for family in FAMILIES}


def _fim_model(tmp_path_factory, family: str) -> Path:
    from tiny_models import build_tiny_model_dir

    return built_once(tmp_path_factory, f"tiny-fim-{family}", (family, "starcoder"),
                      lambda d: build_tiny_model_dir(d, family=family, style="starcoder"))


@pytest.fixture(scope="session")
def fim_qwen2_dir(tmp_path_factory) -> Path:
    """A saved tiny qwen2 (tied embeddings) with a StarCoder-style FIM tokenizer; read-only."""
    return _fim_model(tmp_path_factory, "qwen2-tied")


@pytest.fixture(scope="session")
def fim_llama_dir(tmp_path_factory) -> Path:
    """A saved tiny llama with a StarCoder-style FIM tokenizer; read-only."""
    return _fim_model(tmp_path_factory, "llama")


@pytest.fixture(scope="session")
def hf_models(tiny_model_dirs):
    """family -> transformers reference model loaded from the same directory (eager attention)."""
    import torch
    from transformers import AutoModelForCausalLM

    return {
        fam: AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        for fam, d in tiny_model_dirs.items()
    }
