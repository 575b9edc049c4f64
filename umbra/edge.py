"""The edge of Umbra's HTTP services (the cloud service, server/edge.py, and `umbra serve`,
lsp/http_app.py): what a connection may cost before anybody has looked at its token.

- `EdgeLimits`: the limits (from each service's settings).
- `edge_protocol(limits)`: uvicorn's h11 protocol with a deadline for a whole request (headers,
  then headers + body, counted from its first byte however often bytes arrive; shortest while no
  token has proven the connection): past it 408 and close. Connection slots per client address
  (umbra/edge_slots.py): unproven connections hold a small share and the oldest makes way for a
  newcomer; 429 and close only when nothing can. Any response that starts before the request
  body was read (401, 408, 413, 429, ...) and every 401 carries `Connection: close`, and the
  connection is dropped once it is sent. Behind a proxy in `trusted_proxies` the slot is the
  forwarded client's. A response that starts after its client left sets the scope extension's
  "gone" (the service counts a client abort, not a reply).
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
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from umbra.edge_slots import SlotTable, TrustedProxies


@dataclass(frozen=True)
class EdgeLimits:
    max_frame_bytes: int = 64 * 1024 * 1024  # largest frame body
    max_json_bytes: int = 64 * 1024  # largest JSON body
    header_timeout_seconds: float = 10.0  # a request's headers, from its first byte (408 and close)
    body_timeout_seconds: float = 30.0  # a whole request (headers + body) on an authenticated connection
    max_connections_per_address: int = 128  # slots per client address (umbra/edge_slots.py)
    max_header_bytes: int = 16 * 1024  # request line + headers (431 over it)
    unauthenticated_timeout_seconds: float = 5.0  # a whole request on a connection no token has proven yet
    max_unauthenticated_per_address: int = 32  # slots unproven connections may hold; the oldest makes way
    trusted_proxies: tuple[str, ...] = ()  # peers whose X-Forwarded-For names the client (nginx); none by default


EDGE_EXTENSION = "umbra.edge"  # scope["extensions"][EDGE_EXTENSION]["authenticated"](): the request's token is valid


def _raw_response(status: int, reason: bytes) -> bytes:
    return (b"HTTP/1.1 %d %s\r\ncontent-length: 0\r\nconnection: close\r\n\r\n" % (status, reason))


def edge_protocol(limits: EdgeLimits) -> type[H11Protocol]:
    """An H11Protocol class bound to `limits` and to one table of connection slots per address."""
    table = SlotTable(limits.max_connections_per_address, limits.max_unauthenticated_per_address)
    trusted = TrustedProxies(limits.trusted_proxies)

    class EdgeH11Protocol(H11Protocol):
        _timer: asyncio.TimerHandle | None = None
        _head: bytearray | None = None  # the start of the next request, until its header block ends
        _started: float | None = None  # monotonic time of the first byte of the request being read
        _address: str | None = None  # the address whose slot this connection holds
        proven = False  # a request on this connection carried a valid token
        refused: dict = {}  # the current request's scope extension: "reason" once the edge cut it
        upgraded = False

        slots = table  # tests and benchmarks read `displaced`

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.opened, self.refused = time.monotonic(), {}
            self._idle = self.opened
            self.app = self._edge_app(self.app)
            peer = self.client[0] if self.client else ""
            if peer not in trusted:  # behind a trusted proxy the slot is taken per request (_edge_app)
                if not table.admit(peer, self):
                    transport.write(_raw_response(429, b"Too Many Requests"))
                    transport.close()
                    return
                self._address = peer
            self._begin()

        # Slot
        def busy(self) -> bool:
            return self.upgraded or (self.cycle is not None and not self.cycle.response_complete
                                     and self.conn.their_state is h11.DONE)

        def reading_since(self) -> float | None:
            return self._started

        def idle_since(self) -> float:
            return self._idle

        def closing(self) -> bool:
            return self.transport.is_closing()

        def displace(self) -> None:
            self._refuse()

        def _prove(self) -> None:
            self.proven = True

        # the whole-request deadline
        def _begin(self) -> None:
            if self._started is None:
                self._started = time.monotonic()
                self._arm()

        def _limit(self) -> float:
            if self.cycle is None or self.cycle.response_complete:  # still reading headers
                return min(limits.header_timeout_seconds, limits.body_timeout_seconds if self.proven
                           else limits.unauthenticated_timeout_seconds)
            return limits.body_timeout_seconds if self.proven else limits.unauthenticated_timeout_seconds

        def _arm(self) -> None:
            self._disarm()
            if self._started is not None:
                delay = max(0.0, self._started + self._limit() - time.monotonic())
                self._timer = self.loop.call_later(delay, self._deadline)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _deadline(self) -> None:
            self._timer = None
            if self._started is None or self.transport.is_closing() or self.busy():
                return
            if self._started + self._limit() > time.monotonic() + 0.01:  # proven meanwhile: a longer deadline
                return self._arm()
            self._refuse()

        def _refuse(self) -> None:
            """408 if no response has begun, and close the connection either way."""
            if self.transport.is_closing():
                return
            if self._started is not None and (self.cycle is None or not self.cycle.response_started
                                              or self.cycle.response_complete):
                self.transport.write(_raw_response(408, b"Request Timeout"))
                self.refused["reason"] = "deadline"
                if self.cycle is not None and not self.cycle.response_complete:
                    self.cycle.disconnected = True  # the route's own answer, if any, goes nowhere
                    self.cycle.message_event.set()  # and a receive waiting for body bytes ends now
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
                if data and self.conn.their_state == h11.IDLE:
                    self._begin()
            before = self.cycle
            super().data_received(data)
            if self.cycle is not before:  # a request's headers are complete
                self._head = None
                self._arm()  # from the header deadline to the whole request's
            if self.conn.their_state is h11.DONE and self.cycle is not None and not self.cycle.response_complete:
                self._started = None  # the request is read: the route's time is not the client's
                self._disarm()

        def on_response_complete(self) -> None:
            self._idle = time.monotonic()
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._started = None
                self._disarm()

        def handle_websocket_upgrade(self, event) -> None:
            self.upgraded = True
            self._started = None
            self._disarm()
            super().handle_websocket_upgrade(event)

        def connection_lost(self, exc) -> None:
            self._disarm()
            if self._address is not None:
                table.release(self._address, self)
            super().connection_lost(exc)

        def _edge_app(self, app):
            async def edge_app(scope, receive, send):
                if scope["type"] != "http":
                    return await app(scope, receive, send)
                if trusted and self.client and self.client[0] in trusted:
                    address = trusted.client(self.client[0], scope["headers"])
                    if address != self._address:
                        if self._address is not None:
                            table.release(self._address, self)
                        self._address = address if table.admit(address, self) else None
                        if self._address is None:
                            return await _close_reply(send, 429, b"too many connections from this client")
                self.refused = edge = {"authenticated": self._prove}
                scope.setdefault("extensions", {})[EDGE_EXTENSION] = self.refused
                cycle = self.cycle

                async def closing_send(message):
                    if message["type"] == "http.response.start" and cycle is not None and cycle.disconnected:
                        edge["gone"] = True  # the client left before its answer: a client abort, not a reply
                    if message["type"] == "http.response.start" and (
                            message["status"] == 401 or self.conn.their_state is not h11.DONE):
                        headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                        message = {**message, "headers": headers + [(b"connection", b"close")]}
                    await send(message)

                return await app(scope, receive, closing_send)

            return edge_app

    return EdgeH11Protocol


async def _close_reply(send, status: int, detail: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(detail)).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": detail})


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

