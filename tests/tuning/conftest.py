"""Fixtures of the STuning tests: a tiny base model with the default model's FIM tokens, a tiny
corpus in the corpus layout, and client bundles over the real OS keyring."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tiny_models import CODE_SNIPPETS
from umbra.data.corpus import Document, write_documents
from umbra.tuning.config import TuneConfig


@pytest.fixture(scope="session")
def base_dir(fim_qwen2_dir) -> Path:
    return fim_qwen2_dir


@pytest.fixture(scope="module")
def model(base_dir):
    """The tiny base model as a client (the adapter-training tests)."""
    from umbra.engine import ClientModel

    return ClientModel.load(base_dir)


@pytest.fixture(scope="module")
def middle_blocks(model):
    return model.load_middle()


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tune-corpus")
    rng = random.Random(0)
    for split, n in (("train", 48), ("test", 6)):
        for lang in ("python", "go"):
            docs = []
            for i in range(n):
                text = "".join(rng.sample(CODE_SNIPPETS, 2)).replace("a + b", f"a + {rng.randint(0, 99)}")
                docs.append(Document(lang, f"{lang}/{split}/{i}", text))
            write_documents(root, split, lang, docs)
    return root


def tiny_config(**overrides) -> TuneConfig:
    fields = dict(steps=5, batch_size=2, context_length=32, lr=2e-3, warmup_steps=1, seed=3, checkpoint_every=2)
    return TuneConfig(**{**fields, **overrides})
