"""Document-level DP through a real deployment: a SuperNode runs its ClientApp in a new process for
every message, so the DP plan's progress must outlive the process. Over the planned rounds the
organization under DP spends its budget once — round 2 continues round 1's plan, the ε spent grows
to the target and no further — and the privacy record lands beside its copy of the global adapter."""

from __future__ import annotations

import json
import re

import pytest

from conftest import ORGS, fast_settings


def test_a_dp_organization_spends_its_plan_once_across_rounds(federation, tmp_path):
    settings = fast_settings(tmp_path, federation.model_dir, rounds=2)
    federation.start_superlink()
    dp_org = ORGS[0]
    federation.start_node(dp_org, dp_epsilon=8.0, dp_delta=1e-3, dp_clip=1.0, dp_batch=2)
    for org in ORGS[1:]:
        federation.start_node(org)
    run = federation.run(settings)
    assert run.returncode == 0, federation.log("run")[-3000:]

    node_log = federation.log(f"node-{dp_org}")
    spent = [float(x) for x in re.findall(r"DP ε spent ([0-9.e+-]+) of", node_log)]
    assert len(spent) == 2 and 0 < spent[0] < spent[1], node_log[-3000:]  # round 2 went on from round 1
    record = json.loads((tmp_path / f"{dp_org}-global.npz.privacy.json").read_text())
    assert record["rounds"] == 2 and record["rounds_taken"] == 2
    assert record["steps_taken"] == record["steps"]  # the whole plan, once
    assert record["epsilon_spent"] == pytest.approx(spent[1], rel=1e-2)  # the log prints 3 digits
    assert record["epsilon_spent"] <= record["target_epsilon"] + 1e-9
    for org in ORGS[1:]:  # no DP, no record
        assert (tmp_path / f"{org}-global.npz").exists() and not (tmp_path / f"{org}-global.npz.privacy.json").exists()
