"""Flower's simulation engine (Ray) runs the same ServerApp and ClientApp work as a deployment:
three organizations as virtual SuperNodes, two rounds. The global adapter ends at eqs. 3-5 of the
updates the server received, every organization keeps it, and the organization under DP spends its
plan once across rounds although Ray's actors serve the organizations in turn."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import numpy as np
import pytest
from flwr.app import ConfigRecord

from conftest import ORGS, fast_settings, replay, write_org_code
from umbra.engine import ClientModel
from umbra.errors import ConfigError
from umbra.federation.aggregate import ServerOptConfig
from umbra.federation.client_app import train_config
from umbra.federation.local_grid import LocalGrid
from umbra.federation.org_training import OrgTrainer, scrubbed_view
from umbra.federation.record import load_arrays
from umbra.federation.server_app import TRAIN_KEYS, initial_global
from umbra.federation.simulation import simulate
from umbra.federation.strategy import SecureFedNesterov, to_record
from umbra.middle.local import LocalMiddle
from umbra.scrub import ScrubConfig, Scrubber
from umbra.tuning.securegate import read_org_code


def test_three_simulated_organizations_end_at_the_pure_aggregation(tmp_path, fim_qwen2_dir):
    organizations = []
    for i, org in enumerate(ORGS):
        dp = {"dp-epsilon": 8.0, "dp-delta": 1e-3, "dp-batch": 2} if i == 0 else {}
        organizations.append({"data": str(write_org_code(tmp_path / "orgs", org)), "model": str(fim_qwen2_dir),
                              "threads": 1, "internal-domains": f"{org}.com,{org}.internal",
                              "global-out": str(tmp_path / f"{org}-global.npz"), **dp})
    settings = fast_settings(tmp_path, fim_qwen2_dir, node_wait=60.0)
    simulate(settings, organizations, cpus=2)

    record = tmp_path / "record"
    rounds = [json.loads(x) for x in (record / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [1, 2] and all(len(r["accepted"]) == 3 and not r["rejected"]
                                                          for r in rounds)
    expected = replay(record, 2, ServerOptConfig(settings.momentum, settings.server_lr))
    final, _ = load_arrays(tmp_path / "global.npz")
    assert set(final) == set(expected.weights)
    assert all(np.array_equal(final[k], expected.weights[k]) for k in final)
    start = load_arrays(record / "round-0" / "global.npz")[0]
    assert any(not np.array_equal(final[k], start[k]) for k in start)
    for org in ORGS:
        kept, _ = load_arrays(tmp_path / f"{org}-global.npz")
        assert all(np.array_equal(kept[k], final[k]) for k in final)
    privacy = json.loads((tmp_path / f"{ORGS[0]}-global.npz.privacy.json").read_text())
    assert privacy["rounds_taken"] == 2 and privacy["steps_taken"] == privacy["steps"]
    assert not any((tmp_path / f"{org}-global.npz.privacy.json").exists() for org in ORGS[1:])


def test_the_benchmarks_local_grid_ends_where_the_simulation_engine_ends(tmp_path, fim_qwen2_dir):
    """benchmarks/federation.py runs its many-organization cells over LocalGrid (one process):
    Flower's simulation engine, given the same organizations, ends at the same global adapter."""
    data = {org: write_org_code(tmp_path / "orgs", org) for org in ORGS}
    organizations = [{"data": str(data[org]), "model": str(fim_qwen2_dir), "threads": 1,
                      "internal-domains": f"{org}.com"} for org in ORGS]
    settings = fast_settings(tmp_path, fim_qwen2_dir, node_wait=60.0, record_dir="")
    simulate(settings, organizations, cpus=2)
    simulated, _ = load_arrays(tmp_path / "global.npz")

    rc = settings.run_config()
    model = ClientModel.load(fim_qwen2_dir)
    middle, config = LocalMiddle(model.load_middle()), train_config(rc)
    trainers = {}
    for i, org in enumerate(ORGS):
        view = scrubbed_view(read_org_code([data[org]]), Scrubber(ScrubConfig(internal_domains=(f"{org}.com",))))
        trainers[10 + i] = asyncio.run(OrgTrainer.create(model, middle, view, config, None, settings.rounds))
    strategy = SecureFedNesterov(initial_global(fim_qwen2_dir, rc),
                                 ServerOptConfig(settings.momentum, settings.server_lr), min_nodes=3, node_wait=1.0)
    result = strategy.start(grid=LocalGrid(trainers), initial_arrays=to_record(strategy.state.weights),
                            num_rounds=settings.rounds, train_config=ConfigRecord({k: rc[k] for k in TRAIN_KEYS}))
    local = {k: a.numpy() for k, a in result.arrays.items()}
    assert set(local) == set(simulated)
    assert all(np.allclose(local[k], simulated[k], rtol=1e-5, atol=1e-7) for k in local)  # torch threads differ


def test_a_simulation_is_checked_before_ray_starts(tmp_path, fim_qwen2_dir):
    settings = fast_settings(tmp_path, fim_qwen2_dir)
    with pytest.raises(ConfigError, match="at least one"):
        simulate(settings, [])
    with pytest.raises(ConfigError, match="min_nodes"):
        simulate(settings, [{"data": str(tmp_path), "model": str(fim_qwen2_dir)}])
    with pytest.raises(ConfigError, match="cpus_per_org"):
        simulate(settings, [{"data": str(tmp_path), "model": str(fim_qwen2_dir)}] * 3, cpus=1, cpus_per_org=2)


@pytest.mark.slow  # the one real run of `umbra federation simulate` as a process
def test_umbra_federation_simulate_from_the_command_line(tmp_path, fim_qwen2_dir):
    """Two organizations by directory and one from an organizations file (under DP), one round:
    the global adapter is eqs. 3-5 of what the server received, and each organization keeps it."""
    a, b = (write_org_code(tmp_path / "orgs", org) for org in ORGS[:2])
    c = write_org_code(tmp_path / "more", ORGS[2])
    (tmp_path / "orgs.json").write_text(json.dumps([{"name": "initech", "data": str(c.relative_to(tmp_path)),
                                                     "internal_domains": ["initech.com"], "dp_epsilon": 8,
                                                     "dp_delta": 1e-3, "dp_batch": 2}]))
    keep = tmp_path / "keep"
    cmd = [sys.executable, "-m", "umbra.cli.main", "federation", "simulate", str(a), str(b), "--dp-epsilon", "0",
           "--orgs", str(tmp_path / "orgs.json"), "--model", str(fim_qwen2_dir), "--rounds", "1", "--rank", "2",
           "--lr", "3e-3", "--block-len", "64", "--batch-size", "4", "--fim-rate", "0", "--cpus", "2",
           "--out", str(tmp_path / "global.npz"), "--record", str(tmp_path / "record"), "--keep-dir", str(keep)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "simulating 3 organizations (initech, " in done.stderr
    assert "an organization without DP" in done.stderr  # two of them train without it: said so
    record = tmp_path / "record"
    rounds = [json.loads(x) for x in (record / "rounds.jsonl").read_text().splitlines()]
    assert len(rounds) == 1 and len(rounds[0]["accepted"]) == 3
    expected = replay(record, 1, ServerOptConfig(0.5, 0.5))
    final, _ = load_arrays(tmp_path / "global.npz")
    assert all(np.array_equal(final[k], expected.weights[k]) for k in expected.weights)
    for org in ORGS:
        kept, _ = load_arrays(keep / f"{org}.npz")
        assert all(np.array_equal(kept[k], final[k]) for k in final)
    assert json.loads((keep / "initech.npz.privacy.json").read_text())["rounds_taken"] == 1
    assert not (keep / "acme.npz.privacy.json").exists()
