"""End to end on loopback: a real SuperLink, three SuperNodes (three organizations, each its own
code with its own secrets, one of them under document-level DP), the ServerApp and ClientApp of
umbra.federation over Flower for two rounds. The global adapter after the run equals eqs. 3-5
recomputed by the pure functions from the updates the server received, every message the
ServerApp received holds only the secure adapter's tensors and the sample count, and the DP
organization spends its plan once across the rounds."""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest

from conftest import ORGS, Federation, fast_settings, replay
from umbra.federation.aggregate import ServerOptConfig
from umbra.federation.record import load_arrays


def secure_names(model_dir, settings) -> dict:
    from umbra.engine import ClientModel
    from umbra.federation.adapter_arrays import initial_arrays
    from umbra.tuning.adapter_config import AdapterTrainConfig

    config = AdapterTrainConfig(rank=settings.rank, seed=settings.seed)
    return {k: list(v.shape) for k, v in initial_arrays(ClientModel.load(model_dir), config).items()}


DP_ORG = ORGS[0]  # trains under document-level DP in the two-round run; the others without
OTHER_BASE = "globex-8-layers"  # an organization on another base model (globex's code)


@pytest.fixture(scope="module")
def two_rounds(tmp_path_factory, fim_qwen2_dir):
    """One SuperLink, three SuperNodes (the first organization under DP) and one two-round run,
    read by the three tests below: (the federation, its settings, the run's directory)."""
    tmp = tmp_path_factory.mktemp("two-rounds")
    federation = Federation(tmp, fim_qwen2_dir)
    try:
        settings = fast_settings(tmp, federation.model_dir)
        federation.start_superlink()
        federation.start_node(DP_ORG, dp_epsilon=8.0, dp_delta=1e-3, dp_clip=1.0, dp_batch=2)
        for org in ORGS[1:]:
            federation.start_node(org)
        run = federation.run(settings)
        assert run.returncode == 0, federation.log("run")[-3000:]
        yield federation, settings, tmp
    finally:
        federation.close()


def test_three_organizations_two_rounds_global_equals_the_pure_aggregation(two_rounds):
    federation, settings, tmp_path = two_rounds
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
    # every organization got the final global adapter (for its fusion, eqs. 6-8)
    for org in ORGS:
        kept, _ = load_arrays(tmp_path / f"{org}-global.npz")
        assert all(np.array_equal(kept[k], final[k]) for k in final)


def test_every_message_the_server_receives_is_the_secure_adapter_and_a_count(two_rounds):
    federation, settings, tmp_path = two_rounds  # the same run as the test above: two rounds
    names = secure_names(federation.model_dir, settings)
    messages = [json.loads(x) for x in (tmp_path / "record" / "messages.jsonl").read_text().splitlines()]
    train = [m for m in messages if m["type"] == "train"]
    acks = [m for m in messages if m["type"] != "train"]
    assert len(train) == 3 * settings.rounds and len({m["node"] for m in train}) == 3
    # the only other messages: each organization's empty acknowledgement of the final global adapter
    assert len(acks) == 3 and all(m["type"] == "query" and m["error"] is None and m["records"] == {} for m in acks)
    for m in train:
        assert m["error"] is None and set(m["records"]) == {"arrays", "metrics"}
        arrays, metrics = m["records"]["arrays"], m["records"]["metrics"]
        assert arrays["kind"] == "ArrayRecord" and metrics["kind"] == "MetricRecord"
        assert {k: v["shape"] for k, v in arrays["entries"].items()} == names
        assert all(v["dtype"] == "float32" for v in arrays["entries"].values())
        assert set(metrics["entries"]) == {"num-examples"} and metrics["entries"]["num-examples"] > 0
    # and nothing of any organization's raw code rode along, in any form the log keeps
    text = (tmp_path / "record" / "messages.jsonl").read_text()
    assert not any(s in text for org in ORGS for s in ("sk_live", "acme.com", "initech", "globex.com", "10.20.30.40"))


def test_a_dp_organization_spends_its_plan_once_across_rounds(two_rounds):
    """A SuperNode runs its ClientApp in a new process for every message, so the DP plan's progress
    must outlive the process: over the planned rounds the organization under DP spends its budget
    once — round 2 continues round 1's plan, the ε spent grows to the target and no further — and
    the privacy record lands beside its copy of the global adapter."""
    federation, settings, tmp_path = two_rounds
    node_log = federation.log(f"node-{DP_ORG}")
    spent = [float(x) for x in re.findall(r"DP ε spent ([0-9.e+-]+) of", node_log)]
    assert len(spent) == 2 and 0 < spent[0] < spent[1], node_log[-3000:]  # round 2 went on from round 1
    record = json.loads((tmp_path / f"{DP_ORG}-global.npz.privacy.json").read_text())
    assert record["rounds"] == settings.rounds == 2 and record["rounds_taken"] == 2
    assert record["steps_taken"] == record["steps"]  # the whole plan, once
    assert record["epsilon_spent"] == pytest.approx(spent[1], rel=1e-2)  # the log prints 3 digits
    assert record["epsilon_spent"] <= record["target_epsilon"] + 1e-9
    for org in ORGS[1:]:  # no DP, no record
        assert (tmp_path / f"{org}-global.npz").exists() and not (tmp_path / f"{org}-global.npz.privacy.json").exists()


def wait_for(federation, name: str, text: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while text not in federation.log(name):
        if time.monotonic() > deadline or federation.procs["run"].poll() is not None:
            raise AssertionError(f"{text!r} not in {name}.log:\n{federation.log(name)[-3000:]}")
        time.sleep(0.2)


def test_a_node_that_dies_mid_round_rejoins_and_one_on_another_base_model_is_refused(federation, tmp_path):
    """Four organizations. initech has much more code (its round takes seconds) and is killed while
    round 1 runs; the round completes without it, initech's SuperNode comes back before round 2
    and is in it; the server stays up. A fourth organization runs a different base model (8
    layers: its decoder LoRA has other names): its ClientApp refuses the global adapter, the
    server logs that node's error reply and leaves it out of both rounds. The global adapter keeps
    its shapes and is the pure aggregation of what arrived."""
    from conftest import write_org_code
    from tiny_models import build_tiny_model_dir

    other = tmp_path / "other-model"
    build_tiny_model_dir(other, num_layers=8)
    settings = fast_settings(tmp_path, federation.model_dir, round_timeout=45.0, min_nodes=4)
    big = write_org_code(tmp_path / "big", "initech", files=400)
    federation.start_superlink()
    federation.start_node("acme")
    federation.start_node("globex")
    federation.start_node("initech", data=big)
    federation.start_node(OTHER_BASE, data=federation.data["globex"], model_dir=other)
    run = federation.run(settings, wait=False)
    wait_for(federation, "run", "round 1: training on 4 organizations")
    federation.stop("node-initech")  # SIGKILL to its whole process group, mid-round
    federation.start_node("initech")  # rejoins at once (a new node id), with its usual code
    wait_for(federation, "run", "round 1: aggregated 2 organizations")
    run.wait(timeout=300)
    assert run.returncode == 0, federation.log("run")[-3000:]
    rounds = [json.loads(x) for x in (tmp_path / "record" / "rounds.jsonl").read_text().splitlines()]
    # round 1: the dead node never answered (the round closed at its timeout with the other two);
    # the node on another base model answered with an error, and was left out
    assert len(rounds[0]["accepted"]) == 2, rounds
    ((refused, reason),) = rounds[0]["rejected"].items()
    assert "error reply" in reason and "Node Unavailable" not in reason, rounds
    assert "left out" in federation.log("run")
    # round 2: the rejoined node took part; the refusing node again left out; the dead one, if
    # still listed, got Flower's error reply
    assert len(rounds[1]["accepted"]) == 3, rounds
    assert len(set(rounds[1]["accepted"]) - set(rounds[0]["accepted"])) == 1
    assert int(refused) not in rounds[1]["accepted"] and "error reply" in rounds[1]["rejected"][refused], rounds
    assert all("Node Unavailable" in why for node, why in rounds[1]["rejected"].items() if node != refused), rounds
    assert "round 2 failed" not in federation.log("run")
    start = load_arrays(tmp_path / "record" / "round-0" / "global.npz")[0]
    final, _ = load_arrays(tmp_path / "global.npz")
    assert {k: v.shape for k, v in final.items()} == {k: v.shape for k, v in start.items()}
    expected = replay(tmp_path / "record", 2, ServerOptConfig(settings.momentum, settings.server_lr))
    assert all(np.array_equal(final[k], expected.weights[k]) for k in final)
