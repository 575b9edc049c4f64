"""benchmarks/wan_link.py: a real echo server behind the delaying proxy — a round trip takes the
dialled RTT (and not much more), bytes arrive in order and complete under jitter, and a bandwidth
cap slows a bulk transfer to about its rate."""

from __future__ import annotations

import socket
import socketserver
import threading
import time

import pytest
from wan_link import LinkConfig, WanProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture(scope="module")
def echo():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address
    server.shutdown()
    server.server_close()


def _round_trip(sock: socket.socket, payload: bytes) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        got += sock.recv(65536)
    return time.perf_counter() - t0, got


def test_a_round_trip_takes_the_dialled_rtt(echo):
    with WanProxy(echo, LinkConfig(one_way_ms=25)) as link:
        with socket.create_connection(("127.0.0.1", link.port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            times = [_round_trip(sock, b"ping %d" % i)[0] for i in range(5)]
    assert min(times) >= 0.050  # two one-way delays
    assert sorted(times)[2] < 0.050 + 0.030  # and not much more (a loaded machine: generous slack)
    with WanProxy(echo, LinkConfig()) as link, socket.create_connection(("127.0.0.1", link.port)) as sock:
        assert _round_trip(sock, b"x")[0] < 0.030  # no delay dialled: loopback speed


def test_bytes_arrive_in_order_under_jitter(echo):
    payload = b"".join(b"%06d|" % i for i in range(20000))
    with WanProxy(echo, LinkConfig(one_way_ms=5, jitter_ms=5, seed=3)) as link:
        with socket.create_connection(("127.0.0.1", link.port)) as sock:
            chunks = [payload[i : i + 1000] for i in range(0, len(payload), 1000)]
            got = b""
            for chunk in chunks:  # many small writes, each delayed by its own draw
                sock.sendall(chunk)
            while len(got) < len(payload):
                got += sock.recv(65536)
    assert got == payload


def test_a_bandwidth_cap_slows_a_bulk_transfer_to_its_rate(echo):
    payload = bytes(range(256)) * 1000  # 256 kB each way
    with WanProxy(echo, LinkConfig(bandwidth_mbps=8)) as link:  # 1 MB/s
        with socket.create_connection(("127.0.0.1", link.port)) as sock:
            seconds, got = _round_trip(sock, payload)
    assert got == payload
    assert seconds >= 0.2  # at least 256 kB at 1 MB/s (the two directions overlap)


def test_a_config_out_of_range_is_refused():
    with pytest.raises(ValueError):
        LinkConfig(one_way_ms=5, jitter_ms=10).validate()
    with pytest.raises(ValueError):
        LinkConfig(bandwidth_mbps=0).validate()
    assert LinkConfig(one_way_ms=40).rtt_ms == 80
