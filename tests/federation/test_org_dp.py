"""An organization's round under document-level DP-SGD (org_training.py with a DPConfig,
umbra/tuning/dp_lora.py): each drawn file's gradient is clipped to C, Gaussian noise of standard
deviation σ·C/B is added to every coordinate, the ε spent is recorded after every round and reaches
the plan's ε after the planned rounds, and a round past them is refused."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
import torch

from conftest import write_org_code
from umbra.errors import ConfigError
from umbra.federation.adapter_arrays import arrays_to_adapter, initial_arrays
from umbra.federation.org_training import OrgTrainer, scrubbed_view
from umbra.scrub import ScrubConfig, Scrubber
from umbra.tuning.adapter_config import AdapterTrainConfig
from umbra.tuning.dp_lora import dp_gradient, per_document_grads
from umbra.tuning.dp_sgd import DPRandom, PrivacyBudgetError, flat_norms
from umbra.tuning.noesis_config import DPConfig
from umbra.tuning.securegate import read_org_code

CONFIG = AdapterTrainConfig(rank=2, lr=3e-3, epochs=1, block_len=64, batch_size=4, fim_rate=0.0, seed=0)
DP = DPConfig(epsilon=4.0, delta=1e-3, clip_norm=1e-3, expected_batch=4, noise_seed=7)


@pytest.fixture(scope="module")
def model(fim_qwen2_dir):
    from umbra.engine import ClientModel

    return ClientModel.load(fim_qwen2_dir)


def new_trainer(model, root) -> OrgTrainer:
    from umbra.middle.local import LocalMiddle

    code = write_org_code(root, "acme", files=12)
    view = scrubbed_view(read_org_code([code]), Scrubber(ScrubConfig(internal_domains=("acme.com",))))
    return asyncio.run(OrgTrainer.create(model, LocalMiddle(model.load_middle()), view, CONFIG, DP, rounds=2))


@pytest.fixture(scope="module")
def trainer(model, tmp_path_factory):
    return new_trainer(model, tmp_path_factory.mktemp("org"))


def test_a_dp_step_clips_every_file_and_adds_noise_of_sigma_c_over_b(model, trainer):
    docs, plan, _, _ = trainer.dp
    assert docs.count == 12 and plan.noise_multiplier > 0 and plan.clip_norm == DP.clip_norm
    adapter = arrays_to_adapter(initial_arrays(model, CONFIG), model, CONFIG, "secure").requires_grad_(True)
    raw, _ = per_document_grads(model, adapter, trainer.hidden, docs, np.arange(docs.count))
    norms = flat_norms(raw)
    assert (norms > 10 * DP.clip_norm).all()  # so clipping to C has work to do
    # each row is its file's own gradient: one file alone gives the same row
    alone, _ = per_document_grads(model, adapter, trainer.hidden, docs, np.array([3]))
    assert all(torch.allclose(alone[k][0], raw[k][3], atol=1e-7) for k in raw)
    step = dp_gradient(model, adapter, trainer.hidden, docs, plan, DPRandom(11))
    assert len(step.drawn) >= 1
    clipped_norm = float(flat_norms({k: v[None] for k, v in step.clipped.items()})[0])
    assert clipped_norm <= len(step.drawn) * DP.clip_norm * (1 + 1e-4)  # Σ of |S| vectors of norm <= C
    noise = torch.cat([(step.grad[k] - step.clipped[k] / plan.expected_batch).flatten() for k in step.grad])
    expected = plan.noise_multiplier * plan.clip_norm / plan.expected_batch
    assert noise.numel() > 1000 and abs(float(noise.std()) / expected - 1) < 0.1
    assert abs(float(noise.mean())) < 5 * expected / math.sqrt(noise.numel())
    # the same CSPRNG seed draws the same files and the same noise; another seed does not
    again = dp_gradient(model, adapter, trainer.hidden, docs, plan, DPRandom(11))
    other = dp_gradient(model, adapter, trainer.hidden, docs, plan, DPRandom(12))
    assert all(torch.equal(step.grad[k], again.grad[k]) for k in step.grad)
    assert any(not torch.equal(step.grad[k], other.grad[k]) for k in step.grad)


def test_rounds_record_the_epsilon_spent_and_stop_when_it_is_spent(model, trainer):
    assert trainer.privacy()["epsilon_spent"] == 0.0 and trainer.privacy()["steps_taken"] == 0
    start = initial_arrays(model, CONFIG)
    arrays, samples, report = trainer.round(start, 1)
    first = report["privacy"]
    assert first["mechanism"] == "dp-sgd/poisson/v1" and first["unit"] == "document"
    assert 0 < first["epsilon_spent"] < DP.epsilon and first["rounds_taken"] == 1
    assert any(not np.array_equal(arrays[k], start[k]) for k in start) and samples == trainer.samples
    _, _, report = trainer.round(arrays, 2)
    second = report["privacy"]
    assert first["epsilon_spent"] < second["epsilon_spent"] <= DP.epsilon
    assert second["steps_taken"] == second["steps"] and second["epsilon_spent"] == pytest.approx(second["epsilon"])
    with pytest.raises(PrivacyBudgetError, match="is spent"):
        trainer.round(arrays, 3)


def test_a_new_process_resumes_the_plan_where_the_last_one_left_it(model, tmp_path):
    """A deployed ClientApp is a new process every round: the trainer it builds takes up the node's
    saved progress, spends only the rest of the plan, and never goes back on progress."""
    first = new_trainer(model, tmp_path / "a")
    arrays, _, report = first.round(initial_arrays(model, CONFIG), 1)
    saved = first.dp_progress
    assert saved == {"rounds-taken": 1, "steps-taken": report["privacy"]["steps_taken"]}
    later = new_trainer(model, tmp_path / "b")  # what the next round's process builds
    later.resume(saved)
    _, _, report = later.round(arrays, 2)
    assert report["privacy"]["rounds_taken"] == 2 and report["privacy"]["steps_taken"] == report["privacy"]["steps"]
    with pytest.raises(PrivacyBudgetError, match="is spent"):
        later.round(arrays, 3)
    with pytest.raises(ConfigError, match="behind"):
        later.resume(saved)
