"""A slow-body client of the edge tests: a request that declares a large body and then trickles it,
one byte at a time, the way an attacker holds a connection slot (issue 60)."""

from __future__ import annotations

import socket
import time


def address(base_url: str) -> tuple[str, int]:
    host, port = base_url.split("//")[1].rsplit(":", 1)
    return host, int(port)


def slow_body(base_url: str, token: str | None, source: str = "127.0.0.1", pace: float = 0.5,
              seconds: float = 30.0) -> tuple[bytes, float | None, float]:
    """POST .../forward declaring 1,000,000 bytes from `source`, then one byte per `pace` s until the
    peer closes (or `seconds` pass). Returns (the reply's status line, seconds from the reply to the
    close or None if it was not closed within `seconds`, seconds from the start to the reply)."""
    t0 = time.monotonic()
    s = socket.create_connection(address(base_url), timeout=0.2, source_address=(source, 0))
    s.sendall((f"POST /v1/sessions/x/forward HTTP/1.1\r\nhost: x\r\ncontent-length: 1000000\r\n"
               + (f"authorization: Bearer {token}\r\n" if token else "") + "\r\n").encode())
    reply, replied, t_end = b"", None, t0 + seconds
    try:
        while time.monotonic() < t_end:
            try:
                s.send(b"\0")
            except OSError:
                break
            try:
                chunk = s.recv(4096)
            except TimeoutError:
                chunk = None
            except OSError:
                break
            if chunk == b"":
                break
            if chunk:
                reply += chunk
                replied = replied or time.monotonic()
            time.sleep(pace)
        else:
            return reply.split(b"\r\n", 1)[0], None, (replied or t_end) - t0
        end = time.monotonic()
        return reply.split(b"\r\n", 1)[0], end - (replied or end), (replied or end) - t0
    finally:
        s.close()
