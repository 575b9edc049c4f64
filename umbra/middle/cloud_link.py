"""CloudLink: RemoteMiddle's transport to the cloud service (server/): HTTP requests (httpx), one
WebSocket stream per session for small steps, the cloud's /v1/info, byte counts and the tap.

A step that finds no open stream (a new session, or one the cloud closed after idle) goes over
HTTP and the upgrade follows it in the background (`open_beside`): no step waits for an upgrade.

Every request of a session, the WebSocket upgrade included, carries the header
`X-Umbra-Session: <routing key>` (random, per session, kept across re-prefills), which a
balancer hashes to keep the session on one replica (deploy/nginx/). Each request, upgrade and
stream step counts one round trip on its session (RemoteSession.trips).

Failures become the client's errors (remote_errors.py): a connection refused, reset or dropped
(or a gateway's 502/504) is ConnectionLost, which RemoteMiddle recovers once per call; a timeout
is CloudUnavailable; a refusal is the status's class. A stream whose reply does not come in
time is dropped (its session marked dirty: the reply may still come and must never be read as
the next step's)."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path
from typing import Callable

import httpx
import torch
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.protocol import State

from umbra import wire
from umbra.errors import CloudRejected, CloudUnavailable, ConfigError
from umbra.middle.remote_errors import ConnectionLost, rejection
from umbra.middle.remote_session import RemoteSession, WireStats

ROUTING_HEADER = "X-Umbra-Session"  # the routing key a balancer hashes (deploy/nginx/)
SESSION_ID_HEADER = "X-Umbra-Session-Id"  # the cloud's id of a session opened by its first frame


class CloudLink:
    def __init__(self, base_url: str, token: str, *, verify: str | Path | None, timeout: float,
                 connect_timeout: float, tap: Callable[[str, bytes], None] | None):
        self.base_url = base_url.rstrip("/")
        self.timeout, self.connect_timeout, self.tap = timeout, connect_timeout, tap
        self.stats = WireStats()
        self.info: dict | None = None
        self._auth = {"Authorization": f"Bearer {token}"}
        self._ssl = ssl.create_default_context(cafile=str(verify)) if verify else None
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=self._auth, verify=self._ssl or True,
                                       timeout=httpx.Timeout(timeout, connect=connect_timeout))
        self._background: set[asyncio.Task] = set()

    def count(self, direction: str, payload: bytes) -> None:
        if direction == "sent":
            self.stats.bytes_sent += len(payload)
        else:
            self.stats.bytes_received += len(payload)
        if self.tap is not None and payload:
            self.tap(direction, payload)

    async def request(self, method: str, path: str, content: bytes | None = None,
                      body: dict | None = None, s: RemoteSession | None = None,
                      on_headers: Callable[[httpx.Response], None] | None = None) -> httpx.Response:
        """One request and its whole answer; `on_headers(response)` runs once the answer's headers
        are in, before its body is read (a cancel while the body comes still knows them)."""
        if body is not None:
            content = json.dumps(body).encode()
        headers = {"Content-Type": wire.MEDIA_TYPE if body is None else "application/json"}
        if s is not None:
            headers[ROUTING_HEADER] = s.route
            s.trips += 1
        self.count("sent", content or b"")
        self.stats.http_requests += 1
        try:
            r = await self._http.send(self._http.build_request(method, path, content=content, headers=headers),
                                      stream=True)
            try:
                if on_headers is not None:
                    on_headers(r)
                await r.aread()
            finally:
                await r.aclose()
        except httpx.TransportError as exc:
            lost = CloudUnavailable if isinstance(exc, httpx.TimeoutException) else ConnectionLost
            raise lost(f"cloud unreachable at {self.base_url}: {type(exc).__name__} {exc}") from exc
        self.count("received", r.content)
        if r.status_code >= 400:
            try:
                detail = r.json()["detail"]
            except (ValueError, KeyError, TypeError):
                detail = r.text[:200]
            raise rejection(r.status_code, str(detail))
        return r

    def frame_bytes(self, frame: wire.Frame) -> bytes:
        data = wire.encode(frame)
        limit = (self.info or {}).get("max_frame_bytes")
        if limit and len(data) > limit:
            raise CloudRejected(f"frame of {len(data)} bytes exceeds the cloud's limit of {limit} bytes; "
                                f"send fewer positions per call", 413)
        return data

    async def exchange(self, s: RemoteSession, path: str, data: bytes, expect: wire.Kind) -> torch.Tensor:
        r = await self.request("POST", path, data, s=s)
        return wire.decode(r.content, expect=expect).tensors[0]

    async def open_with(self, s: RemoteSession, data: bytes) -> torch.Tensor:
        """POST /v1/sessions/forward: a new inference session and its first FORWARD frame in one
        trip; sets s.remote to the cloud's id (as soon as the answer's headers are in) and returns
        the frame's outputs. A cancel after the headers: the client knows the session (cut back or
        closed later). A cancel before them: the request goes on in the background, and the
        session its answer names is closed (`_close_unclaimed`): however late the answer comes,
        the opened session never waits for idle expiry. (The cloud also closes one whose client
        left before its answer, server/routes/sessions.py: a client that dies.)"""
        left = False  # the caller cancelled before the headers: nobody claims the session

        def learn(r: httpx.Response) -> None:  # before the body: a cancel from here on leaves the
            sid = r.headers.get(SESSION_ID_HEADER)  # session known, to be cut back (dirty) or closed
            if r.status_code < 400 and sid and not left:
                s.remote = sid

        call = asyncio.ensure_future(self.request("POST", "/v1/sessions/forward", data, s=s, on_headers=learn))
        try:
            r = await asyncio.shield(call)
        except asyncio.CancelledError:
            if s.remote is None and not call.done():
                left = True
                self._keep(self._close_unclaimed(call, s))
            elif not call.cancel() and not call.cancelled():
                call.exception()  # done as the caller left: its failure is nobody's now
            raise
        if not r.headers.get(SESSION_ID_HEADER):
            raise wire.WireError(f"the cloud opened a session without its {SESSION_ID_HEADER} header")
        return wire.decode(r.content, expect=wire.Kind.HIDDEN).tensors[0]

    async def _close_unclaimed(self, call: asyncio.Future, s: RemoteSession) -> None:
        """Wait for a cancelled open's answer and close the session it names (on its replica:
        the routing header of `s`); an open that failed or never reached the cloud left none."""
        try:
            sid = (await call).headers.get(SESSION_ID_HEADER)
            if sid:
                await self.request("DELETE", f"/v1/sessions/{sid}", s=s)
        except (CloudRejected, CloudUnavailable, ConnectionLost, asyncio.CancelledError):
            pass  # gone already, or the cloud is unreachable: its idle expiry is the last resort

    async def fetch_info(self) -> dict:
        info = (await self.request("GET", "/v1/info")).json()
        if info.get("protocol") != wire.VERSION:
            raise ConfigError(f"cloud speaks wire protocol {info.get('protocol')}, this client {wire.VERSION}")
        return info

    # -- stream ------------------------------------------------------------------------------------
    def stream_open(self, s: RemoteSession) -> bool:
        """Is the session's stream open (the cloud closes an idle one: its close frame reads here)?"""
        if s.ws is not None and s.ws.state is not State.OPEN:
            s.ws = None
        return s.ws is not None

    async def _connect(self, s: RemoteSession, sid: str) -> ClientConnection:
        url = "ws" + self.base_url[len("http"):] + f"/v1/sessions/{sid}/stream"
        try:
            return await connect(url, additional_headers={**self._auth, ROUTING_HEADER: s.route},
                                 ssl=self._ssl if url.startswith("wss") else None,
                                 compression=None, proxy=None, open_timeout=self.connect_timeout,
                                 max_size=None, close_timeout=2)
        except InvalidStatus as exc:
            try:
                detail = json.loads(exc.response.body or b"{}").get("detail", "")
            except ValueError:
                detail = ""
            raise rejection(exc.response.status_code, detail or str(exc)) from exc
        except TimeoutError as exc:
            raise CloudUnavailable(f"cloud unreachable at {self.base_url}: stream: {type(exc).__name__} {exc}") from exc
        except (OSError, InvalidHandshake) as exc:
            raise ConnectionLost(f"cloud unreachable at {self.base_url}: stream: {type(exc).__name__} {exc}") from exc

    async def ws_open(self, s: RemoteSession) -> ClientConnection:
        """Open the session's stream and wait for it (the upgrade: one round trip)."""
        s.trips += 1  # the upgrade is an HTTP request and its answer
        s.ws = await self._connect(s, s.remote)
        return s.ws

    def open_beside(self, s: RemoteSession) -> None:
        """Start the stream's upgrade in the background after a step answered over HTTP (the
        session is there; no round trip of its own): a later step finds it open. A failure is
        left to the frames (they go over HTTP meanwhile, and learn a gone session there)."""
        if s.ws_opening is not None and not s.ws_opening.done():
            return
        sid = s.remote

        async def upgrade() -> None:
            try:
                ws = await self._connect(s, sid)
            except (CloudRejected, CloudUnavailable, ConnectionLost):
                return
            if s.ws is None and s.remote == sid and s.ws_opening is task:
                s.ws = ws
            else:  # the session moved on (re-prefilled, closed) meanwhile
                self._close_later(ws)

        task = s.ws_opening = self._keep(upgrade())

    def _close_later(self, ws: ClientConnection) -> None:
        self._keep(ws.close())

    def _keep(self, work) -> asyncio.Task:
        """Run `work` in the background, awaited by aclose()."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def drop_ws(self, s: RemoteSession) -> None:
        if s.ws_opening is not None:
            s.ws_opening.cancel()
            s.ws_opening = None
        if s.ws is not None:
            self._close_later(s.ws)
            s.ws = None

    async def ws_step(self, s: RemoteSession, data: bytes) -> torch.Tensor:
        ws = s.ws if self.stream_open(s) else await self.ws_open(s)  # closed by the cloud: idle, restart
        self.count("sent", data)
        self.stats.ws_messages += 1
        s.trips += 1
        try:
            await ws.send(data)
            async with asyncio.timeout(self.timeout):
                reply = await ws.recv()
        except TimeoutError as exc:
            s.dirty = True  # the reply may still come: never read it as the next step's
            self.drop_ws(s)
            raise CloudUnavailable(f"cloud unreachable at {self.base_url}: no reply within {self.timeout:.0f}s") from exc
        except ConnectionClosed as exc:
            s.ws = None
            code, reason = (exc.rcvd.code, exc.rcvd.reason) if exc.rcvd else (None, "")
            if code is not None and 4400 <= code < 4500:
                raise rejection(code - 4000, reason) from exc
            raise ConnectionLost(f"cloud unreachable at {self.base_url}: the stream dropped "
                                  f"(close code {code})") from exc
        except OSError as exc:
            s.ws = None
            raise ConnectionLost(f"cloud unreachable at {self.base_url}: {exc}") from exc
        if isinstance(reply, str):
            raise wire.WireError("the cloud sent a text message on the stream")
        self.count("received", reply)
        frame = wire.decode(reply, expect=(wire.Kind.HIDDEN, wire.Kind.ERROR))
        if frame.kind == wire.Kind.ERROR:
            if frame.status in (404, 410) or frame.status >= 500:
                self.drop_ws(s)  # the cloud closes the stream after these
            raise rejection(frame.status, frame.message)
        return frame.hidden

    async def aclose(self) -> None:
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self._http.aclose()
