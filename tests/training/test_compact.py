"""Compact checkpoints: save -> restore -> resume continues the run where it stopped."""

from __future__ import annotations

import json

import pytest
import torch

from tests.training.conftest import tiny_train_config
from umbra.errors import ConfigError
from umbra.training.checkpoint import CHECKPOINT_NAME, load_checkpoint
from umbra.training.compact import MANIFEST, CompactSpec, restore_compact, save_compact
from umbra.training.config import RepoConfig
from umbra.training.trainer import pretrain


def test_compact_round_trip_resumes_the_run(tiny_corpus, tmp_path):
    corpus, tok = tiny_corpus
    first = pretrain(tiny_train_config(corpus, tok, tmp_path / "a", stop_at_step=5), enforce_limits=False)
    assert first.state.step == 5

    manifest = save_compact(tmp_path / "a" / CHECKPOINT_NAME, tmp_path / "store", CompactSpec(part_bytes=20_000))
    full_bytes = (tmp_path / "a" / CHECKPOINT_NAME).stat().st_size
    assert len(manifest["parts"]) >= 2 and all(p["bytes"] <= 20_000 for p in manifest["parts"])
    assert manifest["bytes"] < 0.45 * full_bytes  # 4 bytes per parameter instead of 12

    state = restore_compact(tmp_path / "store", tmp_path / "b" / CHECKPOINT_NAME)
    a, b = load_checkpoint(tmp_path / "a" / CHECKPOINT_NAME), load_checkpoint(tmp_path / "b" / CHECKPOINT_NAME)
    assert state == a["state"] and b["state"] == a["state"]  # step and data position
    assert torch.equal(b["rng"]["torch"], a["rng"]["torch"]) and b["rng"]["python"] == a["rng"]["python"]
    for name, w in a["model"].items():
        torch.testing.assert_close(b["model"][name], w, rtol=2 ** -8, atol=0)  # bf16 rounding only
    emb, head = b["model"]["model.embed_tokens.weight"], b["model"]["lm_head.weight"]
    assert emb.data_ptr() == head.data_ptr()  # tied weights stored once, restored tied
    for idx, st in a["optimizer"]["state"].items():
        rt = b["optimizer"]["state"][idx]
        assert torch.equal(rt["step"], st["step"])
        torch.testing.assert_close(rt["exp_avg_sq"], st["exp_avg_sq"], rtol=2 ** -8, atol=0)
        assert not rt["exp_avg"].any()  # dropped: re-warms within ~10 steps (beta1 = 0.9)

    exact = pretrain(tiny_train_config(corpus, tok, tmp_path / "a", stop_at_step=7), resume=True,
                     enforce_limits=False)
    resumed = pretrain(tiny_train_config(corpus, tok, tmp_path / "b", stop_at_step=7), resume=True,
                       enforce_limits=False)
    assert (resumed.state.step, resumed.state.epoch, resumed.state.block) == (7, exact.state.epoch, exact.state.block)
    assert resumed.losses == pytest.approx(exact.losses, abs=0.05)  # the same batches, nearly the same model


def test_momentum_can_be_kept_and_corruption_is_refused(tiny_corpus, tmp_path):
    corpus, tok = tiny_corpus
    pretrain(tiny_train_config(corpus, tok, tmp_path / "a", stop_at_step=2, repo=RepoConfig(rate=0.0)),
             enforce_limits=False)
    store = tmp_path / "store"
    save_compact(tmp_path / "a" / CHECKPOINT_NAME, store, CompactSpec(keep_momentum=True))
    restore_compact(store, tmp_path / "b" / CHECKPOINT_NAME)
    a, b = load_checkpoint(tmp_path / "a" / CHECKPOINT_NAME), load_checkpoint(tmp_path / "b" / CHECKPOINT_NAME)
    for idx, st in a["optimizer"]["state"].items():
        torch.testing.assert_close(b["optimizer"]["state"][idx]["exp_avg"], st["exp_avg"], rtol=2 ** -8, atol=0)
    part = store / json.loads((store / MANIFEST).read_text())["parts"][0]["name"]
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(ConfigError):
        restore_compact(store, tmp_path / "c" / CHECKPOINT_NAME)
