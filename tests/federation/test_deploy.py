"""deploy.py's files and command lines, and `umbra federation serve` + three `umbra federation join`
as real processes on loopback (one round): the CLI a person runs, end to end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib

import numpy as np
import pytest

from conftest import ORGS, free_port, write_org_code
from umbra.errors import ConfigError
from umbra.federation.deploy import (RunSettings, node_config_arg, superlink_address, superlink_cmd, supernode_cmd,
                                     write_app, write_flower_home)
from umbra.federation.record import load_arrays

CLI = [sys.executable, "-m", "umbra.cli.main", "federation"]


def test_the_app_and_flower_config_are_what_flower_reads(tmp_path):
    app = write_app(tmp_path / "app", RunSettings(model="/m", rounds=2, record_dir="/r"))
    doc = tomllib.loads((app / "pyproject.toml").read_text())
    assert doc["tool"]["flwr"]["app"]["components"] == {"serverapp": "umbra.federation.server_app:app",
                                                        "clientapp": "umbra.federation.client_app:app"}
    assert doc["tool"]["flwr"]["app"]["config"]["rounds"] == 2 and doc["tool"]["flwr"]["app"]["config"]["min-nodes"] == 3
    home = write_flower_home(tmp_path / "h", "link:9092", root_certificates=tmp_path / "ca.pem")
    conn = tomllib.loads((home / "config.toml").read_text())["superlink"]
    assert conn["default"] == "umbra" and conn["umbra"]["address"] == "link:9092"
    assert conn["umbra"]["root-certificates"].endswith("ca.pem") and "insecure" not in conn["umbra"]
    with pytest.raises(ConfigError):
        write_flower_home(tmp_path / "h2", "link:9092")  # neither a CA nor insecure
    with pytest.raises(ConfigError):
        write_app(tmp_path / "bad", RunSettings(model='a"b'))


def test_command_lines_carry_tls_and_node_auth():
    cmd = superlink_cmd(9092, certfile="c.pem", keyfile="k.pem", ca_certfile="ca.pem", supernode_auth=True)
    assert "--insecure" not in cmd and {"--ssl-certfile", "--ssl-keyfile", "--ssl-ca-certfile",
                                        "--enable-supernode-auth"} <= set(cmd)
    assert "--disable-runtime-dependency-installation" in cmd
    with pytest.raises(ConfigError, match="TLS"):
        superlink_cmd(9092, certfile="c.pem")
    node = supernode_cmd("link:9092", 9101, {"data": "/d", "threads": 1}, root_certificates="ca.pem",
                         auth_private_key="n.key", auth_public_key="n.pub")
    assert node[node.index("--root-certificates") + 1] == "ca.pem" and "--auth-supernode-private-key" in node
    assert node[node.index("--node-config") + 1] == node_config_arg({"data": "/d", "threads": 1}) == 'data="/d" threads=1'
    with pytest.raises(ConfigError):
        supernode_cmd("link:9092", 9101, {}, insecure=True, auth_private_key="n.key")
    assert superlink_address("https://link.acme.com:9092/") == "link.acme.com:9092"


@pytest.mark.slow  # the one real run of `umbra federation serve` and `join`, each a process
def test_serve_and_three_joins_from_the_command_line(tmp_path, fim_qwen2_dir):
    port, procs = free_port(), []
    out, record = tmp_path / "global.npz", tmp_path / "record"
    logs = {}

    def spawn(name, args):
        logs[name] = tmp_path / f"{name}.log"
        with open(logs[name], "wb") as log:
            procs.append(subprocess.Popen(CLI + args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        return procs[-1]

    # the first organization keeps DP's default ε (with a batch and δ its six files can meet), the
    # others opt out of DP
    dp = {ORGS[0]: ["--dp-batch", "2", "--dp-delta", "1e-3"], ORGS[1]: ["--dp-epsilon", "0"],
          ORGS[2]: ["--dp-epsilon", "0"]}
    try:  # the organizations join first: their SuperNodes wait for the SuperLink
        for org in ORGS:
            code = write_org_code(tmp_path / "orgs", org)
            spawn(f"join-{org}", ["join", f"127.0.0.1:{port}", "--data", str(code), "--model", str(fim_qwen2_dir),
                                  "--internal-domain", f"{org}.com", "--port", str(free_port()), "--threads", "1",
                                  "--home", str(tmp_path / f"home-{org}"), "--insecure",
                                  "--global-out", str(tmp_path / f"{org}-global.npz"), *dp[org]])
        time.sleep(2)
        serve = spawn("serve", ["serve", "--model", str(fim_qwen2_dir), "--port", str(port), "--insecure",
                                "--rounds", "1", "--min-nodes", "3", "--rank", "2", "--epochs", "1",
                                "--block-len", "64", "--batch-size", "4", "--fim-rate", "0", "--out", str(out),
                                "--record", str(record), "--workdir", str(tmp_path / "work")])
        assert serve.wait(timeout=300) == 0, logs["serve"].read_text()[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    rounds = [json.loads(x) for x in (record / "rounds.jsonl").read_text().splitlines()]
    assert len(rounds) == 1 and len(rounds[0]["accepted"]) == 3
    final, _ = load_arrays(out)
    assert final and all(np.isfinite(a).all() for a in final.values())
    assert "global secure adapter written" in logs["serve"].read_text()
    for org in ORGS:  # each organization keeps the final global adapter for its fusion
        kept, _ = load_arrays(tmp_path / f"{org}-global.npz")
        assert all(np.array_equal(kept[k], final[k]) for k in final)
        told = "no DP (--dp-epsilon 0)" in logs[f"join-{org}"].read_text()  # trained without DP: told so
        assert told == (org != ORGS[0])
        assert (tmp_path / f"{org}-global.npz.privacy.json").exists() == (org == ORGS[0])
    spent = json.loads((tmp_path / f"{ORGS[0]}-global.npz.privacy.json").read_text())
    assert spent["target_epsilon"] == 8.0 and spent["rounds_taken"] == 1  # the default budget, all of it


def test_join_refuses_code_too_small_for_the_default_dp(tmp_path, fim_qwen2_dir):
    """DP is on by default (ε = 8, an expected 8 files a step): three files cannot meet it, and
    join says so, with the ways out, before it starts a SuperNode."""
    code = tmp_path / "code"
    code.mkdir()
    for i in range(3):
        (code / f"m{i}.py").write_text(f"x = {i}\n")
    done = subprocess.run(CLI + ["join", "127.0.0.1:9", "--data", str(code), "--model", str(fim_qwen2_dir),
                                 "--insecure", "--home", str(tmp_path / "home")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "has 3 files of code" in done.stderr and "--dp-batch" in done.stderr and "--dp-epsilon 0" in done.stderr
    assert "no DP" not in done.stderr and not (tmp_path / "home").exists()  # refused, nothing started
