"""`umbra complete --client-only`: the client's blocks alone. A real cloud configured through the
environment receives not one request (its own counters say so), a configured cloud that does not
exist is never tried, and the completion is the engine's client-only one (umbra/engine/client_only.py)."""

from __future__ import annotations

import asyncio
import json
import re
import socket

import httpx
import pytest
from cli_helpers import COMPLETE_GEN as GEN
from cli_helpers import COMPLETE_SOURCE as SOURCE
from cli_helpers import umbra_in_process

from umbra.engine import ClientModel, EngineConfig, StopConfig
from umbra.engine.client_only import client_only_engine



def _requests(cloud) -> dict[str, float]:
    """The cloud's request-level counters (GET /metrics: requests answered, sessions opened, bytes in)."""
    text = httpx.get(f"{cloud.base_url}/metrics", headers={"Authorization": f"Bearer {cloud.token}"}).text
    wanted = ("umbra_cloud_request_seconds_count", "umbra_cloud_sessions_opened_total", "umbra_cloud_bytes_in_total",
              "umbra_cloud_tokens_processed_total")
    out = {}
    for line in text.splitlines():
        m = re.match(r"(\w+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if m and m.group(1) in wanted:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def test_client_only_sends_nothing_to_a_configured_cloud(model_dir, source, cloud):
    pos = f"{source}:2:13"
    env = {"UMBRA_CLOUD_URL": cloud.base_url, "UMBRA_CLOUD_TOKEN": cloud.token}
    split = umbra_in_process("complete", pos, "--model", model_dir, *GEN, "--json", env=env)
    before = _requests(cloud)
    alone = umbra_in_process("complete", pos, "--model", model_dir, *GEN, "--client-only", "--json", env=env)
    after = _requests(cloud)
    assert split.returncode == 0 and alone.returncode == 0, (split.stderr, alone.stderr)
    assert json.loads(split.stdout)["round_trips"] > 0 and json.loads(split.stdout)["mode"] == "split"
    assert before["umbra_cloud_sessions_opened_total"] >= 1  # the counters do count a completion
    assert {k: v for k, v in after.items() if "request_seconds" not in k} == \
        {k: v for k, v in before.items() if "request_seconds" not in k}
    # the only request between the two reads is the first read itself (GET /metrics)
    assert sum(v for k, v in after.items() if "request_seconds" in k) - \
        sum(v for k, v in before.items() if "request_seconds" in k) <= 1
    out = json.loads(alone.stdout)
    assert out["mode"] == "client-only" and out["round_trips"] == 0 and out["speculation"] is None
    assert "umbra: privacy: nothing is sent (--client-only" in alone.stderr
    model = ClientModel.load(model_dir)
    cfg = EngineConfig(stop=StopConfig(max_tokens=6, multiline=True))
    expected = asyncio.run(client_only_engine(model, cfg).complete(SOURCE[:27], SOURCE[27:], language="python"))
    assert out["completion"] == expected.text and out["generated_tokens"] == expected.generated_tokens > 0


def test_client_only_never_tries_the_cloud(model_dir, source):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    env = {"UMBRA_CLOUD_URL": f"http://127.0.0.1:{port}", "UMBRA_CLOUD_TOKEN": None}
    tried = umbra_in_process("complete", f"{source}:2:13", "--model", model_dir, *GEN, env=env)
    alone = umbra_in_process("complete", f"{source}:2:13", "--model", model_dir, *GEN, "--client-only", env=env)
    assert tried.returncode == 2  # the split path does look for the cloud (no token for it)
    assert alone.returncode == 0 and alone.stdout.strip(), alone.stderr


@pytest.mark.parametrize("extra, message", [(["--local"], "--local and --client-only"),
                                            (["--cloud", "http://x"], "--client-only runs without a cloud")])
def test_client_only_usage_errors(model_dir, source, extra, message):
    r = umbra_in_process("complete", f"{source}:1:1", "--model", model_dir, "--client-only", *extra,
                         env={"UMBRA_CLOUD_URL": None, "UMBRA_CLOUD_TOKEN": None})
    assert r.returncode == 2 and message in r.stderr and r.stderr.count("\n") == 1, r.stderr
