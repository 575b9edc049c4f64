"""LocalGrid: a Flower strategy's own loop (Strategy.start) over organizations in this process.
Ours (SecureFedNesterov) ends where eqs. 3-5 recomputed from the received updates end; Flower's
FedAvg weighs the same replies by their scrubbed-token counts; an organization that fails answers
with an error reply and is left out, the round completes."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from flwr.app import ConfigRecord
from flwr.serverapp.strategy import FedAvg

from conftest import ORGS, write_org_code
from umbra.federation.adapter_arrays import initial_arrays
from umbra.federation.aggregate import ServerOptConfig, ServerState, aggregate_round, weighted_average
from umbra.federation.local_grid import LocalGrid
from umbra.federation.org_training import OrgTrainer, scrubbed_view
from umbra.federation.record import load_arrays
from umbra.federation.strategy import SecureFedNesterov, to_record
from umbra.scrub import Scrubber
from umbra.tuning.adapter_config import AdapterTrainConfig
from umbra.tuning.securegate import read_org_code

CONFIG = AdapterTrainConfig(rank=2, lr=3e-3, epochs=1, block_len=64, batch_size=4, fim_rate=0.0, seed=0)
TRAIN = ConfigRecord({"rank": 2, "lr": 3e-3, "epochs": 1, "block-len": 64, "batch-size": 4, "fim-rate": 0.0,
                      "seed": 0, "rounds": 2})


@pytest.fixture(scope="module")
def setup(fim_qwen2_dir, tmp_path_factory):
    from umbra.engine import ClientModel
    from umbra.middle.local import LocalMiddle

    model = ClientModel.load(fim_qwen2_dir)
    middle = LocalMiddle(model.load_middle())
    root = tmp_path_factory.mktemp("orgs")
    trainers = {}
    for i, org in enumerate(ORGS):
        view = scrubbed_view(read_org_code([write_org_code(root, org, files=3 + 2 * i)]), Scrubber())
        trainers[10 + i] = asyncio.run(OrgTrainer.create(model, middle, view, CONFIG))
    return model, trainers


def test_our_strategy_over_the_local_grid_is_eqs_3_to_5_of_what_it_received(setup, tmp_path):
    model, trainers = setup
    start = initial_arrays(model, CONFIG)
    opt = ServerOptConfig(momentum=0.5, lr=1.0)
    strategy = SecureFedNesterov(start, opt, min_nodes=3, node_wait=1.0, record_dir=tmp_path)
    grid = LocalGrid(trainers)
    result = strategy.start(grid=grid, initial_arrays=to_record(start), num_rounds=2, train_config=TRAIN)
    assert len(grid.reports) == 6 and [r["round"] for _, r in grid.reports] == [1, 1, 1, 2, 2, 2]
    state = ServerState.initial(start)
    for t in (1, 2):
        line = next(json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()
                    if json.loads(x)["round"] == t)
        assert sorted(line["accepted"]) == [10, 11, 12] and not line["rejected"]
        state = aggregate_round(state, [load_arrays(tmp_path / f"round-{t}" / f"{n}.npz") for n in line["accepted"]],
                                opt)
    final = {k: a.numpy() for k, a in result.arrays.items()}
    assert all(np.array_equal(final[k], state.weights[k]) for k in state.weights)
    assert any(not np.array_equal(final[k], start[k]) for k in start)


def test_flowers_fedavg_weighs_the_replies_by_scrubbed_tokens(setup):
    model, trainers = setup
    start = initial_arrays(model, CONFIG)
    grid = LocalGrid(trainers)
    result = FedAvg(fraction_evaluate=0.0, min_train_nodes=3, min_available_nodes=3).start(
        grid=grid, initial_arrays=to_record(start), num_rounds=1, train_config=TRAIN)
    ups = [trainers[n].round(start, 1)[:2] for n in sorted(trainers)]  # deterministic: the same updates again
    assert len({n for _, n in ups}) == 3  # three different weights
    expected = weighted_average(ups)
    got = {k: a.numpy() for k, a in result.arrays.items()}
    assert all(np.allclose(got[k], expected[k], rtol=1e-5, atol=1e-7) for k in expected)


class Broken:
    def round(self, arrays, server_round):
        raise RuntimeError("disk on fire")


def test_a_failing_organization_is_an_error_reply_and_left_out(setup, tmp_path):
    model, trainers = setup
    start = initial_arrays(model, CONFIG)
    grid = LocalGrid({**trainers, 99: Broken()})
    strategy = SecureFedNesterov(start, ServerOptConfig(), min_nodes=4, node_wait=1.0, record_dir=tmp_path)
    strategy.start(grid=grid, initial_arrays=to_record(start), num_rounds=1, train_config=TRAIN)
    line = json.loads((tmp_path / "rounds.jsonl").read_text().splitlines()[0])
    assert sorted(line["accepted"]) == [10, 11, 12] and "disk on fire" in line["rejected"]["99"]
    with pytest.raises(ValueError):
        LocalGrid({1: trainers[10]})  # the SuperLink's own node id
