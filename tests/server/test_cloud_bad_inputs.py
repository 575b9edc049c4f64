"""Every client mistake gets a 4xx (or an error frame / close code) with a clear message; the
service never crashes and never answers a client mistake with a 5xx."""

from __future__ import annotations

import math
import struct

import httpx
import pytest
import torch
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from cloud_helpers import C, auth, metric, open_session, raw_frame, raw_tensor, step
from umbra import wire


@pytest.fixture(scope="module")
def http(cloud):
    with httpx.Client(base_url=cloud.base_url, timeout=30) as client:
        yield client


@pytest.fixture
def sid(http, cloud):
    sid = open_session(http, cloud.token)
    yield sid
    http.delete(f"/v1/sessions/{sid}", headers=auth(cloud.token))


def post(http, cloud, sid, body: bytes, what: str = "forward", token: str | None = None):
    return http.post(f"/v1/sessions/{sid}/{what}", content=body, headers=auth(token or cloud.token))


def expect(r: httpx.Response, status: int, fragment: str) -> None:
    assert r.status_code == status, (r.status_code, r.text)
    assert fragment in r.json()["detail"], r.json()


def hidden_with(value: float) -> bytes:
    h = torch.randn(1, 2, C)
    h[0, 1, 3] = value
    return wire.encode(wire.forward_frame(h, torch.arange(2)[None]))


def test_http_bad_frames(http, cloud, sid):
    pos = raw_tensor(4, (1, 1), struct.pack("<q", 0))
    cases = [
        (step(c=32), 422, "hidden states must be [B,T,64]"),
        (hidden_with(math.nan), 422, "NaN or Inf"),
        (hidden_with(math.inf), 422, "NaN or Inf"),
        (step()[:-9], 400, "truncated frame"),
        (b"", 400, "truncated frame"),
        (b"GET / HTTP/1.1\r\n\r\n" * 3, 400, "bad magic"),
        (raw_frame(1, [raw_tensor(1, (1, 1, C), bytes(4 * C)), pos], version=7), 400,
         "unsupported wire protocol version 7"),
        (raw_frame(1, [raw_tensor(4, (1, 1, C), bytes(8 * C)), pos]), 400,
         "hidden states must be float32, float16 or bfloat16"),
        (raw_frame(1, [raw_tensor(1, (1, 1, C), bytes(4 * C)), raw_tensor(1, (1, 1), bytes(4))]), 400,
         "positions must be int64"),
        (raw_frame(1, [raw_tensor(9, (1, 1, C), bytes(4 * C)), pos]), 400, "unknown dtype code 9"),
        (raw_frame(9, []), 400, "unknown frame kind 9"),
        (wire.encode(wire.backward_frame(torch.zeros(1, 1, C))), 400, "unexpected BACKWARD frame"),
        (step() + b"\0\0", 400, "trailing bytes"),
        (step(t=1, start_pos=64), 422, "positions must lie in [0, 64)"),
        (wire.encode(wire.forward_frame(torch.zeros(1, 65, C), torch.zeros(1, 65, dtype=torch.int64))), 422,
         "exceed the maximum sequence length 64"),
        (wire.encode(wire.forward_frame(torch.zeros(1, 2, C), torch.arange(2)[None],
                                        torch.ones(1, 3, dtype=torch.bool))), 422, "key_padding must be [1,2]"),
        (step(start=5), 409, "session holds 0 positions but the step expects 5"),
        (bytes(70 * 1024), 413, "exceeds the limit of 65536 bytes"),
    ]
    for body, status, fragment in cases:
        expect(post(http, cloud, sid, body), status, fragment)
    # the session is untouched by all of that and still works
    r = post(http, cloud, sid, step(t=3, start=0))
    assert r.status_code == 200 and wire.decode(r.content).hidden.shape == (1, 3, C)
    expect(post(http, cloud, sid, step(t=1, start_pos=3, b=2)), 422, "batch size changed")


def test_http_session_and_request_mistakes(http, cloud, sid):
    expect(post(http, cloud, "no-such-session", step()), 404, "unknown session")
    expect(http.post(f"/v1/sessions/{sid}/truncate", json={"length": 5}, headers=auth(cloud.token)),
           422, "cannot truncate a cache of 0 slots to 5")
    expect(http.post(f"/v1/sessions/{sid}/truncate", json={"length": -1}, headers=auth(cloud.token)),
           422, "length")
    expect(http.post(f"/v1/sessions/{sid}/truncate", content=b"{nope", headers=auth(cloud.token)), 422, "")
    expect(post(http, cloud, sid, wire.encode(wire.backward_frame(torch.zeros(1, 1, C))), "backward"),
           422, "backward needs a training session")
    training = open_session(http, cloud.token, training=True)
    expect(post(http, cloud, training, wire.encode(wire.backward_frame(torch.zeros(1, 1, C))), "backward"),
           422, "backward needs a training session with a forward before it")
    expect(http.post(f"/v1/sessions/{training}/truncate", json={"length": 0}, headers=auth(cloud.token)),
           422, "inference sessions only")
    http.delete(f"/v1/sessions/{training}", headers=auth(cloud.token))
    expect(http.delete(f"/v1/sessions/{training}", headers=auth(cloud.token)), 404, "unknown session")


def test_auth_and_ownership(http, cloud, sid):
    other = cloud.add_token("other")
    expect(http.post(f"/v1/sessions/{sid}/forward", content=step()), 401, "missing bearer token")
    for bad in ("Bearer nope", f"Bearer {cloud.token[:-1]}x", f"Basic {cloud.token}", f"Bearer {cloud.token}extra"):
        r = http.post(f"/v1/sessions/{sid}/forward", content=step(), headers={"Authorization": bad})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", r.text
    for path in ("/v1/sessions", "/v1/info", "/metrics", "/v1/debug/loaded"):
        assert http.request("POST" if path == "/v1/sessions" else "GET", path).status_code == 401
    assert http.get("/healthz").status_code == 200  # the one open route
    # another client's session is indistinguishable from an unknown one
    expect(post(http, cloud, sid, step(), token=other), 404, "unknown session")
    expect(http.post(f"/v1/sessions/{sid}/truncate", json={"length": 0}, headers=auth(other)), 404, "unknown session")
    expect(http.delete(f"/v1/sessions/{sid}", headers=auth(other)), 404, "unknown session")
    assert post(http, cloud, sid, step()).status_code == 200  # still the owner's


def test_too_many_sessions(http, cloud):
    token = cloud.add_token("greedy")
    sids = [open_session(http, token) for _ in range(4)]
    expect(http.post("/v1/sessions", json={}, headers=auth(token)), 429, "limit 4")
    assert open_session(http, cloud.token)  # other clients are not affected
    http.delete(f"/v1/sessions/{sids[0]}", headers=auth(token))
    assert open_session(http, token)


def _ws(cloud, sid, token=None):
    url = cloud.base_url.replace("http", "ws", 1) + f"/v1/sessions/{sid}/stream"
    headers = auth(token) if token else {}
    return connect(url, additional_headers=headers, max_size=None, open_timeout=10)


def _reply(ws, data) -> wire.Frame:
    ws.send(data)
    return wire.decode(ws.recv(timeout=30))


def test_stream_handshake_rejections(http, cloud, sid):
    other = cloud.add_token("other2")
    training = open_session(http, cloud.token, training=True)
    for s, token, status in ((sid, None, 401), (sid, "umbra_0000000000000000_" + "x" * 43, 401),
                             (sid, other, 404), ("no-such-session", cloud.token, 404), (training, cloud.token, 422)):
        with pytest.raises(InvalidStatus) as info:
            _ws(cloud, s, token)
        assert info.value.response.status_code == status
        assert b"detail" in info.value.response.body
    http.delete(f"/v1/sessions/{training}", headers=auth(cloud.token))


def test_stream_bad_messages_get_error_frames_and_the_stream_survives(http, cloud, sid):
    assert post(http, cloud, sid, step(t=4)).status_code == 200
    with _ws(cloud, sid, cloud.token) as ws:
        ws.send("hello")
        f = wire.decode(ws.recv(timeout=30))
        assert (f.kind, f.status) == (wire.Kind.ERROR, 400) and "binary FORWARD frames only" in f.message
        for body, status, fragment in [
            (hidden_with(math.nan), 422, "NaN or Inf"),
            (step()[:-1], 400, "truncated frame"),
            (raw_frame(1, [], version=2), 400, "version 2"),
            (step(c=8), 422, "hidden states must be [B,T,64]"),
            (step(start=0), 409, "session holds 4 positions"),
            (bytes(65 * 1024), 413, "exceeds the limit"),
        ]:
            f = _reply(ws, body)
            assert (f.kind, f.status) == (wire.Kind.ERROR, status) and fragment in f.message, f
        f = _reply(ws, step(start_pos=4, start=4))
        assert f.kind == wire.Kind.HIDDEN and f.hidden.shape == (1, 1, C)
        # a message beyond the transport limit closes the stream with 1009 (message too big)
        ws.send(bytes(80 * 1024))
        with pytest.raises(ConnectionClosed) as info:
            ws.recv(timeout=30)
        assert info.value.rcvd.code == 1009


def test_stream_session_closed_underneath(http, cloud, sid):
    with _ws(cloud, sid, cloud.token) as ws:
        assert _reply(ws, step(t=2)).kind == wire.Kind.HIDDEN
        http.delete(f"/v1/sessions/{sid}", headers=auth(cloud.token))
        f = _reply(ws, step(start_pos=2))
        assert (f.kind, f.status) == (wire.Kind.ERROR, 404)
        with pytest.raises(ConnectionClosed) as info:
            ws.recv(timeout=30)
        assert info.value.rcvd.code == 4404


def test_service_healthy_and_no_5xx_after_all_that(http, cloud):
    assert http.get("/healthz").json() == {"status": "ok", "protocol": wire.VERSION}
    text = http.get("/metrics", headers=auth(cloud.token)).text
    assert metric(text, "umbra_cloud_errors_total", status="400") > 0
    assert "status=\"5" not in text
