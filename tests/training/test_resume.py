"""Checkpoint + resume reproduces an uninterrupted run exactly; export is loadable."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.training.conftest import tiny_train_config
from umbra.training.checkpoint import CHECKPOINT_NAME, load_checkpoint
from umbra.training.export import INIT_NAME, PROVENANCE_NAME
from umbra.training.trainer import pretrain

INIT = {"init": "upscaled", "base_model": "models/x"}  # how the weights began (deep.py writes it)


@pytest.fixture(scope="module")
def full(tiny_corpus, tmp_path_factory):
    """(config, result) of one uninterrupted run, shared by the tests below (they only read it):
    the reference the resumed and the compiled runs must reproduce, and the run whose logs, plot
    and export are checked. Its out_dir holds init.json, which the export's provenance carries
    (the losses and checkpoint do not read it)."""
    corpus, tok = tiny_corpus
    cfg = tiny_train_config(corpus, tok, tmp_path_factory.mktemp("resume") / "full")
    cfg.out_dir.mkdir(parents=True)
    (cfg.out_dir / INIT_NAME).write_text(json.dumps(INIT))
    result = pretrain(cfg, enforce_limits=False)
    assert result.finished and len(result.losses) == 8
    return cfg, result


def test_resume_matches_uninterrupted_run(tiny_corpus, full, tmp_path):
    corpus, tok = tiny_corpus
    full_cfg, full = full
    first = pretrain(tiny_train_config(corpus, tok, tmp_path / "split", stop_at_step=5),
                     enforce_limits=False)
    assert not first.finished and first.state.step == 5
    assert first.losses == full.losses[:5]
    second = pretrain(tiny_train_config(corpus, tok, tmp_path / "split"), resume=True,
                      enforce_limits=False)
    assert second.finished
    assert second.losses == full.losses[5:]  # exact float equality, step by step

    a = load_checkpoint(full_cfg.out_dir / CHECKPOINT_NAME)
    b = load_checkpoint(tmp_path / "split" / CHECKPOINT_NAME)
    assert a["state"] == {**b["state"], "elapsed_s": a["state"]["elapsed_s"]}
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


def test_logs_plot_and_export(full):
    cfg, result = full
    assert json.loads((cfg.export_dir / PROVENANCE_NAME).read_text())["init"] == INIT
    train_rows = (cfg.out_dir / "train_log.csv").read_text().splitlines()
    assert len(train_rows) == 1 + 8
    valid_rows = (cfg.out_dir / "valid_log.csv").read_text().splitlines()
    assert {r.split(",")[2] for r in valid_rows[1:]} == {"python", "go"}
    assert (cfg.out_dir / "curves.png").stat().st_size > 1000
    model = AutoModelForCausalLM.from_pretrained(cfg.export_dir, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(cfg.export_dir, local_files_only=True)
    assert (cfg.export_dir / "model.safetensors").exists()
    assert (cfg.export_dir / "generation_config.json").exists()
    ids = tokenizer("def f(x):", return_tensors="pt")["input_ids"]
    assert model(input_ids=ids).logits.shape[-1] == 600


def test_compiled_training_follows_the_eager_run(tiny_corpus, full, tmp_path):
    """--compile changes how the step runs, not what it computes: the same losses up to float
    reassociation, and an eager run resumes compiled (compile is a runtime-only knob)."""
    corpus, tok = tiny_corpus
    _, full = full
    eager = pretrain(tiny_train_config(corpus, tok, tmp_path / "eager", stop_at_step=4), enforce_limits=False)
    compiled = pretrain(tiny_train_config(corpus, tok, tmp_path / "compiled", stop_at_step=4, compile=True),
                        enforce_limits=False)
    assert compiled.losses == pytest.approx(eager.losses, rel=1e-4, abs=1e-5)
    assert compiled.losses[0] == pytest.approx(eager.losses[0], rel=1e-6)
    resumed = pretrain(tiny_train_config(corpus, tok, tmp_path / "eager", compile=True), resume=True,
                       enforce_limits=False)
    assert resumed.finished and resumed.state.step == 8
    assert resumed.losses == pytest.approx(full.losses[4:], rel=1e-4, abs=1e-5)
