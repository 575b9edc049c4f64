"""`umbra tune shared` and `umbra tune experts` end to end on a tiny bundle (the middle in-process):
the DP shared prompt is stored with the ε it spent, one expert per language beside it, and
`umbra complete` routes by the file's language (an unknown one gets the shared prompt only).
Budgets the data cannot meet and empty language slices are refused with a clear message.
`tune shared` and `tune experts` run once each as the console program in a subprocess; the other
commands call the entry point in-process (tests/cli_helpers.py)."""

from __future__ import annotations

import json
import random

import pytest
import torch
from cli_helpers import umbra_in_process, umbra_subprocess
from tiny_models import CODE_SNIPPETS

from umbra.data.corpus import Document, write_documents
from umbra.privacy.bundle import BundleConfig, init_bundle
from umbra.privacy.manifest import Manifest
from umbra.tuning.dp_sgd import spent_epsilon
from umbra.tuning.noesis_config import FAMILY_CLIP_NORM

_umbra = umbra_in_process


@pytest.fixture(scope="module")
def setup(tmp_path_factory, module_keystore, fim_llama_dir):
    root = tmp_path_factory.mktemp("noesis-cli")
    base = fim_llama_dir  # the run's tiny llama, read-only
    bundle = root / "bundle"
    init_bundle(base, BundleConfig(epsilon=float("inf")), bundle, store=module_keystore)
    corpus = root / "corpus"
    rng = random.Random(0)
    for lang, n in (("python", 40), ("go", 12)):
        docs = [Document(lang, f"{lang}/{i}", "".join(rng.sample(CODE_SNIPPETS, 2)).replace("a + b", f"a + {i}"))
                for i in range(n)]
        write_documents(corpus, "train", lang, docs)
    return bundle, corpus, module_keystore.service, root


def test_shared_then_experts_then_completion_by_language(setup):
    bundle, corpus, service, root = setup
    common = ["--bundle", str(bundle), "--corpus-dir", str(corpus), "--in-process", "--service", service]
    r = umbra_subprocess("tune", "shared", *common, "--prompt-length", "4", "--context-length", "40",
                         "--expected-batch", "4", "--epochs", "0.5", "--delta", "1e-3", "--physical-batch", "4")
    assert r.returncode == 0, r.stderr
    entry = Manifest.read(bundle).adapters["shared"]
    assert entry["role"] == "shared" and entry["kind"] == "soft_prompt" and entry["placement"] == "input"
    dp = entry["privacy"]
    assert dp["unit"] == "document" and dp["documents"] == 52 and dp["epsilon"] <= 1.0 and dp["target_epsilon"] == 1.0
    assert spent_epsilon(dp["noise_multiplier"], dp["sample_rate"], dp["steps"], dp["delta"]) <= 1.0
    assert dp["clip_norm"] == 1.0  # the soft prompt keeps the paper's bound
    assert entry["training"]["documents"] == {"go": 12, "python": 40}

    r = umbra_subprocess("tune", "experts", *common, "--rank", "2", "--epochs", "1", "--block-len", "32",
                         "--batch-size", "4")
    assert r.returncode == 0, r.stderr
    adapters = Manifest.read(bundle).adapters
    for lang in ("python", "go"):
        e = adapters[f"expert-{lang}"]
        assert e["role"] == "expert" and e["language"] == lang and e["privacy"] is None
        assert e["training"]["beside"] == {"shared": entry["sha256"]}

    served = {}
    for name in ("main.go", "main.py", "main.rs"):
        src = root / name
        src.write_text("def add(a, b):\n    return ")
        r = _umbra("complete", f"{src}:2:12", "--bundle", str(bundle), "--service", service, "--local", "--json",
                   "--max-tokens", "4")
        assert r.returncode == 0, r.stderr
        served[name] = json.loads(r.stdout)
    assert served["main.go"]["expert"] == "expert-go" and served["main.py"]["expert"] == "expert-python"
    assert served["main.rs"]["expert"] is None  # unknown language: the shared prompt only


def test_the_clip_bound_defaults_to_the_familys_and_a_given_one_wins(setup):
    bundle, corpus, service, _ = setup
    common = ["--bundle", str(bundle), "--corpus-dir", str(corpus), "--in-process", "--service", service,
              "--family", "deep_prompt", "--prompt-length", "2", "--context-length", "32", "--expected-batch", "4",
              "--epochs", "0.2", "--delta", "1e-3", "--physical-batch", "4"]
    for name, extra, clip in (("deep", (), FAMILY_CLIP_NORM["deep_prompt"]), ("deep-given", ("--clip", "0.5"), 0.5)):
        r = _umbra("tune", "shared", *common, "--name", name, *extra)
        assert r.returncode == 0, r.stderr
        assert f"C = {clip:g}" in r.stderr
        assert Manifest.read(bundle).adapters[name]["privacy"]["clip_norm"] == clip


def test_bad_budgets_and_empty_slices_are_refused(setup):
    bundle, corpus, service, _ = setup
    common = ["--bundle", str(bundle), "--corpus-dir", str(corpus), "--in-process", "--service", service]
    r = _umbra("tune", "shared", *common, "--epsilon", "1e-7", "--epochs", "40", "--expected-batch", "40",
               "--delta", "1e-3", "--name", "never")
    assert r.returncode != 0 and "cannot reach" in r.stderr
    r = _umbra("tune", "shared", *common, "--expected-batch", "100", "--name", "never")
    assert r.returncode != 0 and "exceeds the 52 documents" in r.stderr
    r = _umbra("tune", "experts", *common, "--languages", "java")
    assert r.returncode != 0 and ("java" in r.stderr)
    assert "never" not in Manifest.read(bundle).adapters
    r = _umbra("tune", "shared", *common, "--device", "tpu", "--name", "never", "--expected-batch", "4", "--delta", "1e-3")
    assert r.returncode == 2 and "device 'tpu'" in r.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA accelerator")
def test_shared_and_experts_train_on_cuda(setup):
    bundle, corpus, service, _ = setup
    common = ["--bundle", str(bundle), "--corpus-dir", str(corpus), "--in-process", "--service", service,
              "--device", "cuda", "--replace"]
    r = _umbra("tune", "shared", *common, "--prompt-length", "4", "--context-length", "40", "--expected-batch", "4",
               "--epochs", "0.5", "--delta", "1e-3", "--physical-batch", "4", "--name", "shared-cuda")
    assert r.returncode == 0, r.stderr
    r = _umbra("tune", "experts", *common, "--rank", "2", "--epochs", "1", "--block-len", "32", "--batch-size", "4",
               "--name", "cuda-{language}")
    assert r.returncode == 0, r.stderr
    adapters = Manifest.read(bundle).adapters
    assert adapters["shared-cuda"]["privacy"]["epsilon"] <= 1.0 and adapters["cuda-go"]["role"] == "expert"
