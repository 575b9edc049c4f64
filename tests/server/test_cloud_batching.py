"""Continuous batching on the real service: concurrent sessions over their streams equal the same
sessions run one at a time, bit for bit, and their steps really were batched; per-client quotas
evict only the client's own sessions, least recently used first."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
import torch
from websockets.asyncio.client import connect

from cloud_helpers import C, auth, metric, open_session
from server.launch import local_cloud_thread
from umbra import wire
from umbra.middle.local import LocalMiddle
from umbra.model.batch_decode import DecodeStep, decode_slab, slab_widths
from umbra.model.loader import load_middle

SESSIONS, STEPS, PREFILL = 12, 6, 5


def frames(i: int) -> list[bytes]:
    g = torch.Generator().manual_seed(100 + i)
    out = [wire.encode(wire.forward_frame(torch.randn(1, PREFILL + i, C, generator=g),
                                          torch.arange(PREFILL + i)[None], start=0))]
    for s in range(STEPS):
        pos = PREFILL + i + s
        out.append(wire.encode(wire.forward_frame(torch.randn(1, 1, C, generator=g), torch.tensor([[pos]]),
                                                  start=pos)))
    return out


async def run_session(cloud, sid: str, i: int) -> list[bytes]:
    url = cloud.base_url.replace("http", "ws") + f"/v1/sessions/{sid}/stream"
    async with connect(url, additional_headers=auth(cloud.token), max_size=None) as ws:
        replies = []
        for f in frames(i):
            await ws.send(f)
            replies.append(await ws.recv())
    return replies


@pytest.mark.parametrize("sessions,widths", [(SESSIONS, dict(decode_width=8, decode_solo=False)),
                                             (20, dict(decode_min_width=16, decode_width=32, decode_solo=False))])
def test_concurrent_sessions_equal_sequential_ones_bit_for_bit(model_dir, sessions, widths):
    """Sessions in lockstep: each round the compute worker is held (a job waiting on a gate) while
    every session sends its step, and released once all of them are pending — so the round runs
    as one batch whatever the machine's speed, and each reply must equal the session run alone.
    With a ladder of widths, a session alone runs in the smallest slab and the round in the widest
    the start-up check kept (`decode_solo` off: a lone step padded to it, as on an accelerator)."""
    with local_cloud_thread(model_dir, settings=dict(torch_threads=1, **widths)) as cloud, \
            httpx.Client(base_url=cloud.base_url, timeout=30) as http:
        worker = cloud.server.config.app.state.cloud.worker
        kept = cloud.server.config.app.state.cloud.manager.limits.decode_widths
        sids = [open_session(http, cloud.token) for _ in range(2 * sessions)]
        sequential = [asyncio.run(run_session(cloud, sids[i], i)) for i in range(sessions)]
        before = http.get("/metrics", headers=auth(cloud.token)).text

        async def pending() -> float:
            async with httpx.AsyncClient(base_url=cloud.base_url, timeout=30) as h:
                return metric((await h.get("/metrics", headers=auth(cloud.token))).text, "umbra_cloud_decode_pending")

        async def lockstep() -> list[list[bytes]]:
            url = cloud.base_url.replace("http", "ws") + "/v1/sessions/{}/stream"
            streams = [await connect(url.format(sids[sessions + i]), additional_headers=auth(cloud.token),
                                     max_size=None) for i in range(sessions)]
            sent = [frames(i) for i in range(sessions)]
            replies: list[list[bytes]] = [[] for _ in range(sessions)]
            try:
                for k in range(STEPS + 1):
                    gate, running = threading.Event(), threading.Event()
                    held = worker.submit(lambda: (running.set(), gate.wait(30)))
                    if not await asyncio.to_thread(running.wait, 30):  # the worker is held from here on
                        raise AssertionError("the compute worker never picked up the holding job")
                    try:
                        for ws, fs in zip(streams, sent):
                            await ws.send(fs[k])
                        if k > 0:  # decode steps: wait until every session's step is queued
                            for _ in range(600):
                                if await pending() == sessions:
                                    break
                                await asyncio.sleep(0.05)
                            else:
                                raise AssertionError(f"round {k}: {await pending()} of {sessions} steps pending")
                    finally:
                        gate.set()
                    held.result(timeout=30)
                    for r, ws in zip(replies, streams):
                        r.append(await ws.recv())
            finally:
                for ws in streams:
                    await ws.close()
            return replies

        concurrent = asyncio.run(lockstep())
        after = http.get("/metrics", headers=auth(cloud.token)).text
    assert all(wire.decode(r).kind == wire.Kind.HIDDEN for rs in concurrent for r in rs)
    assert concurrent == sequential  # every reply's bytes
    steps = metric(after, "umbra_cloud_decode_batched_steps_total") - metric(before, "umbra_cloud_decode_batched_steps_total")
    slabs = metric(after, "umbra_cloud_decode_slabs_total") - metric(before, "umbra_cloud_decode_slabs_total")
    assert steps == sessions * STEPS
    floor = widths.get("decode_min_width")  # none asked: on the CPU the narrowest slab that agrees
    assert kept[0] == floor if floor else kept[0] in slab_widths(1, widths["decode_width"])
    assert slabs == STEPS * -(-sessions // kept[-1])  # each round: its pending steps in ceil(n / widest) slabs


@pytest.mark.server_errors_expected  # a 503 (the budget is held by other clients) on purpose
def test_quota_evicts_the_clients_own_lru_sessions_only(model_dir):
    session_bytes = 3 * 2 * 2 * 16 * 4 * 128  # one row at the minimum capacity
    settings = dict(kv_budget_bytes=5 * session_bytes, kv_client_quota_bytes=3 * session_bytes, torch_threads=1)
    with local_cloud_thread(model_dir, settings=settings) as cloud, \
            httpx.Client(base_url=cloud.base_url, timeout=30) as http:
        other = cloud.add_token("other")

        def fwd(token, sid, t=2, start=0, rows=1):
            body = wire.encode(wire.forward_frame(torch.randn(rows, t, C),
                                                  torch.arange(start, start + t).expand(rows, t).contiguous(),
                                                  start=start))
            return http.post(f"/v1/sessions/{sid}/forward", content=body, headers=auth(token))

        b1, b2 = open_session(http, other), open_session(http, other)
        assert fwd(other, b1).status_code == fwd(other, b2).status_code == 200
        a = [open_session(http, cloud.token) for _ in range(4)]
        for sid in a[:3]:
            assert fwd(cloud.token, sid).status_code == 200
        assert fwd(cloud.token, a[0], t=1, start=2).status_code == 200  # a0 is now the client's newest
        # a3 takes the client past its quota: its own LRU session (a1) goes, the other client's stay
        assert fwd(cloud.token, a[3]).status_code == 200
        assert fwd(cloud.token, a[1], t=1, start=2).status_code == 410
        assert fwd(other, b1, t=1, start=2).status_code == 200 and fwd(other, b2, t=1, start=2).status_code == 200
        assert fwd(cloud.token, a[0], t=1, start=3).status_code == 200
        # the other client needs 3 sessions' worth: even all of its own would not make room, and this
        # client's are not its to take: 503, and nothing was evicted in vain
        b3 = open_session(http, other)
        r = fwd(other, b3, rows=3)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert fwd(other, b1, t=1, start=3).status_code == 200 and fwd(other, b2, t=1, start=3).status_code == 200
        for sid in (a[0], a[2], a[3]):
            assert fwd(cloud.token, sid, t=1, start=4 if sid == a[0] else 2).status_code == 200


def test_sessions_in_step_share_a_slab_and_a_lone_session_never_waits(model_dir):
    """With a gather wait far longer than the test (decode_gather_ms = 60 s), a hold that waited for
    nobody would stall it: a lone session's steps (one session after another, each stream closed
    before the next opens) must never be held, and sessions whose clients answer every reply at
    once must be held for one another, even when client i answers i x 10 ms late (steps run as they
    come would take a slab each: n per round). Their first steps may split over slabs (nobody has
    been answered yet), leaving sessions a step apart; after that every slab takes one step of
    each: at most `steps + n - 1` slabs. Every reply is still bit for bit the session's own."""
    n, steps = 4, 16
    settings = dict(torch_threads=1, decode_width=8, decode_gather_ms=60_000, decode_solo=False)

    def decode_frames(i: int) -> list[bytes]:
        g = torch.Generator().manual_seed(200 + i)
        return [wire.encode(wire.forward_frame(torch.randn(1, 1, C, generator=g), torch.tensor([[PREFILL + s]]),
                                               start=PREFILL + s)) for s in range(steps)]

    prefill = wire.encode(wire.forward_frame(torch.randn(1, PREFILL, C, generator=torch.Generator().manual_seed(9)),
                                             torch.arange(PREFILL)[None], start=0))

    async def run(cloud, sids: list[str], ready: asyncio.Barrier | None) -> list[list[bytes]]:
        async def one(sid: str, i: int) -> list[bytes]:
            url = cloud.base_url.replace("http", "ws") + f"/v1/sessions/{sid}/stream"
            async with connect(url, additional_headers=auth(cloud.token), max_size=None) as ws:
                await ws.send(prefill)
                await ws.recv()
                if ready is not None:
                    await ready.wait()  # every session prefilled: the decode steps start together
                replies = []
                for f in decode_frames(i):
                    if ready is not None:
                        await asyncio.sleep(0.01 * i)
                    await ws.send(f)
                    replies.append(await ws.recv())
            return replies

        if ready is None:  # one after another
            return [await asyncio.wait_for(one(sid, i), 30) for i, sid in enumerate(sids)]
        return await asyncio.wait_for(asyncio.gather(*(one(sid, i) for i, sid in enumerate(sids))), 30)

    with local_cloud_thread(model_dir, settings=settings) as cloud, \
            httpx.Client(base_url=cloud.base_url, timeout=30) as http:
        sids = [open_session(http, cloud.token) for _ in range(2 * n)]
        sequential = asyncio.run(run(cloud, sids[:n], None))
        before = http.get("/metrics", headers=auth(cloud.token)).text

        async def together() -> list[list[bytes]]:
            return await run(cloud, sids[n:], asyncio.Barrier(n))

        concurrent = asyncio.run(together())
        after = http.get("/metrics", headers=auth(cloud.token)).text
    assert concurrent == sequential
    batched = metric(after, "umbra_cloud_decode_batched_steps_total") - metric(before, "umbra_cloud_decode_batched_steps_total")
    slabs = metric(after, "umbra_cloud_decode_slabs_total") - metric(before, "umbra_cloud_decode_slabs_total")
    assert batched == n * steps
    assert slabs <= steps + n - 1


def test_a_wait_that_runs_out_while_a_slab_runs_starts_again_when_the_slab_ends(model_dir):
    """The gather wait counts free worker time only. Session A steps back to back (so it is due back
    at once); one of its steps runs in a slab made slow (the real decode, 1 s late), and B's step
    arrives meanwhile and is held for A. Its 0.3 s wait runs out while A's slab still runs: B must
    stay held, the wait start again when the slab ends, and A's next step (sent the moment A is
    answered) join B's — three slabs in all. Were B sent on when its timer ran out, it would run
    alone right after A's slab: four."""
    settings = dict(torch_threads=1, decode_width=8, decode_gather_ms=300)
    with local_cloud_thread(model_dir, settings=settings) as cloud, \
            httpx.Client(base_url=cloud.base_url, timeout=30) as http:
        manager = cloud.server.config.app.state.cloud.manager
        decode_batch, slow = manager.decode_batch, threading.Event()

        def late_decode_batch(items):
            if slow.is_set():
                slow.clear()
                time.sleep(1.0)
            return decode_batch(items)

        manager.decode_batch = late_decode_batch
        a, b = open_session(http, cloud.token), open_session(http, cloud.token)
        prefill = wire.encode(wire.forward_frame(torch.randn(1, PREFILL, C), torch.arange(PREFILL)[None], start=0))

        def step(pos: int) -> bytes:
            return wire.encode(wire.forward_frame(torch.randn(1, 1, C), torch.tensor([[pos]]), start=pos))

        async def scenario() -> None:
            url = cloud.base_url.replace("http", "ws") + "/v1/sessions/{}/stream"
            async with connect(url.format(a), additional_headers=auth(cloud.token), max_size=None) as wa, \
                    connect(url.format(b), additional_headers=auth(cloud.token), max_size=None) as wb:
                for ws in (wa, wb):
                    await ws.send(prefill)
                    await ws.recv()
                await asyncio.sleep(1.2)  # both gone quiet since their prefills: nobody is due back
                before.append(metric((await asyncio.to_thread(http.get, "/metrics", headers=auth(cloud.token))).text,
                                     "umbra_cloud_decode_slabs_total"))
                await wa.send(step(PREFILL))  # runs at once (nobody is due)
                await wa.recv()
                slow.set()
                await wa.send(step(PREFILL + 1))  # right after its answer (A's gap: ~0), in a slab 1 s late
                await asyncio.sleep(0.1)
                await wb.send(step(PREFILL))  # held: A is in the running slab and due back
                await wa.recv()
                await wa.send(step(PREFILL + 2))  # the moment A is answered
                await asyncio.wait_for(asyncio.gather(wa.recv(), wb.recv()), 30)

        before: list[float] = []
        asyncio.run(scenario())
        after = metric(http.get("/metrics", headers=auth(cloud.token)).text, "umbra_cloud_decode_slabs_total")
    assert after - before[0] == 3


def test_a_lone_step_runs_unpadded_when_asked(model_dir):
    """With `decode_solo` a lone decode step runs at width 1: its reply is a one-row slab's, bit
    for bit (the same blocks in this process), and within fp32's tolerance of the same step padded
    into the smallest slab, as it is by default (tests/server/test_scheduler_batch_invariance.py:
    then its bits are those it gets in company). Steps in company run in the same checked widths
    either way (the lockstep test above holds them bit for bit)."""
    def run(settings: dict) -> tuple[list[list[torch.Tensor]], tuple[int, ...], float]:
        with local_cloud_thread(model_dir, settings=dict(torch_threads=1, decode_width=8, **settings)) as cloud, \
                httpx.Client(base_url=cloud.base_url, timeout=30) as http:
            widths = cloud.server.config.app.state.cloud.manager.limits.decode_widths
            sids = [open_session(http, cloud.token) for _ in range(3)]
            alone = [asyncio.run(run_session(cloud, sids[i], i)) for i in range(3)]
            solo = metric(http.get("/metrics", headers=auth(cloud.token)).text, "umbra_cloud_decode_solo")
        return [[wire.decode(r).hidden for r in rs] for rs in alone], widths, solo

    alone, widths, solo = run(dict(decode_solo=True))
    padded, padded_widths, padded_solo = run({})
    assert widths == (1, *padded_widths) and solo == 1 and padded_solo == 0 and padded_widths[0] > 1
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # the service's compute thread count, so the kernels match
        middle = LocalMiddle(load_middle(model_dir))
        stack = middle.runtime.blocks.stack

        async def unpadded(i: int) -> list[torch.Tensor]:
            """Prefill as the service does; then each decode step as a slab of exactly its one row."""
            sid = await middle.open_session()
            prefill, *steps = [wire.decode(f) for f in frames(i)]
            outs = [await middle.forward(prefill.hidden, prefill.positions, sid)]
            cache = middle.runtime.sessions[sid].cache
            for x in steps:
                outs += decode_slab(stack, [DecodeStep(x.hidden, x.positions, cache)], 1)
            return outs

        reference = [asyncio.run(unpadded(i)) for i in range(3)]
    finally:
        torch.set_num_threads(threads)
    for got, ref, pad in zip(alone, reference, padded):
        assert all(torch.equal(g, r) for g, r in zip(got, ref))  # unpadded: a one-row slab's bits
        assert all(torch.allclose(g, p, rtol=0, atol=1e-5) for g, p in zip(got, pad))
