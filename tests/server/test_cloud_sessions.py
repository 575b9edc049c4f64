"""Session lifecycle on the real service: KV budget with LRU eviction, idle expiry, tombstones
visible to the owner only, truncate/close, and the compute worker serializing everything."""

from __future__ import annotations

import time

import httpx
import torch

from cloud_helpers import C, auth, metric, open_session, step
from server.launch import local_cloud_thread
from umbra import wire

# one tiny-model session at the KV cache's minimum capacity (128 slots):
# 3 middle layers x (K+V) x 2 kv heads x 16 dims x 4 bytes x 128 slots
SESSION_BYTES = 3 * 2 * 2 * 16 * 4 * 128


def forward(http, token, sid, body):
    return http.post(f"/v1/sessions/{sid}/forward", content=body, headers=auth(token))


def test_lru_eviction_within_the_kv_budget(model_dir):
    budget = int(2.5 * SESSION_BYTES)
    settings = dict(kv_budget_bytes=budget, kv_client_quota_bytes=budget, torch_threads=1)
    with local_cloud_thread(model_dir, settings=settings) as cloud, \
            httpx.Client(base_url=cloud.base_url, timeout=30) as http:
        other = cloud.add_token("other")
        a, b, c = (open_session(http, cloud.token) for _ in range(3))
        for sid in (a, b):
            assert forward(http, cloud.token, sid, step(t=4)).status_code == 200
        assert forward(http, cloud.token, a, step(start_pos=4, start=4)).status_code == 200  # a is now the newest
        assert forward(http, cloud.token, c, step(t=4)).status_code == 200  # over budget: b (LRU) goes
        r = forward(http, cloud.token, b, step(start_pos=4, start=4))
        assert r.status_code == 410 and "evicted" in r.json()["detail"] and "re-prefill" in r.json()["detail"]
        assert forward(http, other, b, step()).status_code == 404  # the tombstone is the owner's only
        assert forward(http, cloud.token, a, step(start_pos=5, start=5)).status_code == 200
        assert forward(http, cloud.token, c, step(start_pos=4, start=4)).status_code == 200

        # a single session that needs more than the whole budget is refused, not thrashed
        big = open_session(http, cloud.token)
        r = forward(http, cloud.token, big, step(t=3 * 128))
        assert r.status_code == 413 and "more than this client's quota" in r.json()["detail"]

        text = http.get("/metrics", headers=auth(cloud.token)).text
        assert metric(text, "umbra_cloud_sessions_evicted_total") == 1
        assert metric(text, "umbra_cloud_sessions_active") == 3  # a, c and big (refused before growing: empty)
        assert 0 < metric(text, "umbra_cloud_kv_bytes") <= metric(text, "umbra_cloud_kv_budget_bytes")


def test_idle_sessions_expire(model_dir):
    settings = dict(session_idle_seconds=0.4, sweep_interval_seconds=0.1, torch_threads=1)
    with local_cloud_thread(model_dir, settings=settings) as cloud, \
            httpx.Client(base_url=cloud.base_url, timeout=30) as http:
        sid = open_session(http, cloud.token)
        assert forward(http, cloud.token, sid, step(t=2)).status_code == 200
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            text = http.get("/metrics", headers=auth(cloud.token)).text
            if metric(text, "umbra_cloud_sessions_expired_total") == 1:
                break
            time.sleep(0.1)
        assert metric(text, "umbra_cloud_sessions_active") == 0
        r = forward(http, cloud.token, sid, step(start_pos=2))
        assert r.status_code == 410 and "expired" in r.json()["detail"]


def test_truncate_continue_and_close(cloud):
    with httpx.Client(base_url=cloud.base_url, timeout=30) as http:
        sid = open_session(http, cloud.token)
        h = torch.randn(1, 6, C)
        pos = torch.arange(6)[None]
        full = wire.decode(forward(http, cloud.token, sid, wire.encode(wire.forward_frame(h, pos))).content).hidden
        r = http.post(f"/v1/sessions/{sid}/truncate", json={"length": 3}, headers=auth(cloud.token))
        assert r.status_code == 204
        body = wire.encode(wire.forward_frame(h[:, 3:], pos[:, 3:], start=3, tail=2))
        again = wire.decode(forward(http, cloud.token, sid, body).content).hidden
        assert again.shape == (1, 2, C)
        assert torch.allclose(again, full[:, 4:], atol=1e-5)
        assert http.delete(f"/v1/sessions/{sid}", headers=auth(cloud.token)).status_code == 204
        assert forward(http, cloud.token, sid, step()).status_code == 404


def test_a_trim_frame_truncates_and_forwards_in_one_trip(cloud):
    """FORWARD_TRIM over HTTP and over the stream: the session is cut to the frame's start first
    (the outputs equal a truncate then a forward); a start beyond the session is still 409."""
    from websockets.sync.client import connect

    with httpx.Client(base_url=cloud.base_url, timeout=30) as http:
        sid = open_session(http, cloud.token)
        h = torch.randn(1, 8, C)
        pos = torch.arange(8)[None]
        full = wire.decode(forward(http, cloud.token, sid, wire.encode(wire.forward_frame(h[:, :6], pos[:, :6]))).content)
        trimmed = wire.encode(wire.forward_frame(h[:, 3:5], pos[:, 3:5], start=3, trim=True))
        again = wire.decode(forward(http, cloud.token, sid, trimmed).content).hidden  # 6 held, cut to 3, +2
        assert torch.allclose(again, full.hidden[:, 3:5], atol=1e-5)
        url = cloud.base_url.replace("http", "ws", 1) + f"/v1/sessions/{sid}/stream"
        with connect(url, additional_headers=auth(cloud.token), max_size=None, open_timeout=10) as ws:
            ws.send(wire.encode(wire.forward_frame(h[:, 4:5], pos[:, 4:5], start=4, trim=True)))  # 5 held, cut to 4
            step_out = wire.decode(ws.recv(timeout=30))
            assert step_out.kind == wire.Kind.HIDDEN and torch.allclose(step_out.hidden, full.hidden[:, 4:5], atol=1e-5)
            ws.send(wire.encode(wire.forward_frame(h[:, 6:7], pos[:, 6:7], start=9, trim=True)))
            late = wire.decode(ws.recv(timeout=30))
            assert (late.kind, late.status) == (wire.Kind.ERROR, 409)
        assert forward(http, cloud.token, sid, wire.encode(wire.forward_frame(h[:, 5:6], pos[:, 5:6], start=5))).status_code == 200
        http.delete(f"/v1/sessions/{sid}", headers=auth(cloud.token))


def test_a_session_opens_with_its_first_frame(cloud):
    """POST /v1/sessions/forward: one request opens an inference session and runs its first frame
    (the outputs equal an open then a forward; the id in X-Umbra-Session-Id serves the stream
    and every later call); a frame it cannot run leaves no session behind."""
    from websockets.sync.client import connect

    def active(http) -> float:
        return metric(http.get("/metrics", headers=auth(cloud.token)).text, "umbra_cloud_sessions_active")

    with httpx.Client(base_url=cloud.base_url, timeout=30) as http:
        assert http.get("/v1/info", headers=auth(cloud.token)).json()["open_in_frame"] is True
        h = torch.randn(1, 7, C)
        pos = torch.arange(7)[None]
        sid = open_session(http, cloud.token)
        want = wire.decode(forward(http, cloud.token, sid, wire.encode(wire.forward_frame(h, pos))).content).hidden
        http.delete(f"/v1/sessions/{sid}", headers=auth(cloud.token))
        before = active(http)
        r = http.post("/v1/sessions/forward", content=wire.encode(wire.forward_frame(h[:, :6], pos[:, :6], start=0)),
                      headers=auth(cloud.token))
        assert r.status_code == 201 and active(http) == before + 1
        new = r.headers["X-Umbra-Session-Id"]
        assert torch.allclose(wire.decode(r.content).hidden, want[:, :6], atol=1e-5)
        url = cloud.base_url.replace("http", "ws", 1) + f"/v1/sessions/{new}/stream"
        with connect(url, additional_headers=auth(cloud.token), max_size=None, open_timeout=10) as ws:
            ws.send(wire.encode(wire.forward_frame(h[:, 6:], pos[:, 6:], start=6)))
            assert torch.allclose(wire.decode(ws.recv(timeout=30)).hidden, want[:, 6:], atol=1e-5)
        assert http.delete(f"/v1/sessions/{new}", headers=auth(cloud.token)).status_code == 204
        for bad, status in ((wire.forward_frame(h[:, :2], pos[:, :2], start=3), 409),  # a new session holds 0
                            (wire.forward_frame(h[:, :2], pos[:, :2], start=0, trim=True), 422),  # nothing to trim
                            (wire.forward_frame(torch.randn(1, 2, C + 1), pos[:, :2]), 422)):  # not this model's width
            r = http.post("/v1/sessions/forward", content=wire.encode(bad), headers=auth(cloud.token))
            assert r.status_code == status, r.text
            assert "X-Umbra-Session-Id" not in r.headers and active(http) == before
        assert http.post("/v1/sessions/forward", content=step(), headers={}).status_code == 401
