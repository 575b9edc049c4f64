"""A real federation on loopback: a Flower SuperLink and one SuperNode per organization, each a
subprocess of .venv-federation's Flower (own process group, own FLWR_HOME, free ports), every one
ended by the fixture. Each organization has its own tiny code directory, secrets included."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tiny_models import CODE_SNIPPETS
from umbra.federation.aggregate import ServerOptConfig, ServerState, aggregate_round
from umbra.federation.deploy import (RunSettings, flower_env, run_cmd, superlink_cmd, supernode_cmd, wait_port,
                                     write_app, write_flower_home)
from umbra.federation.record import load_arrays

ORGS = ("acme", "globex", "initech")
SECRETS = {  # what the scrubber must take out of each organization's view
    "acme": ('API_KEY = "sk_live_51Hc8Qz2eZvKYlo2CkZ8uT9mXq3"\n', "ops@acme.com", "db01.corp.acme.com"),
    "globex": ('aws_secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"\n', "it@globex.com",
               "10.20.30.40"),
    "initech": ('password = "Tr0ub4dor&3-initech-prod"\n', "bill.lumbergh@initech.com", "build.initech.internal"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_org_code(root: Path, org: str, files: int = 6, seed: int = 0) -> Path:
    rng = random.Random(f"{org}-{seed}")
    key, mail, host = SECRETS[org]
    d = root / org
    d.mkdir(parents=True)
    for i in range(files):
        body = "".join(rng.sample(CODE_SNIPPETS, 2))
        (d / f"{org}_{i}.py").write_text(f"# maintainer: {mail}\n{key}HOST = \"{host}\"\n{body}", encoding="utf-8")
    return d


class Federation:
    """The processes of one federation; `close()` ends every one of them (process groups)."""

    def __init__(self, root: Path, model_dir: Path):
        self.root, self.model_dir = root, model_dir
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.data = {org: write_org_code(root / "orgs", org) for org in ORGS}

    def _spawn(self, name: str, cmd: list[str], home: Path) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "ab")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=flower_env(home),
                                start_new_session=True, cwd=self.root)
        log.close()
        self.procs[name] = proc
        return proc

    def start_superlink(self) -> None:
        home = write_flower_home(self.root / "home-superlink", self.address, insecure=True)
        proc = self._spawn("superlink", superlink_cmd(self.port, insecure=True), home)
        wait_port("127.0.0.1", self.port, 60, alive=lambda: proc.poll() is None)

    def start_node(self, org: str, data: Path | None = None, model_dir: Path | None = None,
                   **extra: str | int | float) -> None:
        config = {"data": str(data or self.data[org]), "model": str(model_dir or self.model_dir), "threads": 1,
                  "internal-domains": f"{org}.com,{org}.internal", "global-out": str(self.root / f"{org}-global.npz"),
                  **{k.replace("_", "-"): v for k, v in extra.items()}}
        cmd = supernode_cmd(self.address, free_port(), config, insecure=True)
        self._spawn(f"node-{org}", cmd, self.root / f"home-{org}")

    def stop(self, name: str, sig=signal.SIGKILL) -> None:
        proc = self.procs.pop(name)
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
        proc.wait(timeout=30)

    def run(self, settings: RunSettings, timeout: float = 420, wait: bool = True):
        app = write_app(self.root / "app", settings)
        home = write_flower_home(self.root / "home-run", self.address, insecure=True)
        log = open(self.root / "run.log", "ab")
        proc = subprocess.Popen(run_cmd(app), stdout=log, stderr=subprocess.STDOUT, env=flower_env(home),
                                start_new_session=True, cwd=self.root)
        log.close()
        self.procs["run"] = proc
        if wait:
            proc.wait(timeout=timeout)
        return proc

    def log(self, name: str) -> str:
        p = self.root / f"{name}.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def close(self) -> None:
        for name in list(self.procs):
            proc = self.procs[name]
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for name, proc in list(self.procs.items()):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:  # the whole group: SuperExec and app processes Flower started below it
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
        self.procs.clear()


def replay(record, rounds: int, opt: ServerOptConfig) -> ServerState:
    """The run's aggregation recomputed from the recorded updates by the pure functions."""
    state = ServerState.initial(load_arrays(record / "round-0" / "global.npz")[0])
    lines = [json.loads(x) for x in (record / "rounds.jsonl").read_text().splitlines()]
    for t in range(1, rounds + 1):
        r = next(x for x in lines if x["round"] == t)
        ups = [load_arrays(record / f"round-{t}" / f"{n}.npz") for n in r["accepted"]]
        state = aggregate_round(state, ups, opt)
    return state


def fast_settings(tmp: Path, model_dir: Path, **overrides) -> RunSettings:
    """Tiny and quick: rank 2, one pass of 64-token blocks per round, two rounds. The round timeout
    only bounds a failing run: round 1 includes every node's cold start (torch, the model, a bundle's
    keyring unlock), which on a loaded 2-core machine took over 120 s, and a round that times out is
    an empty round, not a slower one."""
    fields = dict(model=str(model_dir), rounds=2, min_nodes=3, node_wait=120.0, round_timeout=600.0,
                  momentum=0.5, server_lr=0.5, rank=2, lr=3e-3, epochs=1, block_len=64, batch_size=4,
                  fim_rate=0.0, seed=0, record_dir=str(tmp / "record"), out=str(tmp / "global.npz"))
    return RunSettings(**{**fields, **overrides})


@pytest.fixture
def federation(tmp_path, fim_qwen2_dir):
    fed = Federation(tmp_path, fim_qwen2_dir)
    try:
        yield fed
    finally:
        fed.close()
