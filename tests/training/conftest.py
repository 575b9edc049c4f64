"""A tiny corpus + tokenizer built inside the test, so training tests never need the real corpus."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from umbra.data.corpus import Document, write_documents
from umbra.data.tokenizer import TokenizerConfig, build_bpe, save_hf_tokenizer
from umbra.training.config import FimConfig, ModelConfig, TrainConfig


def _python_doc(rng: random.Random, i: int) -> str:
    names = ["alpha", "beta", "gamma", "delta", "value", "items", "count"]
    body = "\n".join(f"    {rng.choice(names)} = {rng.choice(names)} + {rng.randint(0, 99)}"
                     for _ in range(rng.randint(3, 12)))
    return f"def func_{i}(x, y):\n{body}\n    return x\r\n\n# café ünïcode\tTAB\n"


def _go_doc(rng: random.Random, i: int) -> str:
    return f"package p{i}\n\nfunc F{i}(a int) int {{\n\treturn a * {rng.randint(1, 9)}\n}}\n"


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> tuple[Path, Path]:
    """(corpus_dir, tokenizer_dir) with train/valid splits for python and go."""
    root = tmp_path_factory.mktemp("tiny")
    rng = random.Random(0)
    corpus = root / "corpus"
    texts = {}
    for split, n in (("train", 60), ("valid", 6)):
        py = [Document("python", f"py/{split}/{i}.py", _python_doc(rng, i)) for i in range(n)]
        go = [Document("go", f"go/{split}/{i}.go", _go_doc(rng, i)) for i in range(n)]
        write_documents(corpus, split, "python", py)
        write_documents(corpus, split, "go", go)
        texts[split] = [d.text for d in py + go]
    tok = build_bpe(iter(texts["train"]), TokenizerConfig(vocab_size=600, min_frequency=1))
    tok_dir = save_hf_tokenizer(tok, root / "tok")
    return corpus, tok_dir


def tiny_train_config(corpus: Path, tok_dir: Path, out_dir: Path, **overrides) -> TrainConfig:
    model = ModelConfig(vocab_size=600, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                        intermediate_size=64, context_length=64)
    cfg = TrainConfig(corpus_dir=corpus, tokenizer_dir=tok_dir, out_dir=out_dir,
                      export_dir=out_dir / "export", batch_size=4, total_tokens=4 * 64 * 8,
                      warmup_steps=2, eval_every_steps=3, eval_tokens_per_lang=512,
                      checkpoint_minutes=60.0, bf16=False, model=model, fim=FimConfig())
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg
