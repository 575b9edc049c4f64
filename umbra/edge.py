"""The edge of Umbra's HTTP services (the cloud service, server/edge.py, and `umbra serve`,
lsp/http_app.py): what a connection may cost before anybody has looked at its token.

- `EdgeLimits`: the limits (from each service's settings).
- `edge_protocol(limits)`: uvicorn's h11 protocol with a deadline for request headers (slow
  headers get 408 and the connection closes; uvicorn bounds their size with
  h11_max_incomplete_event_size) and a cap of open connections per client address (over it: 429
  and close), counted over live transports so upgraded WebSockets count too.
- `BodyGuard`: ASGI middleware, outermost, that enforces body size limits before parsing and
  before authentication — a declared Content-Length over the route's limit is answered 413 at
  once; a JSON body is read here, up to its limit and within a deadline (408), then replayed; a
  frame body (routes in `frame_routes`, none by default) is counted and timed as the route
  streams it (it authenticates first; `timeout_error` is raised when it is too slow)."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections import defaultdict
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol



@dataclass(frozen=True)
class EdgeLimits:
    max_frame_bytes: int = 64 * 1024 * 1024
    max_json_bytes: int = 64 * 1024
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0
    max_connections_per_address: int = 128
    max_header_bytes: int = 16 * 1024


def _raw_response(status: int, reason: bytes) -> bytes:
    return (b"HTTP/1.1 %d %s\r\ncontent-length: 0\r\nconnection: close\r\n\r\n" % (status, reason))


def edge_protocol(limits: EdgeLimits) -> type[H11Protocol]:
    """An H11Protocol class bound to `limits` and to one registry of connections per address."""
    live: dict[str, set] = defaultdict(set)

    class EdgeH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _head: bytearray | None = None  # the start of the next request, until its header block ends

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            host = self.client[0] if self.client else ""
            mine = live[host]
            mine.difference_update([t for t in mine if t.is_closing()])
            if len(mine) >= limits.max_connections_per_address:
                transport.write(_raw_response(429, b"Too Many Requests"))
                transport.close()
                return
            mine.add(transport)
            self._arm()

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(limits.header_timeout_seconds, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.write(_raw_response(408, b"Request Timeout"))
                self.transport.close()

        def _header_block_too_big(self, data: bytes) -> bool:
            """h11 bounds only an incomplete header block; one that arrives whole is measured here."""
            if self._head is None:
                return False
            limit = limits.max_header_bytes
            self._head += data[: limit + 4 - len(self._head)]
            end = self._head.find(b"\r\n\r\n")
            if end == -1 and len(self._head) <= limit:
                return False
            self._head = None
            return end == -1 or end > limit

        def data_received(self, data: bytes) -> None:
            if self.cycle is None or self.cycle.response_complete:
                if self._head is None:
                    self._head = bytearray()
                if self._header_block_too_big(data):
                    self.transport.write(_raw_response(431, b"Request Header Fields Too Large"))
                    self.transport.close()
                    return
            before = self.cycle
            super().data_received(data)
            if self.cycle is not before:  # a request's headers are complete
                self._head = None
                self._disarm()
            elif (self.cycle is None or self.cycle.response_complete) and self.conn.their_state == h11.IDLE \
                    and not self.transport.is_closing():
                self._arm()  # bytes of the next request's headers are arriving: they get a deadline too

        def handle_websocket_upgrade(self, event) -> None:
            self._disarm()
            super().handle_websocket_upgrade(event)

        def connection_lost(self, exc) -> None:
            self._disarm()
            live[self.client[0] if self.client else ""].discard(self.transport)
            super().connection_lost(exc)

    return EdgeH11Protocol


class BodyGuard:
    frame_routes: tuple[str, ...] = ()  # paths (by suffix) whose bodies the route streams itself
    timeout_error: type[Exception] = TimeoutError  # raised by a frame body's receive past its deadline
    too_large_name = "PayloadTooLarge"  # the `error` of a 413 reply

    def __init__(self, app, limits):
        self.app, self._limits = app, limits  # limits: a callable (settings are read at startup)

    @functools.cached_property
    def limits(self) -> EdgeLimits:
        return self._limits()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        frames = bool(self.frame_routes) and scope["path"].endswith(self.frame_routes)
        limit = self.limits.max_frame_bytes if frames else self.limits.max_json_bytes
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > (16 * limit if frames else limit)):
            status = 400 if not declared.isdigit() else 413
            return await self._reply(send, status, "bad Content-Length" if status == 400 else
                                f"body of {int(declared)} bytes exceeds the limit of {limit} bytes")
        deadline = time.monotonic() + self.limits.body_timeout_seconds
        if frames:
            return await self.app(scope, _timed(receive, deadline, self.timeout_error), send)
        body, more = bytearray(), True
        try:
            while more:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
                if message["type"] != "http.request":
                    return
                body += message.get("body", b"")
                more = message.get("more_body", False)
                if len(body) > limit:
                    return await self._reply(send, 413, f"body exceeds the limit of {limit} bytes")
        except TimeoutError:
            return await self._reply(send, 408, "the request body was not sent in time")
        return await self.app(scope, _replay(bytes(body), receive), send)

    async def _reply(self, send, status: int, detail: str) -> None:
        error = {413: self.too_large_name, 408: "RequestTimeout"}.get(status, "BadRequest")
        body = json.dumps({"error": error, "detail": detail}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _timed(receive, deadline: float, timeout_error: type[Exception]):
    """`receive` whose body messages must all arrive before `deadline` (else `timeout_error`)."""
    done = False

    async def guarded():
        nonlocal done
        if done:
            return await receive()
        try:
            message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise timeout_error("the request body was not sent in time") from None
        done = message["type"] != "http.request" or not message.get("more_body", False)
        return message

    return guarded


def _replay(body: bytes, receive):
    sent = False

    async def replay():
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay

