"""RemoteMiddle: the Middle protocol over the wire to the cloud service (server/), sessions
kept in step with the cloud's; the transport (HTTP, the stream, /v1/info, byte counts) is
CloudLink (cloud_link.py).

An inference session costs no trip to open: its first frame opens it (POST
/v1/sessions/forward, the cloud's id in the reply's X-Umbra-Session-Id header), so the open and
the prefill travel together. Later prefills go over HTTP; small steps (T <= stream_max_tokens
after a prefill: decode steps and speculative verify frames, up to 40 positions by default) go
over one WebSocket per session, so a step costs one message each way. A step that finds no
stream open (the first after a prefill, or the first after the cloud closed an idle stream) goes
over HTTP and, once it is answered (the session is there), the upgrade runs in the background
while the next steps go over HTTP until it is up; no step waits for an upgrade: a warm session
whose stream was closed pays one trip for its next edit. A cloud that does not
advertise `open_in_frame` in /v1/info gets an explicit open (POST /v1/sessions) first.

Every inference session keeps the encoder outputs it sent (as sent: in the wire dtype) with
their positions. When the cloud evicts or expires the session (410), does not know it (404: a
balancer sent it to another replica) or reports it out of sync (409), RemoteMiddle opens a new
cloud session with history + the new step as one frame (more where the cloud's size limit
needs), asking only for the new step's outputs; the caller never notices. A cancelled step
leaves the cloud's cache length unknown, so the next call first truncates it back (and the
`start` check of every frame catches any remaining race, which then re-prefills).

When the connection to the cloud fails mid-call (refused, reset, the stream dropped, or a
gateway's 502/504) the step is retried once on a fresh cloud session with one re-prefill: behind
a balancer that lands on a live replica. A second failure in the same call raises
CloudUnavailable ("cloud unreachable ..."); there is never a fallback. Timeouts and other 5xx
raise at once. A 4xx is CloudRejected(status).

A truncate of a session the cloud holds in full costs no trip: the next step's frame is a
FORWARD_TRIM frame (umbra.wire) whose `start` tells the cloud where to cut, so truncate and
forward travel together (speculative decoding truncates after most verify frames). A cloud that
does not know FORWARD_TRIM answers 400; the client then truncates explicitly, resends, and sends
explicit truncates from then on. So a warm session pays one trip for an edit's prefill, and a
new one too."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path
from typing import Callable

import torch

from umbra import wire
from umbra.errors import CloudRejected, CloudUnavailable, ConfigError, SessionError, SessionEvicted, ValidationError
from umbra.middle.cloud_link import ROUTING_HEADER, CloudLink
from umbra.middle.remote_errors import ConnectionLost, OutOfSync, UnknownSession
from umbra.middle.remote_session import RemoteSession

__all__ = ["ROUTING_HEADER", "RemoteMiddle"]

_MAX_REPREFILLS = 3  # per call; more means the cloud keeps evicting us at once


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
        self.wire_dtype, self.hidden_size = wire_dtype, hidden_size
        self.layers = None if layers is None else list(layers)
        self.stream_max_tokens = stream_max_tokens
        self.link = CloudLink(base_url, token, verify=verify, timeout=timeout, connect_timeout=connect_timeout, tap=tap)
        self._sessions: dict[str, RemoteSession] = {}
        self.trim_in_frame = True  # truncate with the next frame (FORWARD_TRIM); off once a cloud refuses it
        self.open_in_frame = False  # open with the first frame (POST /v1/sessions/forward); per /v1/info

    base_url = property(lambda self: self.link.base_url)
    stats = property(lambda self: self.link.stats)  # WireStats
    info = property(lambda self: self.link.info)

    @property
    def tap(self) -> Callable[[str, bytes], None] | None:
        return self.link.tap

    @tap.setter
    def tap(self, tap: Callable[[str, bytes], None] | None) -> None:
        self.link.tap = tap

    async def connect(self) -> dict:
        """Fetch /v1/info once: protocol version, hidden size, the blocks it runs, limits (auth is
        checked here); ConfigError when the cloud does not fit this client."""
        if self.link.info is None:
            info = await self.link.fetch_info()
            if self.hidden_size is not None and info["hidden_size"] != self.hidden_size:
                raise ConfigError(f"cloud model has hidden size {info['hidden_size']}, the client {self.hidden_size}")
            if self.layers is not None and list(info.get("layers", self.layers)) != self.layers:
                raise ConfigError(f"the cloud runs blocks {info['layers']}, this client's split needs {self.layers} "
                                  f"(match the client's encoder/decoder blocks to the cloud)")
            self.hidden_size, self.link.info = info["hidden_size"], info
            self.open_in_frame = bool(info.get("open_in_frame"))
        return self.link.info

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

    # -- inference steps ---------------------------------------------------------------------------
    async def _open_remote(self, s: RemoteSession) -> str:
        return (await self.link.request("POST", "/v1/sessions", body={"training": s.training}, s=s)).json()["session"]

    async def _resync(self, s: RemoteSession) -> None:
        """Truncate the cloud to what we know it should hold (after a truncate or a cancelled step)."""
        if s.dirty:  # the stream may still owe us a reply: start a fresh one
            self.link.drop_ws(s)
        s.dirty = s.trim = False
        if s.remote is not None:
            try:
                await self.link.request("POST", f"/v1/sessions/{s.remote}/truncate", body={"length": s.length}, s=s)
            except (SessionError, CloudRejected, ConnectionLost):
                s.remote = None  # gone or shorter than we think: re-prefill on the next step

    def _positions_per_frame(self, x: torch.Tensor, total: int) -> int:
        """How many positions of x [B,T,C] fit in one frame under the cloud's size limit."""
        limit = (self.link.info or {}).get("max_frame_bytes")
        if not limit:
            return x.shape[1]
        b = x.shape[0]
        room = limit - 256 - b * total  # header, shapes, text; key padding of up to `total` slots
        return max(1, room // (b * (x.shape[2] * x.element_size() + 8)))

    async def _send(self, s: RemoteSession, x, pos, key_padding, start: int, keep: int) -> torch.Tensor | None:
        """Run positions [start, start+T) through the cloud session, in as many frames as the
        cloud's size limit needs; returns the outputs of the last `keep` positions (None if 0).
        With no cloud session yet (s.remote None) the first frame opens one."""
        t, outs = x.shape[1], []
        per = self._positions_per_frame(x, start + t)
        for a in range(0, t, per):
            b = min(t, a + per)
            wanted = max(0, b - max(a, t - keep))  # outputs of this frame the caller keeps (its last ones)
            tail = 1 if not wanted else 0 if wanted == b - a else wanted
            kp = None if key_padding is None else key_padding[:, : start + b]
            trim = s.trim and a == 0  # the first frame carries the pending truncate
            frame = wire.forward_frame(x[:, a:b], pos[:, a:b], kp, start=start + a, tail=tail, trim=trim)
            data = self.link.frame_bytes(frame)
            try:
                if s.remote is None:  # a new cloud session and this frame in one trip
                    out = await self.link.open_with(s, data)
                elif keep and start + a > 0 and t <= self.stream_max_tokens and self.link.stream_open(s):
                    out = await self.link.ws_step(s, data)  # a step (a verify frame), not a prefill
                else:
                    out = await self.link.exchange(s, f"/v1/sessions/{s.remote}/forward", data, wire.Kind.HIDDEN)
                    if keep and start + a > 0 and t <= self.stream_max_tokens:  # a step with no stream open:
                        self.link.open_beside(s)  # it went over HTTP; the upgrade follows (no trip of its own)
            except (CloudRejected, CloudUnavailable):  # earlier frames (or this one) may have landed,
                s.dirty = True  # or the cloud dropped the session (413): check and roll back next time
                raise
            s.trim = False
            if wanted:
                outs.append(out)
        return torch.cat(outs, 1) if keep else None

    async def _step(self, s: RemoteSession, x, pos, key_padding) -> torch.Tensor:
        t = x.shape[1]
        if key_padding is None and s.key_padding is not None:  # the mask so far, extended by T real slots
            key_padding = torch.cat([s.key_padding, torch.ones(x.shape[0], t, dtype=torch.bool)], 1)
        lost = forgotten = False
        for _ in range(_MAX_REPREFILLS):
            try:
                if s.remote is None:  # new, evicted, expired, unknown, out of sync or lost: (re)build the cloud's cache
                    self.link.drop_ws(s)
                    s.trim = False
                    if not self.open_in_frame:
                        s.remote = await self._open_remote(s)
                    if s.chunks:  # history and the step together, outputs of the step only
                        self.stats.reprefills += 1
                        hidden = torch.cat([h for h, _ in s.chunks] + [x], 1)
                        positions = torch.cat([p for _, p in s.chunks] + [pos], 1)
                        return await self._send(s, hidden, positions, key_padding, 0, keep=t)
                return await self._send(s, x, pos, key_padding, s.length, keep=t)
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
        """No trip for an inference session on a cloud that opens with the first frame."""
        await self.connect()
        handle = secrets.token_hex(8)
        s = RemoteSession(training, route=secrets.token_hex(12))
        if training or not self.open_in_frame:
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
                data = self.link.frame_bytes(wire.forward_frame(x, pos, kp))
                try:
                    out = await self.link.exchange(s, f"/v1/sessions/{s.remote}/forward", data, wire.Kind.HIDDEN)
                except (SessionEvicted, UnknownSession):  # stateless until backward: open a new one and retry
                    s.remote = await self._open_remote(s)
                    out = await self.link.exchange(s, f"/v1/sessions/{s.remote}/forward", data, wire.Kind.HIDDEN)
            else:
                if s.dirty:
                    await self._resync(s)
                try:
                    out = await self._step(s, x, pos, kp)
                except asyncio.CancelledError:
                    s.dirty = True
                    self.link.drop_ws(s)
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
            data = self.link.frame_bytes(wire.backward_frame(g))
            try:
                grad = await self.link.exchange(s, f"/v1/sessions/{s.remote}/backward", data, wire.Kind.GRAD)
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
        """Round trips this session has made so far (every forward frame, the open where it is
        its own request, stream upgrade, truncate and re-prefill; see RemoteSession.trips)."""
        return self._session(session).trips

    async def close(self, session: str) -> None:
        s = self._sessions.pop(session, None)
        if s is None:
            raise SessionError("unknown session")
        self.link.drop_ws(s)
        if s.remote is not None:
            try:
                await self.link.request("DELETE", f"/v1/sessions/{s.remote}", s=s)
            except (SessionError, UnknownSession):  # already evicted or expired
                pass

    async def aclose(self) -> None:
        for handle in list(self._sessions):
            try:
                await self.close(handle)
            except (CloudUnavailable, CloudRejected):
                pass
        await self.link.aclose()
