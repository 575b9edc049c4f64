"""`umbra eval lm` runs end to end on a small slice, and its pieces measure what they claim."""

from __future__ import annotations

import json

import numpy as np
import torch

from tiny_models import CODE_SNIPPETS, build_tiny_model_dir
from umbra.cli.main import main
from umbra.data.corpus import Document, write_documents
from umbra.evaluation.fim_lines import sample_cases
from umbra.evaluation.next_token import next_token_metrics


def test_sampled_fim_cases_cut_the_file_around_one_nonblank_line():
    docs = [Document("python", f"f{i}.py", s) for i, s in enumerate(CODE_SNIPPETS)]
    cases = sample_cases(docs, 8, seed=3)
    assert cases == sample_cases(docs, 8, seed=3)  # fixed seed, same lines
    by_path = {d.path: d.text for d in docs}
    for c in cases:
        assert c.truth.strip()
        original = by_path[c.path]
        lines = original.splitlines(keepends=True)
        assert c.prefix + lines[c.line] + c.suffix == original
        assert lines[c.line].rstrip("\r\n") == c.truth


def test_next_token_metrics_count_hits_exactly():
    blocks = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])

    def oracle_for_first_block(ids):  # predicts ids+1 everywhere: right on both rows
        return torch.nn.functional.one_hot((ids + 1) % 10, 10).float() * 10

    m = next_token_metrics(oracle_for_first_block, blocks, batch_size=1)
    assert m.tokens == 6 and m.top1 == 1.0 and m.perplexity < 1.01

    def always_zero(ids):
        return torch.nn.functional.one_hot(torch.zeros_like(ids), 10).float()

    assert next_token_metrics(always_zero, blocks).top1 == 0.0


def test_eval_command_on_a_small_slice_reports_every_language(tmp_path):
    model_dir = tmp_path / "model"
    build_tiny_model_dir(model_dir)
    corpus = tmp_path / "corpus"
    for lang in ("python", "go"):
        docs = [Document(lang, f"{lang}/{i}.src", s * 4) for i, s in enumerate(CODE_SNIPPETS)]
        write_documents(corpus, "test", lang, docs)
    out = tmp_path / "report.json"
    status = main(["eval", "lm", "--model", str(model_dir), "--corpus", str(corpus), "--langs", "python,go",
                   "--max-tokens", "4000", "--fim-lines", "10", "--threads", "1", "--json", str(out)])
    assert status == 0  # its speed is no test's business (speed goals live in benchmarks/)
    report = json.loads(out.read_text())
    langs = {r["lang"]: r for r in report["languages"]}
    assert set(langs) == {"python", "go"}
    for r in langs.values():
        assert r["tokens"] > 0 and 0.0 <= r["top1"] <= 1.0 and r["perplexity"] > 1.0
        assert r["fim_cases"] == 10 and 0.0 <= r["fim_exact_match"] <= 1.0
