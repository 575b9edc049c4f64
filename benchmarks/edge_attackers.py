"""The edge soak's attackers (benchmarks/edge_soak.py), run in their own process on 127.0.0.1:
slow bodies without a token, slow bodies with a token, and a mix (slow headers, mid-body
disconnects, oversized and malformed frames, connection churn, WebSocket streams dropped in the
middle of a message). Bounded: ATTACKERS connections, each reconnecting at most every TRICKLE s
(the slow bodies) or 0.2 s (the mix), for a set time."""

from __future__ import annotations

import asyncio
import base64
import os
import time

import httpx

ATTACKERS, TRICKLE = 128, 3.0  # attacker connections per phase; seconds per trickled byte
MODES = ("slow body, no token", "slow body, token", "mixed")


async def _slow_body(port: int, until: float, token: str | None, out: list) -> None:
    """Keep one slow-body connection open (reconnect when closed); note refusal-to-close delays."""
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.5)
            continue
        head = "POST /v1/sessions/x/forward HTTP/1.1\r\nhost: x\r\ncontent-length: 1000000\r\n"
        writer.write((head + (f"authorization: Bearer {token}\r\n" if token else "") + "\r\n").encode())
        refused = None
        try:
            while time.monotonic() < until:
                try:
                    data = await asyncio.wait_for(reader.read(4096), TRICKLE)
                    if not data:
                        break
                    refused = refused or time.monotonic()
                except TimeoutError:
                    writer.write(b"\0")
                    await writer.drain()
        except OSError:
            pass
        if refused is not None:  # still open at the phase's end: a lower bound
            out.append(min(time.monotonic(), until) - refused)
        writer.close()
        await asyncio.sleep(TRICKLE)  # a bounded reconnect rate: at most ATTACKERS / TRICKLE per second


async def _own_session(port: int, token: str) -> str:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        r = await http.post("/v1/sessions", json={}, headers={"Authorization": f"Bearer {token}"})
        return r.json()["session"]


async def _mixed(port: int, until: float, token: str, i: int, out: list) -> None:
    """Slow headers, mid-body disconnects, oversized and malformed frames, connection churn,
    WebSocket streams dropped half-way through a message (one session of its own, reused)."""
    kind, sid = i % 6, None
    while time.monotonic() < until:
        try:
            if kind == 5 and sid is None:
                sid = await _own_session(port, token)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            auth = f"authorization: Bearer {token}\r\n"
            if kind == 5:  # a stream dropped mid-message, no close frame
                key = base64.b64encode(os.urandom(16)).decode()
                writer.write((f"GET /v1/sessions/{sid}/stream HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\n"
                              f"connection: Upgrade\r\nsec-websocket-key: {key}\r\nsec-websocket-version: 13\r\n"
                              f"{auth}\r\n").encode())
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                writer.write(b"\x82\xfe\x10\x00" + os.urandom(4) + b"\0" * 2048)  # half of a 4 KiB message
                await writer.drain()
                await asyncio.sleep(0.2)
            elif kind == 0:  # slow headers
                for ch in b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-pad: " + b"a" * 64:
                    writer.write(bytes([ch]))
                    await writer.drain()
                    await asyncio.sleep(0.5)
                    if reader.at_eof() or time.monotonic() > until:
                        break
            elif kind == 1:  # a disconnect mid-body
                writer.write(f"POST /v1/sessions/x/forward HTTP/1.1\r\nhost: x\r\n{auth}content-length: 100000\r\n\r\n"
                             .encode() + b"\0" * 1000)
                await writer.drain()
                await asyncio.sleep(0.2)
            elif kind == 2:  # oversized
                writer.write(f"POST /v1/sessions/x/forward HTTP/1.1\r\nhost: x\r\n{auth}content-length: 999999999999\r\n\r\n"
                             .encode())
                await asyncio.wait_for(reader.read(4096), 5)
            elif kind == 3:  # malformed frame
                body = b"UMBW" + b"\xff" * 60
                writer.write(f"POST /v1/sessions/x/forward HTTP/1.1\r\nhost: x\r\n{auth}content-length: {len(body)}\r\n\r\n"
                             .encode() + body)
                await asyncio.wait_for(reader.read(4096), 5)
            writer.close()  # kind 4: churn, a connection and nothing else
            out.append(0.0)
            await asyncio.sleep(0.2)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, httpx.HTTPError, KeyError, ValueError):
            await asyncio.sleep(0.1)


def attack(port: int, seconds: float, mode: str, token: str, queue) -> None:
    """`token`: the attackers' own client token (its sessions count against its own caps)."""
    async def main() -> list:
        until, out = time.monotonic() + seconds, []
        if mode == "mixed":
            jobs = [_mixed(port, until, token, i, out) for i in range(ATTACKERS // 2)]
        else:
            jobs = [_slow_body(port, until, token if mode == "slow body, token" else None, out) for _ in range(ATTACKERS)]
        await asyncio.gather(*jobs)
        return out

    queue.put(asyncio.run(main()))
