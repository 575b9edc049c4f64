"""A client that leaves the decode stream (server/routes/stream.py) the way broken clients do —
the socket dropped mid-stream, half-way through a speculative verify frame (one multi-position
FORWARD_TRIM message) or while its reply is computed, or cut while its token is checked — is a
counted client abort (umbra_cloud_client_aborts_total), one log line, never a 5xx or a
traceback; a client that closes properly, or whose stream the service closes (a revoked
token, an idle stream), is no abort. Against the real service in its own
process (uvicorn on a free loopback port), over real sockets."""

from __future__ import annotations

import re
import socket
import time

import httpx
import pytest
import torch

from cloud_helpers import C, auth, open_session, step
from raw_websocket import RawWebSocket, upgrade_request
from server.auth import TokenStore
from server.launch import local_cloud_sync
from umbra import wire

WS = "WS /v1/sessions/{sid}/stream"


@pytest.fixture(scope="module")
def cloud(model_dir):
    settings = dict(torch_threads=1, max_sessions_per_client=64, sweep_interval_seconds=0.5, ws_idle_seconds=2.0)
    with local_cloud_sync(model_dir, settings=settings) as c:
        yield c


@pytest.fixture
def http(cloud):
    with httpx.Client(base_url=cloud.base_url, timeout=30) as h:
        yield h


@pytest.fixture(autouse=True)
def clean_log(cloud):
    """Fails the test when the service answered a 5xx or logged a traceback while it ran."""
    start = cloud.log_path.stat().st_size
    yield
    with httpx.Client(base_url=cloud.base_url, timeout=30) as h:
        text = h.get("/metrics", headers=auth(cloud.token)).text
    assert not re.search(r'umbra_cloud_errors_total\{status="5', text), text
    log = cloud.log_path.read_text(errors="replace")[start:]
    assert "Traceback" not in log and "Exception in ASGI" not in log, log[-3000:]


def aborts(http: httpx.Client, token: str, route: str) -> float:
    text = http.get("/metrics", headers=auth(token)).text
    m = re.search(r'umbra_cloud_client_aborts_total\{reason="disconnect",route="' + re.escape(route) + r'"\} (\S+)', text)
    return float(m.group(1)) if m else 0.0


def settled(http: httpx.Client, token: str, route: str, expected: float, wait: float = 60.0) -> float:
    """The abort count of `route` once it reaches `expected` (or `wait` s pass: the server is late)."""
    deadline = time.monotonic() + wait
    while (n := aborts(http, token, route)) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # an extra abort (counted twice) would land by now
    return aborts(http, token, route)


def stream(cloud, sid: str) -> RawWebSocket:
    ws = RawWebSocket(cloud.base_url, f"/v1/sessions/{sid}/stream", cloud.token)
    assert ws.status == 101, ws.status
    return ws


def hidden_reply(ws: RawWebSocket) -> torch.Tensor:
    opcode, payload = ws.recv()
    assert opcode == 2, opcode
    return wire.decode(payload, expect=(wire.Kind.HIDDEN,)).hidden


def verify_frame(start: int, k: int) -> bytes:
    """A speculative verify: the session cut back to `start`, then k + 1 positions in one forward."""
    positions = torch.arange(start, start + k + 1).unsqueeze(0)
    return wire.encode(wire.forward_frame(torch.randn(1, k + 1, C), positions, start=start, trim=True))


def test_a_stream_dropped_mid_stream_is_a_client_abort_and_a_close_is_not(cloud, http):
    before = aborts(http, cloud.token, WS)
    sid = open_session(http, cloud.token)
    ws = stream(cloud, sid)  # a proper close: no abort
    ws.send(step(t=4))
    hidden_reply(ws)
    ws.close()
    ws = stream(cloud, sid)  # dropped between two steps
    ws.send(step(t=1, start_pos=4))
    hidden_reply(ws)
    ws.drop()
    ws = stream(cloud, sid)  # dropped with a step in flight
    ws.send(step(t=1, start_pos=5))
    ws.drop()
    assert settled(http, cloud.token, WS, before + 2) == before + 2  # today: 0 aborts
    assert "client abort: WS /v1/sessions/{sid}/stream (disconnect)" in cloud.log_path.read_text()
    ws = stream(cloud, open_session(http, cloud.token))  # the service streams on
    ws.send(step(t=2))
    assert hidden_reply(ws).shape == (1, 2, C)
    ws.close()


def test_a_client_gone_mid_verify_is_a_client_abort(cloud, http):
    before = aborts(http, cloud.token, WS)
    sid = open_session(http, cloud.token)
    ws = stream(cloud, sid)
    ws.send(step(t=8))  # the prompt
    hidden_reply(ws)
    ws.send(verify_frame(6, 4), part=0.5)  # half of a verify frame, then gone
    ws.drop()
    ws = stream(cloud, sid)
    ws.send(verify_frame(6, 4))  # a whole verify frame, gone before its reply
    ws.drop()
    assert settled(http, cloud.token, WS, before + 2) == before + 2  # today: 0 aborts
    ws = stream(cloud, sid)  # the session verifies on: cut back to 6, five positions
    ws.send(verify_frame(6, 4))
    assert hidden_reply(ws).shape == (1, 5, C)
    ws.close()


def test_a_request_cut_while_authenticating_is_a_client_abort(cloud, http):
    """The whole request, then the connection closes before its answer could be read. An upgrade
    is one abort each, whichever the service saw first (the client gone before its 101, or the
    stream then dropped without a close frame). A plain request is an abort when the service saw
    the client leave before it answered, and nothing when the answer was out first (the token
    check no longer waits on a thread, so that is a race): at least one of CUTS, never more than
    one each, never a 5xx or a traceback (the module's check)."""
    host, port = cloud.base_url.split("//")[1].rsplit(":", 1)
    sid = open_session(http, cloud.token)
    cuts = {
        WS: upgrade_request(f"/v1/sessions/{sid}/stream", cloud.token),
        "GET /v1/info": f"GET /v1/info HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {cloud.token}\r\n\r\n".encode(),
        "POST /v1/sessions": (f"POST /v1/sessions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                              f"authorization: Bearer {cloud.token}\r\ncontent-length: 2\r\n\r\n{{}}").encode(),
    }
    for route, request in cuts.items():
        before = aborts(http, cloud.token, route)
        for _ in range(CUTS):
            s = socket.create_connection((host, int(port)))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)  # the request and the FIN in one segment
            s.sendall(request)
            s.close()
        n = settled(http, cloud.token, route, before + (CUTS if route == WS else 1)) - before
        assert (n == CUTS) if route == WS else (1 <= n <= CUTS), (route, n)  # today: 0 aborts


CUTS = 5


def test_a_stream_the_service_closes_is_no_client_abort(cloud, http):
    before = aborts(http, cloud.token, WS)
    store = TokenStore(cloud.workdir / "tokens.json")
    token = store.add("revokee")
    sid = open_session(http, token)
    ws = RawWebSocket(cloud.base_url, f"/v1/sessions/{sid}/stream", token)
    ws.send(step(t=2))
    hidden_reply(ws)
    store.revoke("revokee")
    opcode, payload = ws.recv()  # the sweeper closes it: 4401
    assert opcode == 8 and int.from_bytes(payload[:2], "big") == 4401, (opcode, payload)
    ws.close(4401)  # the close echoed, as a client does
    ws = stream(cloud, open_session(http, cloud.token))
    opcode, payload = ws.recv()  # idle past ws_idle_seconds: 1001
    assert opcode == 8 and int.from_bytes(payload[:2], "big") == 1001, (opcode, payload)
    ws.close(1001)
    ws = stream(cloud, open_session(http, cloud.token))  # then one real drop, counted: the count is live
    ws.drop()
    assert settled(http, cloud.token, WS, before + 1) == before + 1  # the two closes above counted nothing
