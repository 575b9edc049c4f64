"""One organization's round: its raw code is scrubbed before anything is trained (no secret in
the view), the secure LoRA starts from the global adapter (left unchanged) and moves, the weight
is the count of scrubbed tokens, the round is deterministic, and a global adapter of another
shape is refused."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from conftest import SECRETS, write_org_code
from umbra.errors import ConfigError
from umbra.federation.adapter_arrays import initial_arrays
from umbra.federation.org_training import OrgTrainer, scrubbed_view
from umbra.scrub import ScrubConfig, Scrubber
from umbra.tuning.adapter_config import AdapterTrainConfig
from umbra.tuning.securegate import read_org_code

CONFIG = AdapterTrainConfig(rank=2, lr=3e-3, epochs=1, block_len=64, batch_size=4, fim_rate=0.0, seed=0)


@pytest.fixture(scope="module")
def model(fim_qwen2_dir):
    from umbra.engine import ClientModel

    return ClientModel.load(fim_qwen2_dir)


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    code = write_org_code(tmp_path_factory.mktemp("org"), "acme")
    return scrubbed_view(read_org_code([code]), Scrubber(ScrubConfig(internal_domains=("acme.com",))))


@pytest.fixture(scope="module")
def trainer(model, view):
    from umbra.middle.local import LocalMiddle

    return asyncio.run(OrgTrainer.create(model, LocalMiddle(model.load_middle()), view, CONFIG))


def test_the_view_holds_no_secret_of_the_organization(view):
    key, mail, host = SECRETS["acme"]
    text = "".join(view.texts)
    assert "sk_live_51Hc8Qz2eZvKYlo2CkZ8uT9mXq3" in key and "sk_live" not in text
    assert mail not in text and host not in text
    assert view.findings["secret"] >= 6 and view.findings["email"] >= 6


def test_a_round_starts_from_the_global_adapter_and_moves_it(model, trainer):
    start = initial_arrays(model, CONFIG)
    before = {k: v.copy() for k, v in start.items()}
    arrays, samples, report = trainer.round(start, 1)
    assert {k: v.shape for k, v in arrays.items()} == {k: v.shape for k, v in start.items()}
    assert all(np.array_equal(start[k], before[k]) for k in start)  # the global is not written
    assert any(not np.array_equal(arrays[k], start[k]) for k in start)
    assert samples == trainer.blocks.tokens > 0 and report["steps"] >= 1 and report["tokens"] == samples
    again, _, _ = trainer.round(start, 1)
    assert all(np.array_equal(arrays[k], again[k]) for k in arrays)  # deterministic
    other, _, _ = trainer.round(start, 2)  # another round's batch order
    assert any(not np.array_equal(arrays[k], other[k]) for k in arrays)


def test_a_global_adapter_of_another_shape_or_round_zero_is_refused(model, trainer):
    start = initial_arrays(model, CONFIG)
    wrong = initial_arrays(model, AdapterTrainConfig(rank=3))
    with pytest.raises(ConfigError, match="has shape"):
        trainer.round(wrong, 1)
    with pytest.raises(ConfigError, match="missing"):
        trainer.round({k: v for k, v in list(start.items())[1:]}, 1)
    with pytest.raises(ConfigError, match="rounds count from 1"):
        trainer.round(start, 0)
    with pytest.raises(ConfigError):
        scrubbed_view([], Scrubber())
