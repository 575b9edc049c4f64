"""umbra/training/card.py: the model card renders from committed files only (the shipped model's
card regenerates byte for byte), and an up-scaled deep run's card says where its weights began,
how much of the model the client holds, its repository-level sequences, its held-out evaluation
and the commands that reproduce it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from umbra.errors import ConfigError
from umbra.training.card import CardInputs, render_card

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "models" / "umbra-code-tiny"
SUMMARY = ROOT / "data" / "manifest" / "summary.json"
CARD_FILES = ("config.json", "training.json", "eval.json", "eval-heldout.json", "tokenizer.json")


@pytest.mark.parametrize("name", ["umbra-code-tiny", "umbra-code-deep"])
def test_the_shipped_cards_regenerate_from_committed_files(name):
    model = ROOT / "models" / name
    assert render_card(CardInputs(model, SUMMARY)) == (model / "README.md").read_text(encoding="utf-8")


@pytest.fixture
def deep_dir(tmp_path) -> Path:
    """The tiny model's card inputs, edited into what the deep run's export writes."""
    d = tmp_path / "umbra-code-deep"
    d.mkdir()
    for name in CARD_FILES:
        shutil.copy2(TINY / name, d / name)
    config = json.loads((d / "config.json").read_text())
    config.update(num_hidden_layers=16, max_position_embeddings=1024, vocab_size=8256)
    (d / "config.json").write_text(json.dumps(config))
    prov = json.loads((d / "training.json").read_text())
    prov["init"] = {"init": "upscaled", "base_model": "models/umbra-code-tiny"}
    prov["config"]["repo"] = {"rate": 0.3, "min_files": 2, "max_files": 4, "max_unit_chars": 6000,
                              "file_sep": "<file_sep>"}
    (d / "training.json").write_text(json.dumps(prov))
    return d


def test_an_upscaled_run_names_its_base_its_share_and_its_repository_sequences(deep_dir):
    card = render_card(CardInputs(deep_dir, SUMMARY))
    assert card.startswith("# umbra-code-deep\n")
    assert "It began as `umbra-code-tiny`: each of that model's trained blocks stacked twice" in card
    assert "the client holds 2 of 16 blocks (12.5%)" in card  # E=1, D=1 from 16 layers up
    assert "30% of the eligible files are grouped, 2–4 files of one package directory" in card
    assert "`<file_sep>`" in card and "embedding rows 8,256" in card
    assert "held-out third-party code no model here trained on" in card
    assert "scripts/pretrain-deep start" in card
    assert ("umbra train export --checkpoint runs/pretrain-deep/last.pt --tokenizer runs/pretrain-deep/tokenizer "
            "--out models/umbra-code-deep") in card
    assert "Trained from random weights" not in card


def test_the_heldout_section_appears_only_with_its_file(deep_dir):
    (deep_dir / "eval-heldout.json").unlink()
    card = render_card(CardInputs(deep_dir, SUMMARY))
    assert "held-out third-party code no model here trained on" not in card
    assert "the corpus's test split" in card


def test_a_missing_input_names_the_command_that_writes_it(deep_dir):
    (deep_dir / "eval.json").unlink()
    with pytest.raises(ConfigError, match="umbra eval lm --model"):
        render_card(CardInputs(deep_dir, SUMMARY))
