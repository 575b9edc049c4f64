"""CloudLink (umbra/middle/cloud_link.py) against the real cloud service (uvicorn on a loopback
socket): a session's requests count its round trips and every payload's bytes, the first frame
opens a session in one request, the stream serves the id it returned, and a session the cloud
no longer holds fails the stream step as UnknownSession with the stream dropped. Through
RemoteMiddle: a warm session whose stream the cloud closed after idle pays one trip for its next
edit (over HTTP, the upgrade after it; the outputs those of the in-process middle), and an
opening frame cancelled in flight leaves no session on the cloud (instead of holding one of the
client's 64 until idle expiry): after its answer's headers the client knows the id and goes on
with it or closes it; before them the client waits for the answer in the background and closes
the session it names, also when the answer was already on its way (behind a slow link) as the
caller left."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import torch

_REPO = str(Path(__file__).resolve().parents[2])
if sys.path[0] != _REPO:  # the real `server` package, not tests/server
    sys.path.insert(0, _REPO)

from benchmarks.wan_link import LinkConfig, WanProxy  # noqa: E402
from server.launch import local_cloud_thread  # noqa: E402
from umbra import wire  # noqa: E402
from umbra.middle.cloud_link import SESSION_ID_HEADER, CloudLink  # noqa: E402
from umbra.middle.local import LocalMiddle  # noqa: E402
from umbra.middle.remote import RemoteMiddle  # noqa: E402
from umbra.model.loader import load_middle  # noqa: E402
from umbra.middle.remote_errors import UnknownSession  # noqa: E402
from umbra.middle.remote_session import RemoteSession  # noqa: E402


async def test_open_with_the_first_frame_then_stream_and_a_dropped_session(tiny_model_dirs):
    h, pos = torch.randn(1, 6, 64, generator=torch.Generator().manual_seed(1)), torch.arange(6)[None]
    with local_cloud_thread(tiny_model_dirs["llama"], settings={"torch_threads": 1}) as cloud:
        link = CloudLink(cloud.base_url, cloud.token, verify=None, timeout=30, connect_timeout=5, tap=None)
        seen = []
        link.tap = lambda direction, payload: seen.append((direction, len(payload)))
        try:
            info = await link.fetch_info()
            assert info["open_in_frame"] is True and info["hidden_size"] == 64
            s = RemoteSession(False, route="r" * 24)
            out = await link.open_with(s, link.frame_bytes(wire.forward_frame(h[:, :5], pos[:, :5], start=0)))
            assert out.shape == (1, 5, 64) and s.remote and s.trips == 1  # open + forward: one trip
            step = await link.ws_step(s, link.frame_bytes(wire.forward_frame(h[:, 5:], pos[:, 5:], start=5)))
            assert step.shape == (1, 1, 64) and s.trips == 3 and s.ws is not None  # upgrade + step
            assert link.stats.http_requests == 2 and link.stats.ws_messages == 1
            assert link.stats.bytes_sent == sum(n for d, n in seen if d == "sent") > 0
            assert link.stats.bytes_received == sum(n for d, n in seen if d == "received") > 0
            await link.request("DELETE", f"/v1/sessions/{s.remote}")  # no session: no trip of s
            assert s.trips == 3
            with pytest.raises(UnknownSession):
                await link.ws_step(s, link.frame_bytes(wire.forward_frame(h[:, 5:], pos[:, 5:], start=6)))
            assert s.ws is None and s.trips == 4
        finally:
            await link.aclose()



async def _until(condition, what: str, bound: float = 120.0) -> None:
    """Wait for a condition of the real parts (a bound only against a hang, never an assertion on speed)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + bound
    while not await condition():
        assert loop.time() < end, f"never: {what}"
        await asyncio.sleep(0.005)


async def test_a_stream_closed_after_idle_costs_the_next_edit_one_trip(tiny_model_dirs):
    d = tiny_model_dirs["llama"]
    gen = torch.Generator().manual_seed(3)
    h, pos = torch.randn(1, 24, 64, generator=gen), torch.arange(24)[None]
    local = LocalMiddle(load_middle(d))
    here = await local.open_session()
    with local_cloud_thread(d, settings={"torch_threads": 1, "ws_idle_seconds": 1.0}) as cloud:
        async with RemoteMiddle(cloud.base_url, cloud.token) as middle:
            sid = await middle.open_session()
            s = middle._sessions[sid]

            async def both(a: int, b: int) -> None:
                got = await middle.forward(h[:, a:b], pos[:, a:b], sid)
                want = await local.forward(h[:, a:b], pos[:, a:b], here)
                assert torch.allclose(got, want, atol=1e-5), (a, b)

            async def edit(cut: int, a: int, b: int) -> None:  # a keystroke: cut back, then new positions
                await middle.truncate(sid, cut)
                await local.truncate(here, cut)
                await both(a, b)

            await both(0, 12)  # open + prefill: one trip
            await both(12, 13)  # a decode step: over HTTP, the upgrade after it
            assert middle.round_trips(sid) == 2
            await _until(lambda: _true(middle.link.stream_open(s)), "the stream opened after the step")
            sent = middle.stats.ws_messages
            await both(13, 14)  # over the stream
            assert middle.round_trips(sid) == 3 and middle.stats.ws_messages == sent + 1
            await _until(lambda: _true(not middle.link.stream_open(s)), "the cloud closed the idle stream")
            await edit(12, 12, 16)  # a warm session, its stream closed: one trip for the edit
            assert middle.round_trips(sid) == 4
            await _until(lambda: _true(middle.link.stream_open(s)), "the stream reopened after the edit")
            await both(16, 17)  # the next step over the new stream
            assert middle.round_trips(sid) == 5 and middle.stats.ws_messages == sent + 2


async def _true(value: bool) -> bool:
    return value


def _metric(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M))


async def test_an_opening_frame_cancelled_in_flight_leaves_no_session_on_the_cloud():
    """The default model's middle blocks, so that a long prefill takes a while: the client
    cancels its opening frame once the cloud has opened the session (and is still computing),
    and the session is closed, not left to expire (it would have held one of the client's 64 for
    `session_idle_seconds`, here 900 s)."""
    model = Path(_REPO) / "models" / "umbra-code-tiny"
    with local_cloud_thread(model, settings={"torch_threads": 1}) as cloud:
        async with RemoteMiddle(cloud.base_url, cloud.token) as middle:
            length, width = middle.info["max_seq_len"], middle.info["hidden_size"]
            h = torch.randn(1, length, width, generator=torch.Generator().manual_seed(0))
            pos = torch.arange(length)[None]

            async def metrics() -> str:
                return (await middle.link.request("GET", "/metrics")).text

            unknown = 0  # cancels before the answer's headers: the client never learnt the id
            for attempt in range(6):  # until one is cancelled while the cloud computes it
                opened = _metric(await metrics(), "umbra_cloud_sessions_opened_total")
                sid = await middle.open_session()  # no trip: the frame opens it
                task = asyncio.ensure_future(middle.forward(h, pos, sid))

                async def open_on_cloud() -> bool:
                    return task.done() or _metric(await metrics(), "umbra_cloud_sessions_opened_total") > opened

                await _until(open_on_cloud, "the cloud opened the session")
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    if middle._sessions[sid].remote is None:  # unclaimed: closed, never adopted
                        unknown += 1
                        await _until(lambda: _gone(metrics), "the session whose opener left was closed")
                        text = await metrics()
                        assert _metric(text, "umbra_cloud_sessions_opened_total") == opened + 1
                        assert _metric(text, "umbra_cloud_sessions_expired_total") == 0  # not by idle expiry
                    # else the answer's headers were in: the client knows the session (cut back next)
                    await middle.forward(h[:, :8], pos[:, :8], sid)  # the client's session goes on
                    assert _metric(await metrics(), "umbra_cloud_sessions_active") == 1
                await middle.close(sid)
                assert await _gone(metrics)  # nothing left behind, whichever way it went
                if unknown:
                    break
            assert unknown == 1


async def _gone(metrics) -> bool:
    return _metric(await metrics(), "umbra_cloud_sessions_active") == 0


async def test_an_opening_frame_cancelled_while_its_answer_crosses_the_link_is_closed(tiny_model_dirs):
    """The window the cloud cannot see: its answer has left (it checked that the client was still
    there) and is crossing a 1 s link when the caller cancels. The client never read the id, so
    the cloud holds a session nobody claims: the client waits for that answer in the background
    and closes the session it names (no idle expiry), and never adopts it."""
    h, pos = torch.randn(1, 6, 64, generator=torch.Generator().manual_seed(2)), torch.arange(6)[None]
    with local_cloud_thread(tiny_model_dirs["llama"], settings={"torch_threads": 1}) as cloud, \
            WanProxy(("127.0.0.1", urlsplit(cloud.base_url).port), LinkConfig(one_way_ms=1000)) as link:
        async with httpx.AsyncClient(base_url=cloud.base_url,  # straight to the cloud, not over the link
                                     headers={"Authorization": f"Bearer {cloud.token}"}) as direct:
            async def metric(name: str) -> float:
                return _metric((await direct.get("/metrics")).text, name)

            async with RemoteMiddle(link.url(cloud.base_url), cloud.token) as middle:
                sid = await middle.open_session()
                sent = await metric("umbra_cloud_bytes_out_total")
                task = asyncio.ensure_future(middle.forward(h, pos, sid))

                async def answered() -> bool:  # the cloud's answer has left it
                    return await metric("umbra_cloud_bytes_out_total") > sent

                await _until(answered, "the cloud answered the opening frame")
                assert await metric("umbra_cloud_sessions_active") == 1
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert middle._sessions[sid].remote is None  # the answer had not reached the client

                async def closed() -> bool:
                    return await metric("umbra_cloud_sessions_active") == 0

                await _until(closed, "the client closed the session it never claimed", bound=60.0)
                assert await metric("umbra_cloud_sessions_expired_total") == 0  # not by idle expiry
                assert middle._sessions[sid].remote is None  # the late answer was not adopted
                out = await middle.forward(h, pos, sid)  # the client's session goes on: a new one
                assert out.shape == (1, 6, 64) and await metric("umbra_cloud_sessions_opened_total") == 2


async def test_a_client_whose_connection_is_gone_before_its_opening_answer_leaves_no_session():
    """The cloud's own half (server/routes/sessions.py): a client that is gone — its connection
    closed while the cloud computes its opening frame, as a process that dies does — never learns
    the id, so the cloud closes the session itself once the frame is computed. A raw HTTP client
    (not CloudLink, which would wait for the answer and close it): its cancelled request closes
    the connection."""
    model = Path(_REPO) / "models" / "umbra-code-tiny"
    with local_cloud_thread(model, settings={"torch_threads": 1}) as cloud:
        async with RemoteMiddle(cloud.base_url, cloud.token) as middle, \
                httpx.AsyncClient(base_url=cloud.base_url, headers={"Authorization": f"Bearer {cloud.token}"},
                                  timeout=120) as raw:
            length, width = middle.info["max_seq_len"], middle.info["hidden_size"]
            h = torch.randn(1, length, width, generator=torch.Generator().manual_seed(4))
            frame = wire.encode(wire.forward_frame(h, torch.arange(length)[None], start=0))

            async def metric(name: str) -> float:
                return _metric((await raw.get("/metrics")).text, name)

            left = 0  # sessions of attempts whose answer had left before the cancel (nobody can close them)
            for attempt in range(6):  # until one is cancelled while the cloud computes it
                opened = await metric("umbra_cloud_sessions_opened_total")
                sent = await metric("umbra_cloud_bytes_out_total")
                task = asyncio.ensure_future(raw.post("/v1/sessions/forward", content=frame,
                                                      headers={"Content-Type": wire.MEDIA_TYPE}))

                async def open_on_cloud() -> bool:
                    return task.done() or await metric("umbra_cloud_sessions_opened_total") > opened

                await _until(open_on_cloud, "the cloud opened the session")
                if task.done():  # answered before the cancel: close it and try again
                    await raw.delete(f"/v1/sessions/{task.result().headers[SESSION_ID_HEADER]}")
                    continue
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task

                async def settled() -> bool:  # closed by the cloud, or answered before the client left
                    return (await metric("umbra_cloud_sessions_active") == left
                            or await metric("umbra_cloud_bytes_out_total") > sent)

                await _until(settled, "the cloud closed the session of the client that left")
                if await metric("umbra_cloud_bytes_out_total") > sent:  # the answer had left (a loaded
                    left += 1  # machine polls slowly): the window CloudLink covers, not this one
                    continue
                assert await metric("umbra_cloud_sessions_expired_total") == 0  # not by idle expiry
                break
            else:
                pytest.fail("every opening frame was answered before it could be cancelled")
