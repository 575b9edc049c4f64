"""create_app: settings through pydantic-settings (UMBRA_CLOUD_*) and a FastAPI dependency, the
lifespan loading exactly the middle blocks, service info and Prometheus metrics."""

from __future__ import annotations

import re

import httpx
import pytest

from cloud_helpers import auth, metric, open_session, step
from server.settings import CloudSettings
from umbra.errors import ConfigError
from umbra.model.loader import Checkpoint

MIDDLE = re.compile(r"^model\.layers\.(\d+)\.")


def test_settings_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("UMBRA_CLOUD_MODEL_DIR", str(tmp_path))
    monkeypatch.setenv("UMBRA_CLOUD_KV_BUDGET_BYTES", "12345")
    monkeypatch.setenv("UMBRA_CLOUD_DEBUG_ROUTES", "true")
    s = CloudSettings().check()
    assert (s.model_dir, s.kv_budget_bytes, s.debug_routes) == (tmp_path, 12345, True)
    with pytest.raises(ConfigError, match="both a certificate and a key"):
        CloudSettings(tls_cert=tmp_path / "c.pem").check()
    with pytest.raises(ConfigError, match="encoder_blocks and decoder_blocks"):
        CloudSettings(encoder_blocks=1).plan_args()


def test_lifespan_loads_exactly_the_middle_blocks(cloud, model_dir):
    with httpx.Client(base_url=cloud.base_url) as http:
        loaded = http.get("/v1/debug/loaded", headers=auth(cloud.token)).json()
    first, last = loaded["layers"]
    assert (first, last) == (1, 4)  # SplitPlan.default(6): E=1, D=2
    every = Checkpoint(model_dir).files
    expected = {k for k in every if MIDDLE.match(k) and first <= int(MIDDLE.match(k)[1]) < last}
    assert set(loaded["read_keys"]) == expected
    assert len(loaded["read_keys"]) == len(expected)  # each read once
    assert {f"model.layers.{first + int(k.split('.')[2])}." + k.split(".", 3)[3]
            for k in loaded["state_dict"]} == expected


def test_info_and_metrics(cloud):
    with httpx.Client(base_url=cloud.base_url, timeout=30) as http:
        info = http.get("/v1/info", headers=auth(cloud.token)).json()
        assert info["hidden_size"] == 64 and info["protocol"] == 1 and info["max_frame_bytes"] == 64 * 1024
        before = http.get("/metrics", headers=auth(cloud.token)).text
        sid = open_session(http, cloud.token)
        body = step(t=5)
        r = http.post(f"/v1/sessions/{sid}/forward", content=body, headers=auth(cloud.token))
        r404 = http.post("/v1/sessions/nope/forward", content=body, headers=auth(cloud.token))
        m = http.get("/metrics", headers=auth(cloud.token))
    assert r404.status_code == 404
    assert m.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = m.text
    delta = lambda name, **kw: metric(text, name, **kw) - metric(before, name, **kw)  # noqa: E731
    assert delta("umbra_cloud_tokens_processed_total") == 5
    assert delta("umbra_cloud_sessions_opened_total") == 1
    assert delta("umbra_cloud_bytes_in_total", transport="http") == 2 * len(body)
    assert delta("umbra_cloud_bytes_out_total", transport="http") == len(r.content)
    assert delta("umbra_cloud_errors_total", status="404") == 1
    assert metric(text, "umbra_cloud_request_seconds_count", route="POST /v1/sessions/{sid}/forward") >= 2
    assert 'umbra_cloud_request_seconds_bucket{le="+Inf",route="POST /v1/sessions/{sid}/forward"}' in text
    for name in ("umbra_cloud_sessions_active", "umbra_cloud_kv_bytes", "umbra_cloud_kv_budget_bytes",
                 "umbra_cloud_sessions_evicted_total", "umbra_cloud_sessions_expired_total"):
        assert f"# TYPE {name} " in text
    assert cloud.token not in text and sid not in text
