"""ClientModel: loading a model directory for the client, with clear errors for incomplete ones."""

from __future__ import annotations

import shutil

import pytest

from tiny_models import build_tiny_tokenizer
from umbra.engine import ClientModel, check_model_dir
from umbra.errors import ConfigError
from umbra.model.parts import SplitPlan


def test_client_reads_only_its_own_tensors(tiny_dir):
    model = ClientModel.load(tiny_dir)
    first, last = model.plan.middle_range(model.spec.num_layers)
    middle_prefixes = tuple(f"model.layers.{i}." for i in range(first, last))
    assert model.checkpoint.read_keys
    assert not [k for k in model.checkpoint.read_keys if k.startswith(middle_prefixes)]
    assert model.fim.name == "starcoder"


def test_missing_directory(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        check_model_dir(tmp_path / "nowhere")


def test_config_and_tokenizer_without_weights_says_still_training(tiny_dir, tmp_path):
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_dir / name, tmp_path / name)
    with pytest.raises(ConfigError, match="missing model.safetensors .is the model still training"):
        ClientModel.load(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(ConfigError, match="missing tokenizer.json, model.safetensors$"):
        ClientModel.load(tmp_path)


def test_split_without_middle_blocks_is_refused(tiny_dir):
    with pytest.raises(ConfigError, match="no middle block"):
        ClientModel.load(tiny_dir, SplitPlan(3, 3))


def test_tokenizer_without_fim_tokens_is_refused(tiny_dir, tmp_path):
    for path in tiny_dir.iterdir():
        shutil.copy(path, tmp_path / path.name)
    build_tiny_tokenizer(tmp_path, "plain")
    with pytest.raises(ConfigError, match="fill-in-the-middle"):
        ClientModel.load(tmp_path)
