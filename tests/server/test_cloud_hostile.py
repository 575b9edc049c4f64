"""Hostile input against the real service in its own process (so its memory is its own): every case
gets its status or close code, the service stays up, a valid client's next step is unchanged bit
for bit, and the process's memory high-water mark stays within the KV budget + 10 %."""

from __future__ import annotations

import socket
import time

import httpx
import psutil
import pytest
import torch
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from cloud_helpers import C, auth, open_session, step
from hostile_load import MiB, Flood, vm_hwm
from hostile_load import settings as hostile_settings
from server.auth import TokenStore
from server.launch import local_cloud_sync
from umbra import wire

BUDGET = 48 * MiB
SLOT_BYTES = 3 * 2 * 2 * 16 * 4  # middle layers x (K+V) x kv heads x head dim x fp32, per row and slot
SETTINGS = hostile_settings(BUDGET, max_frame_bytes=2 * MiB)


class Probe:
    """A valid client whose decode step must answer the same bytes after every hostile case."""

    def __init__(self, http: httpx.Client, token: str):
        self.http, self.token = http, token
        self.sid = open_session(http, token)
        g = torch.Generator().manual_seed(3)
        prefill = wire.encode(wire.forward_frame(torch.randn(1, 8, C, generator=g), torch.arange(8)[None]))
        assert self._post(prefill).status_code == 200
        self.frame = wire.encode(wire.forward_frame(torch.randn(1, 1, C, generator=g), torch.tensor([[8]])))
        self.expected = self.check()

    def _post(self, body: bytes) -> httpx.Response:
        return self.http.post(f"/v1/sessions/{self.sid}/forward", content=body, headers=auth(self.token))

    def check(self) -> bytes:
        assert self.http.get("/healthz").status_code == 200
        r = self._post(self.frame)
        assert r.status_code == 200, r.text
        assert self.http.post(f"/v1/sessions/{self.sid}/truncate", json={"length": 8},
                              headers=auth(self.token)).status_code == 204
        if hasattr(self, "expected"):
            assert r.content == self.expected
        return r.content


@pytest.fixture(scope="module")
def hostile(model_dir):
    with local_cloud_sync(model_dir, settings=SETTINGS) as cloud:
        # the probe connects from 127.0.0.2: its own address, so the per-address cap on 127.0.0.1 spares it
        transport = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(base_url=cloud.base_url, timeout=30, transport=transport) as http:
            probe = Probe(http, cloud.token)
            baseline = psutil.Process(cloud.process.pid).memory_info().rss
            yield cloud, probe, baseline


def raw_request(cloud, data: bytes, *, wait: float = 5.0, pace: float = 0.0) -> bytes:
    """Send `data` on a fresh socket (one byte per `pace` seconds if given) and read what comes back."""
    host, port = cloud.base_url.rsplit(":", 1)
    s = socket.create_connection((host.split("//")[1], int(port)), timeout=wait)
    try:
        try:
            if pace:
                for b in data:
                    s.send(bytes([b]))
                    time.sleep(pace)
            else:
                s.sendall(data)
        except OSError:
            pass
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0


def test_edge_limits_hold_before_auth(hostile):
    cloud, probe, _ = hostile
    # a 300 MB JSON body without a token: 413 from its header alone
    head = b"POST /v1/sessions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 300000000\r\n\r\n"
    assert status_of(raw_request(cloud, head + b"{" * 1024)) == 413
    # a chunked JSON body past the limit: 413 once the limit is passed
    chunk = b"10000\r\n" + b" " * 0x10000 + b"\r\n"
    big = b"POST /v1/sessions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n" + chunk * 3
    assert status_of(raw_request(cloud, big)) == 413
    # a frame body declared far over the limit, without a token: 413 before anything is read
    head = (b"POST /v1/sessions/x/forward HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % (64 * 2 * MiB))
    assert status_of(raw_request(cloud, head)) == 413
    # 64 KB of headers: refused by the parser (uvicorn answers 400 on an oversize header block)
    huge = b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-pad: " + b"a" * 65536 + b"\r\n\r\n"
    assert status_of(raw_request(cloud, huge)) in (400, 431)
    probe.check()


def test_slow_headers_and_bodies_time_out(hostile):
    cloud, probe, _ = hostile
    t0 = time.monotonic()
    reply = raw_request(cloud, b"GET /healthz HTTP/1.1\r\nhost: x\r\n", pace=0.4)
    assert status_of(reply) == 408 and time.monotonic() - t0 < 5
    body_head = b"POST /v1/sessions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 20\r\n\r\n{"
    assert status_of(raw_request(cloud, body_head, wait=5)) == 408
    probe.check()


def test_connections_per_address_are_capped(hostile):
    cloud, probe, _ = hostile
    host, port = cloud.base_url.split("//")[1].rsplit(":", 1)
    held = [socket.create_connection((host, int(port))) for _ in range(SETTINGS["max_connections_per_address"])]
    try:
        time.sleep(0.2)
        # a full address still serves a newcomer: the oldest connections no token has proven make way
        # (umbra/edge_slots.py), so the address never holds more than its cap
        assert status_of(raw_request(cloud, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")) == 200
        for s in held:
            s.settimeout(0.05)
        assert sum(_closed(s) for s in held) >= 1  # displaced (or cut by the 1 s header deadline meanwhile)
        probe.check()  # another address is served all the while
    finally:
        for s in held:
            s.close()
    time.sleep(1.5)  # the held connections were cut by the header deadline anyway
    with httpx.Client(base_url=cloud.base_url, timeout=10) as http:
        assert http.get("/healthz").status_code == 200


def _closed(s: socket.socket) -> bool:
    try:
        return s.recv(100) is not None  # a 408 or the end of the stream: displaced
    except TimeoutError:
        return False
    except OSError:
        return True


def test_hostile_frames_get_4xx_and_memory_stays_in_budget(hostile):
    cloud, probe, baseline = hostile
    Flood(probe.http, cloud.token, cloud.add_token("hostile-other"), BUDGET, C, SLOT_BYTES).run()
    rss = psutil.Process(cloud.process.pid).memory_info().rss
    assert vm_hwm(cloud.process.pid) - baseline <= 1.1 * BUDGET, (vm_hwm(cloud.process.pid), baseline, rss)
    probe.check()


def test_revoked_tokens_lose_their_open_streams_and_idle_streams_close(hostile):
    cloud, probe, _ = hostile
    store = TokenStore(cloud.workdir / "tokens.json")
    token = store.add("revokee")
    with httpx.Client(base_url=cloud.base_url, timeout=30) as http:
        sid = open_session(http, token)
    url = cloud.base_url.replace("http", "ws") + f"/v1/sessions/{sid}/stream"
    with connect(url, additional_headers=auth(token)) as ws:
        ws.send(step(t=2))
        assert wire.decode(ws.recv(timeout=30)).kind == wire.Kind.HIDDEN
        store.revoke("revokee")
        with pytest.raises(ConnectionClosed) as info:  # closed by the sweeper, no message needed
            ws.recv(timeout=15)
        assert info.value.rcvd.code == 4401
    with connect(url.replace(sid, probe.sid), additional_headers=auth(cloud.token)) as ws:
        with pytest.raises(ConnectionClosed) as info:
            ws.recv(timeout=10)
        assert info.value.rcvd.code == 1001  # idle for ws_idle_seconds
    probe.check()
