"""End to end on loopback: a real SuperLink, three SuperNodes (three organizations, each its own
code with its own secrets), the ServerApp and ClientApp of umbra.federation over Flower for two
rounds. The global adapter after the run equals eqs. 3-5 recomputed by the pure functions from
the updates the server received, and every message the ServerApp received holds only the secure
adapter's tensors and the sample count."""

from __future__ import annotations

import json

import numpy as np

from conftest import ORGS, fast_settings
from umbra.federation.aggregate import ServerOptConfig, ServerState, aggregate_round
from umbra.federation.record import load_arrays


def secure_names(model_dir, settings) -> dict:
    from umbra.engine import ClientModel
    from umbra.federation.adapter_arrays import initial_arrays
    from umbra.tuning.adapter_config import AdapterTrainConfig

    config = AdapterTrainConfig(rank=settings.rank, seed=settings.seed)
    return {k: list(v.shape) for k, v in initial_arrays(ClientModel.load(model_dir), config).items()}


def replay(record, rounds: int, opt: ServerOptConfig) -> ServerState:
    """The run's aggregation recomputed from the recorded updates by the pure functions."""
    state = ServerState.initial(load_arrays(record / "round-0" / "global.npz")[0])
    lines = [json.loads(x) for x in (record / "rounds.jsonl").read_text().splitlines()]
    for t in range(1, rounds + 1):
        r = next(x for x in lines if x["round"] == t)
        ups = [load_arrays(record / f"round-{t}" / f"{n}.npz") for n in r["accepted"]]
        state = aggregate_round(state, ups, opt)
    return state


def test_three_organizations_two_rounds_global_equals_the_pure_aggregation(federation, tmp_path):
    settings = fast_settings(tmp_path, federation.model_dir)
    federation.start_superlink()
    for org in ORGS:
        federation.start_node(org)
    run = federation.run(settings)
    assert run.returncode == 0, federation.log("run")[-3000:]
    record = tmp_path / "record"
    rounds = [json.loads(x) for x in (record / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [1, 2] and all(len(r["accepted"]) == 3 and not r["rejected"]
                                                          for r in rounds)
    # the organizations trained on different data: their updates differ, and each moved off Δw^0
    start = load_arrays(record / "round-0" / "global.npz")[0]
    ups = [load_arrays(record / "round-1" / f"{n}.npz") for n in rounds[0]["accepted"]]
    assert len({u[1] for u in ups}) > 1 or len({float(sum(np.abs(a).sum() for a in u[0].values())) for u in ups}) == 3
    assert all(any(not np.array_equal(u[0][k], start[k]) for k in start) for u in ups)

    expected = replay(record, 2, ServerOptConfig(settings.momentum, settings.server_lr))
    final, _ = load_arrays(tmp_path / "global.npz")
    assert set(final) == set(expected.weights)
    for name, a in final.items():
        assert np.array_equal(a, expected.weights[name]), name
        assert np.array_equal(a, load_arrays(record / "round-2" / "global.npz")[0][name])


def test_every_message_the_server_receives_is_the_secure_adapter_and_a_count(federation, tmp_path):
    settings = fast_settings(tmp_path, federation.model_dir, rounds=1)
    federation.start_superlink()
    for org in ORGS:
        federation.start_node(org)
    assert federation.run(settings).returncode == 0, federation.log("run")[-3000:]
    names = secure_names(federation.model_dir, settings)
    messages = [json.loads(x) for x in (tmp_path / "record" / "messages.jsonl").read_text().splitlines()]
    assert len(messages) == 3 and len({m["node"] for m in messages}) == 3
    for m in messages:
        assert m["error"] is None and set(m["records"]) == {"arrays", "metrics"}
        arrays, metrics = m["records"]["arrays"], m["records"]["metrics"]
        assert arrays["kind"] == "ArrayRecord" and metrics["kind"] == "MetricRecord"
        assert {k: v["shape"] for k, v in arrays["entries"].items()} == names
        assert all(v["dtype"] == "float32" for v in arrays["entries"].values())
        assert set(metrics["entries"]) == {"num-examples"} and metrics["entries"]["num-examples"] > 0
    # and nothing of any organization's raw code rode along, in any form the log keeps
    text = (tmp_path / "record" / "messages.jsonl").read_text()
    assert not any(s in text for org in ORGS for s in ("sk_live", "acme.com", "initech", "globex.com", "10.20.30.40"))
