"""A WebSocket client over a plain socket, for tests that must leave a stream the way a broken
client does (mid-message, without a close frame) — what a WebSocket library never does."""

from __future__ import annotations

import base64
import os
import socket
import struct


class RawWebSocket:
    def __init__(self, base_url: str, path: str, token: str | None, timeout: float = 30.0):
        host, port = base_url.split("//")[1].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.sendall(upgrade_request(path, token))
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError(f"closed during the upgrade: {head[:200]!r}")
            head += chunk
        self.status = int(head.split(b" ", 2)[1])
        self._buf = head.split(b"\r\n\r\n", 1)[1]

    def send(self, payload: bytes, part: float = 1.0) -> None:
        """One binary message (masked, as a client must); `part` < 1 sends only that share of it."""
        frame = client_frame(payload)
        self.sock.sendall(frame[: int(len(frame) * part)])

    def recv(self) -> tuple[int, bytes]:
        """(opcode, payload) of the next message."""
        self._need(2)
        n, off = self._buf[1] & 0x7F, 2
        if n == 126:
            self._need(4)
            n, off = struct.unpack("!H", self._buf[2:4])[0], 4
        elif n == 127:
            self._need(10)
            n, off = struct.unpack("!Q", self._buf[2:10])[0], 10
        self._need(off + n)
        opcode, payload, self._buf = self._buf[0] & 0x0F, self._buf[off:off + n], self._buf[off + n:]
        return opcode, payload

    def close(self, code: int = 1000) -> None:
        """A proper close: a close frame, then the socket."""
        self.sock.sendall(client_frame(struct.pack("!H", code), opcode=8))
        self.sock.close()

    def drop(self) -> None:
        """Leave without a close frame (the socket closes under the stream)."""
        self.sock.close()

    def _need(self, n: int) -> None:
        while len(self._buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the stream")
            self._buf += chunk


def upgrade_request(path: str, token: str | None) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
            f"sec-websocket-key: {key}\r\nsec-websocket-version: 13\r\n"
            + (f"authorization: Bearer {token}\r\n" if token else "") + "\r\n").encode()


def client_frame(payload: bytes, opcode: int = 2) -> bytes:
    mask, n = os.urandom(4), len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 0xFE, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0xFF, n)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + masked
