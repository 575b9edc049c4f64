"""RemoteMiddle: the Middle protocol over the wire to the cloud service (server/).

Prefill, truncate, close and training forward/backward go over HTTP (httpx); small inference
steps (T <= stream_max_tokens after a prefill: decode steps and speculative verify frames, up to
40 positions by default) go over one WebSocket per session, so a step costs one message each way
and no HTTP round trip.

Every inference session keeps the encoder outputs it sent (as sent: in the wire dtype) with
their positions. When the cloud evicts or expires the session (410), does not know it (404: a
balancer sent it to another replica) or reports it out of sync (409), RemoteMiddle opens a new
cloud session and sends history + the new step as one prefill, asking only for the new step's
outputs; the caller never notices. A cancelled step leaves the cloud's cache length unknown, so
the next call first truncates it back (and the `start` check of every frame catches any
remaining race, which then re-prefills).

Several replicas behind a balancer (deploy/nginx/): every request of a session, the WebSocket
upgrade included, carries the header `X-Umbra-Session: <routing key>` (random, per session,
kept across re-prefills), which the balancer hashes to keep the session on one replica. When
the connection to the cloud fails mid-call (refused, reset, the stream dropped, or a gateway's
502/504) the step is retried once on a fresh cloud session with one re-prefill: behind a
balancer that lands on a live replica. A second failure in the same call raises
CloudUnavailable ("cloud unreachable ..."); there is never a fallback. Timeouts and other 5xx
raise at once. A 4xx is CloudRejected(status).

A truncate of a session the cloud holds in full costs no trip: the next step's frame is a
FORWARD_TRIM frame (umbra.wire) whose `start` tells the cloud where to cut, so truncate and
forward travel together (speculative decoding truncates after most verify frames). A cloud that
does not know FORWARD_TRIM answers 400; the client then truncates explicitly, resends, and sends
explicit truncates from then on."""

from __future__ import annotations

import asyncio
import json
import secrets
import ssl
from pathlib import Path
from typing import Callable

import httpx
import torch
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.protocol import State

from umbra import wire
from umbra.middle.remote_errors import ConnectionLost, OutOfSync, UnknownSession, rejection
from umbra.middle.remote_session import RemoteSession, WireStats
from umbra.errors import CloudRejected, CloudUnavailable, ConfigError, SessionError, SessionEvicted, ValidationError

_MAX_REPREFILLS = 3  # per call; more means the cloud keeps evicting us at once


ROUTING_HEADER = "X-Umbra-Session"  # the routing key a balancer hashes (deploy/nginx/)


class RemoteMiddle:
    def __init__(self, base_url: str, token: str, *, wire_dtype: torch.dtype = torch.float32,
                 verify: str | Path | None = None, hidden_size: int | None = None, timeout: float = 120.0,
                 connect_timeout: float = 10.0, stream_max_tokens: int = 40,
                 tap: Callable[[str, bytes], None] | None = None, layers: tuple[int, int] | None = None):
        """`verify`: None = system CAs, or a PEM file to trust (e.g. `umbra cloud cert`'s cert.pem).
        `hidden_size`: expected C, checked against the cloud (fetched from /v1/info when None).
        `layers`: the blocks [start, end) the client's split leaves to the cloud, checked too.
        `tap(direction, payload)`: sees every payload sent ("sent") or received ("received")."""
        if wire_dtype not in wire.FLOAT_DTYPES:
            raise ConfigError(f"wire_dtype must be float32, float16 or bfloat16, got {wire_dtype}")
        self.base_url = base_url.rstrip("/")
        self.wire_dtype, self.hidden_size = wire_dtype, hidden_size
        self.layers = None if layers is None else list(layers)
        self.stream_max_tokens, self.connect_timeout, self.timeout = stream_max_tokens, connect_timeout, timeout
        self.tap = tap
        self.stats = WireStats()
        self.info: dict | None = None
        self._auth = {"Authorization": f"Bearer {token}"}
        self._ssl = ssl.create_default_context(cafile=str(verify)) if verify else None
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=self._auth, verify=self._ssl or True,
                                       timeout=httpx.Timeout(timeout, connect=connect_timeout))
        self._sessions: dict[str, RemoteSession] = {}
        self._background: set[asyncio.Task] = set()
        self.trim_in_frame = True  # truncate with the next frame (FORWARD_TRIM); off once a cloud refuses it

    # -- plumbing ----------------------------------------------------------------------------------
    def _count(self, direction: str, payload: bytes) -> None:
        if direction == "sent":
            self.stats.bytes_sent += len(payload)
        else:
            self.stats.bytes_received += len(payload)
        if self.tap is not None and payload:
            self.tap(direction, payload)

    async def _request(self, method: str, path: str, content: bytes | None = None,
                       body: dict | None = None, s: RemoteSession | None = None) -> httpx.Response:
        if body is not None:
            content = json.dumps(body).encode()
        headers = {"Content-Type": wire.MEDIA_TYPE if body is None else "application/json"}
        if s is not None:
            headers[ROUTING_HEADER] = s.route
            s.trips += 1
        self._count("sent", content or b"")
        self.stats.http_requests += 1
        try:
            r = await self._http.request(method, path, content=content, headers=headers)
        except httpx.TransportError as exc:
            lost = CloudUnavailable if isinstance(exc, httpx.TimeoutException) else ConnectionLost
            raise lost(f"cloud unreachable at {self.base_url}: {type(exc).__name__} {exc}") from exc
        self._count("received", r.content)
        if r.status_code >= 400:
            try:
                detail = r.json()["detail"]
            except (ValueError, KeyError, TypeError):
                detail = r.text[:200]
            raise rejection(r.status_code, str(detail))
        return r

    def _frame_bytes(self, frame: wire.Frame) -> bytes:
        data = wire.encode(frame)
        limit = (self.info or {}).get("max_frame_bytes")
        if limit and len(data) > limit:
            raise CloudRejected(f"frame of {len(data)} bytes exceeds the cloud's limit of {limit} bytes; "
                                f"send fewer positions per call", 413)
        return data

    async def _exchange(self, s: RemoteSession, path: str, data: bytes, expect: wire.Kind) -> torch.Tensor:
        r = await self._request("POST", path, data, s=s)
        return wire.decode(r.content, expect=expect).tensors[0]

    async def connect(self) -> dict:
        """Fetch /v1/info once: protocol version, hidden size, the blocks it runs, limits (auth is
        checked here); ConfigError when the cloud does not fit this client."""
        if self.info is None:
            info = (await self._request("GET", "/v1/info")).json()
            if info.get("protocol") != wire.VERSION:
                raise ConfigError(f"cloud speaks wire protocol {info.get('protocol')}, this client {wire.VERSION}")
            if self.hidden_size is not None and info["hidden_size"] != self.hidden_size:
                raise ConfigError(f"cloud model has hidden size {info['hidden_size']}, the client {self.hidden_size}")
            if self.layers is not None and list(info.get("layers", self.layers)) != self.layers:
                raise ConfigError(f"the cloud runs blocks {info['layers']}, this client's split needs {self.layers} "
                                  f"(match the client's encoder/decoder blocks to the cloud)")
            self.hidden_size, self.info = info["hidden_size"], info
        return self.info

    async def __aenter__(self) -> "RemoteMiddle":
        await self.connect()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    def _session(self, handle: str) -> RemoteSession:
        s = self._sessions.get(handle)
        if s is None:
            raise SessionError("unknown session")
        return s

    # -- stream ------------------------------------------------------------------------------------
    async def _ws_open(self, s: RemoteSession) -> ClientConnection:
        url = "ws" + self.base_url[len("http"):] + f"/v1/sessions/{s.remote}/stream"
        s.trips += 1  # the upgrade is an HTTP request and its answer
        try:
            s.ws = await connect(url, additional_headers={**self._auth, ROUTING_HEADER: s.route},
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
        return s.ws

    def _drop_ws(self, s: RemoteSession) -> None:
        if s.ws is not None:
            task = asyncio.ensure_future(s.ws.close())
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            s.ws = None

    async def _ws_step(self, s: RemoteSession, data: bytes) -> torch.Tensor:
        if s.ws is not None and s.ws.state is not State.OPEN:  # the cloud closed it (idle, restart)
            s.ws = None
        ws = s.ws or await self._ws_open(s)
        self._count("sent", data)
        self.stats.ws_messages += 1
        s.trips += 1
        try:
            await ws.send(data)
            async with asyncio.timeout(self.timeout):
                reply = await ws.recv()
        except TimeoutError as exc:
            s.dirty = True  # the reply may still come: never read it as the next step's
            self._drop_ws(s)
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
        self._count("received", reply)
        frame = wire.decode(reply, expect=(wire.Kind.HIDDEN, wire.Kind.ERROR))
        if frame.kind == wire.Kind.ERROR:
            if frame.status in (404, 410) or frame.status >= 500:
                self._drop_ws(s)  # the cloud closes the stream after these
            raise rejection(frame.status, frame.message)
        return frame.hidden

    # -- inference steps ---------------------------------------------------------------------------
    async def _open_remote(self, s: RemoteSession) -> str:
        return (await self._request("POST", "/v1/sessions", body={"training": s.training}, s=s)).json()["session"]

    async def _resync(self, s: RemoteSession) -> None:
        """Truncate the cloud to what we know it should hold (after a truncate or a cancelled step)."""
        if s.dirty:  # the stream may still owe us a reply: start a fresh one
            self._drop_ws(s)
        s.dirty = s.trim = False
        if s.remote is not None:
            try:
                await self._request("POST", f"/v1/sessions/{s.remote}/truncate", body={"length": s.length}, s=s)
            except (SessionError, CloudRejected, ConnectionLost):
                s.remote = None  # gone or shorter than we think: re-prefill on the next step

    def _positions_per_frame(self, x: torch.Tensor, total: int) -> int:
        """How many positions of x [B,T,C] fit in one frame under the cloud's size limit."""
        limit = (self.info or {}).get("max_frame_bytes")
        if not limit:
            return x.shape[1]
        b = x.shape[0]
        room = limit - 256 - b * total  # header, shapes, text; key padding of up to `total` slots
        return max(1, room // (b * (x.shape[2] * x.element_size() + 8)))

    async def _send(self, s: RemoteSession, x, pos, key_padding, start: int, want: bool) -> torch.Tensor | None:
        """Run positions [start, start+T) through the cloud session, in as many frames as the
        cloud's size limit needs; returns the outputs if `want` (else asks for 1 per frame)."""
        t, outs = x.shape[1], []
        per = self._positions_per_frame(x, start + t)
        for a in range(0, t, per):
            b = min(t, a + per)
            kp = None if key_padding is None else key_padding[:, : start + b]
            trim = s.trim and a == 0  # the first frame carries the pending truncate
            frame = wire.forward_frame(x[:, a:b], pos[:, a:b], kp, start=start + a, tail=0 if want else 1, trim=trim)
            data = self._frame_bytes(frame)
            try:
                if want and start + a > 0 and t <= self.stream_max_tokens:  # a step (a verify frame), not a prefill
                    outs.append(await self._ws_step(s, data))
                else:
                    outs.append(await self._exchange(s, f"/v1/sessions/{s.remote}/forward", data, wire.Kind.HIDDEN))
            except (CloudRejected, CloudUnavailable):  # earlier frames (or this one) may have landed,
                s.dirty = True  # or the cloud dropped the session (413): check and roll back next time
                raise
            s.trim = False
        return torch.cat(outs, 1) if want else None

    async def _step(self, s: RemoteSession, x, pos, key_padding) -> torch.Tensor:
        t = x.shape[1]
        if key_padding is None and s.key_padding is not None:  # the mask so far, extended by T real slots
            key_padding = torch.cat([s.key_padding, torch.ones(x.shape[0], t, dtype=torch.bool)], 1)
        lost = forgotten = False
        for _ in range(_MAX_REPREFILLS):
            try:
                if s.remote is None:  # evicted, expired, unknown, out of sync or lost: rebuild the cloud's cache
                    self._drop_ws(s)
                    s.remote, s.trim = await self._open_remote(s), False
                    if s.chunks:
                        self.stats.reprefills += 1
                        hidden = torch.cat([h for h, _ in s.chunks], 1)
                        positions = torch.cat([p for _, p in s.chunks], 1)
                        await self._send(s, hidden, positions, key_padding, 0, want=False)
                return await self._send(s, x, pos, key_padding, s.length, want=True)
            except (SessionEvicted, OutOfSync, UnknownSession) as exc:
                s.remote, forgotten = None, isinstance(exc, UnknownSession)
            except CloudRejected as exc:
                if not (s.trim and exc.status == 400):
                    raise
                self.trim_in_frame = False  # a cloud without FORWARD_TRIM: truncate explicitly from now on
                await self._resync(s)
            except ConnectionLost:
                if lost:  # the retry failed too: the cloud is down, not one replica
                    raise
                lost, s.remote = True, None
        if forgotten:
            raise CloudRejected(f"the cloud did not know this session after every re-prefill: a balancer in front of "
                                f"several replicas must keep a session on one (hash the {ROUTING_HEADER} header)", 404)
        raise CloudRejected("the cloud evicted this session on every re-prefill; its KV budget is too small", 507)

    # -- the Middle protocol -----------------------------------------------------------------------
    async def open_session(self, *, training: bool = False) -> str:
        await self.connect()
        handle = secrets.token_hex(8)
        s = RemoteSession(training, route=secrets.token_hex(12))
        s.remote = await self._open_remote(s)
        self._sessions[handle] = s
        return handle

    async def forward(self, hidden: torch.Tensor, positions: torch.Tensor, session: str,
                      key_padding: torch.Tensor | None = None) -> torch.Tensor:
        s = self._session(session)
        x = hidden.detach().to("cpu", self.wire_dtype, copy=True).contiguous()  # kept for re-prefills
        pos = positions.detach().to("cpu", torch.int64, copy=True).contiguous()
        kp = None if key_padding is None else key_padding.detach().to("cpu", torch.bool).contiguous()
        async with s.lock:
            if s.training:
                data = self._frame_bytes(wire.forward_frame(x, pos, kp))
                try:
                    out = await self._exchange(s, f"/v1/sessions/{s.remote}/forward", data, wire.Kind.HIDDEN)
                except (SessionEvicted, UnknownSession):  # stateless until backward: open a new one and retry
                    s.remote = await self._open_remote(s)
                    out = await self._exchange(s, f"/v1/sessions/{s.remote}/forward", data, wire.Kind.HIDDEN)
            else:
                if s.dirty:
                    await self._resync(s)
                try:
                    out = await self._step(s, x, pos, kp)
                except asyncio.CancelledError:
                    s.dirty = True
                    self._drop_ws(s)
                    raise
                s.dirty = False  # the whole step landed: the cloud holds exactly history + step
                s.append(x, pos)
                if kp is not None:
                    s.key_padding = kp
                elif s.key_padding is not None:
                    s.key_padding = torch.cat([s.key_padding, torch.ones(x.shape[0], x.shape[1], dtype=torch.bool)], 1)
        return out.to(hidden.device, hidden.dtype)

    async def backward(self, grad_out: torch.Tensor, session: str) -> torch.Tensor:
        s = self._session(session)
        g = grad_out.detach().to("cpu", self.wire_dtype).contiguous()
        async with s.lock:
            data = self._frame_bytes(wire.backward_frame(g))
            try:
                grad = await self._exchange(s, f"/v1/sessions/{s.remote}/backward", data, wire.Kind.GRAD)
            except (SessionEvicted, UnknownSession) as exc:
                s.remote = await self._open_remote(s)
                raise CloudRejected(f"training session expired on the cloud; redo the forward ({exc})", 410) from exc
        return grad.to(grad_out.device, grad_out.dtype)

    async def truncate(self, session: str, length: int) -> None:
        s = self._session(session)
        async with s.lock:
            if s.training:
                raise ValidationError("truncate applies to inference sessions only")
            if not 0 <= length <= s.length:
                raise ValidationError(f"cannot truncate a session of {s.length} positions to {length}")
            if length == s.length:
                return
            s.keep(length)
            if self.trim_in_frame and s.remote is not None and not s.dirty:
                s.trim = True  # cut by the next frame (FORWARD_TRIM): no trip of its own
            else:
                await self._resync(s)  # also clears a pending `dirty`

    def round_trips(self, session: str) -> int:
        """Round trips this session has made so far (open, every forward frame, stream upgrade,
        truncate and re-prefill; see remote_session.RemoteSession.trips)."""
        return self._session(session).trips

    async def close(self, session: str) -> None:
        s = self._sessions.pop(session, None)
        if s is None:
            raise SessionError("unknown session")
        self._drop_ws(s)
        if s.remote is not None:
            try:
                await self._request("DELETE", f"/v1/sessions/{s.remote}", s=s)
            except (SessionError, UnknownSession):  # already evicted or expired
                pass

    async def aclose(self) -> None:
        for handle in list(self._sessions):
            try:
                await self.close(handle)
            except (CloudUnavailable, CloudRejected):
                pass
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self._http.aclose()
