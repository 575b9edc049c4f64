"""RemoteMiddle through the real cloud service (uvicorn on a loopback socket; a subprocess where
the cloud must die): exact split logits for every family, concurrency, transparent recovery
from eviction / expiry / cancellation, training backward, TLS, and clear failures."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import torch

_REPO = str(Path(__file__).resolve().parents[2])
if sys.path[0] != _REPO:  # the real `server` package, not tests/server
    sys.path.insert(0, _REPO)

from server.launch import local_cloud, local_cloud_thread  # noqa: E402
from tiny_models import FAMILIES  # noqa: E402
from umbra.errors import CloudRejected, CloudUnavailable, ConfigError  # noqa: E402
from umbra.middle.local import LocalMiddle  # noqa: E402
from umbra.middle.remote import RemoteMiddle  # noqa: E402
from umbra.model.loader import load_client, load_middle  # noqa: E402

TOL = 1e-5
ONE_THREAD = {"torch_threads": 1}
SESSION_BYTES = 3 * 2 * 2 * 16 * 4 * 128  # tiny model: one session's KV cache at minimum capacity


class SplitClient:
    """Encoder and decoder with their caches around one Middle session (what the engine does)."""

    def __init__(self, parts, middle):
        self.enc, self.dec = parts
        self.middle = middle
        self.ce, self.cd = self.enc.stack.new_cache(), self.dec.stack.new_cache()

    async def open(self):
        self.session = await self.middle.open_session()
        return self

    async def run(self, ids: torch.Tensor) -> torch.Tensor:
        start = self.ce.length
        pos = torch.arange(start, start + ids.shape[1])[None].expand(ids.shape[0], -1)
        with torch.no_grad():
            h = self.enc(ids, pos, self.ce)
        h = await self.middle.forward(h, pos, self.session)
        with torch.no_grad():
            return self.dec(h, pos, self.cd)

    def rollback(self, n: int):
        self.ce.truncate(n)
        self.cd.truncate(n)

    async def truncate(self, n: int):
        self.rollback(n)
        await self.middle.truncate(self.session, n)


def reference(hf, ids):
    with torch.no_grad():
        return hf(ids).logits


def maxdiff(a, b) -> float:
    return (a - b).abs().max().item()


@pytest.fixture(scope="module")
def clients(tiny_model_dirs):
    return {fam: load_client(d) for fam, d in tiny_model_dirs.items()}


@pytest.mark.parametrize("family", FAMILIES)
async def test_split_logits_match_transformers(family, tiny_model_dirs, hf_models, clients):
    d, hf = tiny_model_dirs[family], hf_models[family]
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 512, (1, 56), generator=gen)
    ref = reference(hf, ids)
    with local_cloud_thread(d, settings=ONE_THREAD) as cloud:
        async with RemoteMiddle(cloud.base_url, cloud.token, hidden_size=64) as middle:
            client = await SplitClient(clients[family], middle).open()
            assert maxdiff(await client.run(ids[:, :24]), ref[:, :24]) <= TOL  # prefill (HTTP)
            for t in range(24, 56):  # 32 decode steps (over HTTP until the stream, opened after the first, is up)
                assert maxdiff((await client.run(ids[:, t : t + 1]))[:, 0], ref[:, t]) <= TOL, t
            stats = middle.stats  # info, open + prefill, then one request or message per step
            assert stats.ws_messages + stats.http_requests == 2 + 32 and stats.ws_messages > 0

            await client.truncate(20)  # prefix reuse, then different text
            new = torch.randint(0, 512, (1, 14), generator=gen)
            ref2 = reference(hf, torch.cat([ids[:, :20], new], 1))
            assert maxdiff(await client.run(new[:, :12]), ref2[:, 20:32]) <= TOL
            for t in (12, 13):
                assert maxdiff((await client.run(new[:, t : t + 1]))[:, 0], ref2[:, 20 + t]) <= TOL
            assert middle.stats.reprefills == 0


async def _greedy(client: SplitClient, prompt: torch.Tensor, steps: int) -> list[int]:
    logits = await client.run(prompt)
    out = []
    for _ in range(steps):
        nxt = int(logits[0, -1].argmax())
        out.append(nxt)
        logits = await client.run(torch.tensor([[nxt]]))
    return out


async def test_16_concurrent_sessions_equal_16_sequential_runs(tiny_model_dirs, clients):
    d = tiny_model_dirs["qwen2-untied"]
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 512, (1, int(n)), generator=gen) for n in torch.randint(4, 16, (16,), generator=gen)]
    with local_cloud_thread(d, settings=ONE_THREAD) as cloud:
        async with RemoteMiddle(cloud.base_url, cloud.token) as middle:
            sequential = [await _greedy(await SplitClient(clients["qwen2-untied"], middle).open(), p, 10)
                          for p in prompts]
        tokens = [cloud.add_token(f"client{i}") for i in range(4)]
        middles = [RemoteMiddle(cloud.base_url, tokens[i % 4]) for i in range(16)]
        try:
            runs = [SplitClient(clients["qwen2-untied"], m).open() for m in middles]
            opened = await asyncio.gather(*runs)
            concurrent = await asyncio.gather(*(_greedy(c, p, 10) for c, p in zip(opened, prompts)))
        finally:
            await asyncio.gather(*(m.aclose() for m in middles))
    assert concurrent == sequential
    assert len({tuple(s) for s in sequential}) > 1  # the prompts really differ


async def test_eviction_and_expiry_are_transparent(tiny_model_dirs, hf_models, clients):
    family = "mistral"
    d, hf = tiny_model_dirs[family], hf_models[family]
    gen = torch.Generator().manual_seed(11)
    ids = [torch.randint(0, 512, (1, 30), generator=gen) for _ in range(2)]
    refs = [reference(hf, x) for x in ids]
    settings = dict(kv_budget_bytes=int(1.5 * SESSION_BYTES), kv_client_quota_bytes=int(1.5 * SESSION_BYTES),
                    **ONE_THREAD)
    with local_cloud_thread(d, settings=settings) as cloud:
        async with RemoteMiddle(cloud.base_url, cloud.token) as middle:
            a, b = [await SplitClient(clients[family], middle).open() for _ in range(2)]
            for c, x, r in ((a, ids[0], refs[0]), (b, ids[1], refs[1])):
                assert maxdiff(await c.run(x[:, :16]), r[:, :16]) <= TOL
            for t in range(16, 30):  # the two sessions keep evicting each other
                for c, x, r in ((a, ids[0], refs[0]), (b, ids[1], refs[1])):
                    assert maxdiff((await c.run(x[:, t : t + 1]))[:, 0], r[:, t]) <= TOL, t
            assert middle.stats.reprefills >= 28
            await a.truncate(10)  # truncating an evicted session is fine too
            assert maxdiff(await a.run(ids[0][:, 10:12]), refs[0][:, 10:12]) <= TOL

    settings = dict(session_idle_seconds=0.3, sweep_interval_seconds=0.05, **ONE_THREAD)
    with local_cloud_thread(d, settings=settings) as cloud:
        async with RemoteMiddle(cloud.base_url, cloud.token) as middle:
            a = await SplitClient(clients[family], middle).open()
            assert maxdiff(await a.run(ids[0][:, :20]), refs[0][:, :20]) <= TOL
            await asyncio.sleep(0.8)  # expired on the cloud
            assert maxdiff((await a.run(ids[0][:, 20:21]))[:, 0], refs[0][:, 20]) <= TOL
            assert middle.stats.reprefills == 1


async def test_key_padding_chunking_and_reprefill_match_local_middle(tiny_model_dirs):
    """Batch 2 with left padding; prefills and re-prefills larger than the frame limit."""
    d = tiny_model_dirs["llama"]
    local = LocalMiddle(load_middle(d))
    gen = torch.Generator().manual_seed(5)
    n = 100  # 2 x 100 positions x (256 + 8) bytes = 52 KB: four 16 KB frames
    x = torch.randn(2, n + 3, 64, generator=gen)
    pad = torch.ones(2, n + 3, dtype=torch.bool)
    pad[1, :7] = False  # left padding of the second row
    pos = (pad.cumsum(1) - 1).clamp(min=0)
    settings = dict(kv_budget_bytes=int(1.2 * SESSION_BYTES * 2), kv_client_quota_bytes=int(1.2 * SESSION_BYTES * 2),
                    max_frame_bytes=16 * 1024, **ONE_THREAD)
    with local_cloud_thread(d, settings=settings) as cloud:  # KV room for one B=2 session
        async with RemoteMiddle(cloud.base_url, cloud.token) as remote:
            sl, sr, other = await local.open_session(), await remote.open_session(), await remote.open_session()
            y_l = await local.forward(x[:, :n], pos[:, :n], sl, pad[:, :n])
            requests = remote.stats.http_requests
            y_r = await remote.forward(x[:, :n], pos[:, :n], sr, pad[:, :n])
            assert remote.stats.http_requests - requests == 4
            assert maxdiff(y_l, y_r) <= TOL
            for t in range(n, n + 3):
                await remote.forward(x[:, :2], pos[:, :2], other, pad[:, :2])  # evicts sr
                y_l = await local.forward(x[:, t : t + 1], pos[:, t : t + 1], sl, pad[:, : t + 1])
                y_r = await remote.forward(x[:, t : t + 1], pos[:, t : t + 1], sr, pad[:, : t + 1])
                assert maxdiff(y_l, y_r) <= TOL, t
                await remote.close(other)
                other = await remote.open_session()
            assert remote.stats.reprefills == 3


async def test_cancelled_steps_resynchronize(tiny_model_dirs, hf_models, clients):
    d, hf = tiny_model_dirs["qwen2-tied"], hf_models["qwen2-tied"]
    ids = torch.randint(0, 512, (1, 40), generator=torch.Generator().manual_seed(2))
    ref = reference(hf, ids)
    with local_cloud_thread(d, settings=ONE_THREAD) as cloud:
        async with RemoteMiddle(cloud.base_url, cloud.token) as middle:
            c = await SplitClient(clients["qwen2-tied"], middle).open()
            await c.run(ids[:, :10])
            t, cancelled_in_flight = 10, 0
            for i, delay in enumerate((0, 0.0005, 0.002, 0.01, 0.03, 0)):
                task = asyncio.ensure_future(c.run(ids[:, t : t + 1]))
                await asyncio.sleep(delay)
                task.cancel()
                try:
                    await task
                    t += 1  # finished before the cancel: keep it
                except asyncio.CancelledError:
                    session = middle._sessions[c.session]
                    cancelled_in_flight += session.dirty
                    if i % 2:  # the engine's way: truncate everything to the common prefix
                        await c.truncate(t)
                    else:  # or just roll the local caches back and carry on
                        c.rollback(t)
                assert maxdiff((await c.run(ids[:, t : t + 1]))[:, 0], ref[:, t]) <= TOL
                t += 1
            assert cancelled_in_flight >= 1  # at least one cancel hit a step on the wire


async def test_training_forward_backward_over_http(tiny_model_dirs):
    d = tiny_model_dirs["qwen2-untied"]
    blocks = load_middle(d)
    x = torch.randn(2, 10, 64)
    pos = torch.arange(10).expand(2, 10)
    with local_cloud_thread(d, settings=ONE_THREAD) as cloud:
        async with RemoteMiddle(cloud.base_url, cloud.token) as middle:
            sid = await middle.open_session(training=True)
            y = await middle.forward(x, pos, sid)
            grad_out = torch.randn_like(y)
            grad_in = await middle.backward(grad_out, sid)
            with pytest.raises(CloudRejected, match="forward before it") as info:
                await middle.backward(grad_out, sid)  # one backward per forward
            assert info.value.status == 422
    xr = x.clone().requires_grad_(True)
    with torch.enable_grad():
        yr = blocks(xr, pos)
        (yr * grad_out).sum().backward()
    assert maxdiff(y, yr.detach()) <= 1e-6 and maxdiff(grad_in, xr.grad) <= 1e-6


async def test_tls_half_precision_wire_and_rejections(tiny_model_dirs, hf_models, clients):
    d, hf = tiny_model_dirs["qwen2-tied"], hf_models["qwen2-tied"]
    ids = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(4))
    ref = reference(hf, ids)
    with local_cloud_thread(d, tls=True, settings=dict(max_frame_bytes=32 * 1024, **ONE_THREAD)) as cloud:
        sizes = {}
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            seen = {"sent": 0, "received": 0}
            tap = lambda direction, payload: seen.__setitem__(direction, seen[direction] + len(payload))  # noqa: E731
            async with RemoteMiddle(cloud.base_url, cloud.token, verify=cloud.verify, wire_dtype=dtype,
                                    tap=tap) as middle:
                c = await SplitClient(clients["qwen2-tied"], middle).open()
                out = torch.cat([await c.run(ids[:, :8])] + [await c.run(ids[:, t : t + 1]) for t in range(8, 12)], 1)
                assert maxdiff(out, ref) <= (TOL if dtype == torch.float32 else 0.05)
                sizes[dtype] = middle.stats.bytes_sent
                with pytest.raises(CloudRejected, match="NaN or Inf") as info:  # over the stream
                    await middle.forward(torch.full((1, 1, 64), float("nan")), torch.tensor([[12]]), c.session)
                assert info.value.status == 422
                await c.run(ids[:, 11:12])  # the session survived it
                training = await middle.open_session(training=True)  # a training forward cannot be split
                with pytest.raises(CloudRejected, match="exceeds the cloud's limit") as info:
                    await middle.forward(torch.zeros(1, 400, 64), torch.arange(400)[None], training)
                assert info.value.status == 413
                assert (seen["sent"], seen["received"]) == (middle.stats.bytes_sent, middle.stats.bytes_received)
        assert sizes[torch.bfloat16] < 0.6 * sizes[torch.float32]


async def test_unverified_tls_wrong_token_and_no_cloud(tiny_model_dirs):
    d = tiny_model_dirs["qwen2-tied"]
    with local_cloud_thread(d, tls=True, settings=ONE_THREAD) as cloud:
        wrong = "umbra_0123456789abcdef_" + "A" * 43
        for kwargs, error, match in (
            (dict(token=cloud.token), CloudUnavailable, "cloud unreachable"),  # self-signed, not trusted
            (dict(token=wrong, verify=cloud.verify), CloudRejected, "HTTP 401.*invalid bearer token"),
            (dict(token=cloud.token, verify=cloud.verify, hidden_size=32), ConfigError, "hidden size 64"),
            (dict(token=cloud.token, verify=cloud.verify, layers=(2, 4)), ConfigError,
             r"runs blocks \[1, 4\], this client's split needs \[2, 4\]"),  # 6 layers, default E=1, D=2
        ):
            middle = RemoteMiddle(cloud.base_url, **kwargs)
            with pytest.raises(error, match=match):
                await middle.open_session()
            await middle.aclose()
        port = cloud.base_url.rsplit(":", 1)[1]
    middle = RemoteMiddle(f"http://127.0.0.1:{port}", "t", connect_timeout=2)  # nothing listens there now
    with pytest.raises(CloudUnavailable, match="cloud unreachable"):
        await middle.open_session()
    await middle.aclose()


async def test_cloud_killed_mid_decode_raises_cloud_unavailable(tiny_model_dirs, clients):
    d = tiny_model_dirs["qwen2-tied"]
    ids = torch.randint(0, 512, (1, 20), generator=torch.Generator().manual_seed(9))
    async with local_cloud(d, settings=ONE_THREAD) as cloud:
        middle = RemoteMiddle(cloud.base_url, cloud.token)
        c = await SplitClient(clients["qwen2-tied"], middle).open()
        await c.run(ids[:, :12])
        for t in range(12, 15):
            await c.run(ids[:, t : t + 1])
        cloud.kill()
        with pytest.raises(CloudUnavailable, match="cloud unreachable"):
            await c.run(ids[:, 15:16])  # the stream drops
        c.rollback(15)
        with pytest.raises(CloudUnavailable, match="cloud unreachable"):
            await c.run(ids[:, 15:16])  # and nothing answers any more
        fresh = await SplitClient(clients["qwen2-tied"], middle).open()  # no trip: its first frame opens it
        with pytest.raises(CloudUnavailable, match="cloud unreachable"):
            await fresh.run(ids[:, :4])
        await middle.aclose()


async def test_round_trips_count_every_request_and_stream_step(tiny_model_dirs, hf_models, clients):
    """Middle.round_trips: each HTTP frame and each stream step; the open travels with the first
    frame, a truncate with the next one and the stream's upgrade after the first step (over
    HTTP): none costs a trip of its own (the logits stay exact). A session the cloud dropped costs the refused step and one
    frame (a new session, its history and the step). In process: none."""
    d = tiny_model_dirs["qwen2-untied"]
    ids = torch.randint(0, 512, (1, 20), generator=torch.Generator().manual_seed(5))
    ref = reference(hf_models["qwen2-untied"], ids)
    with local_cloud_thread(d, settings=ONE_THREAD) as cloud:
        async with RemoteMiddle(cloud.base_url, cloud.token) as middle:
            assert middle.open_in_frame  # the cloud advertises it in /v1/info
            c = await SplitClient(clients["qwen2-untied"], middle).open()
            assert middle.round_trips(c.session) == 0 and middle._sessions[c.session].remote is None
            assert maxdiff(await c.run(ids[:, :10]), ref[:, :10]) <= TOL  # open + prefill: one HTTP frame
            assert middle.round_trips(c.session) == 1 and middle._sessions[c.session].remote is not None
            await c.run(ids[:, 10:11])  # the first step: over HTTP, the stream's upgrade after it
            assert middle.round_trips(c.session) == 2
            for t in range(11, 14):
                await c.run(ids[:, t : t + 1])
            assert middle.round_trips(c.session) == 5
            await c.run(ids[:, 14:19])  # five positions in one frame: one trip
            assert middle.round_trips(c.session) == 6
            await c.truncate(12)  # no trip: the next frame carries it (FORWARD_TRIM)
            assert middle.round_trips(c.session) == 6 and middle._sessions[c.session].trim
            assert maxdiff((await c.run(ids[:, 12:13]))[:, 0], ref[:, 12]) <= TOL
            assert middle.round_trips(c.session) == 7 and not middle._sessions[c.session].trim
            assert maxdiff(await c.run(ids[:, 13:17]), ref[:, 13:17]) <= TOL  # the cloud held 19, cut to 12 + 1
            other = await SplitClient(clients["qwen2-untied"], middle).open()
            assert middle.round_trips(other.session) == 0 and middle.round_trips(c.session) == 8
            remote = middle._sessions[c.session].remote
            await middle.link.request("DELETE", f"/v1/sessions/{remote}")  # the cloud no longer holds it
            assert maxdiff((await c.run(ids[:, 17:19])), ref[:, 17:19]) <= TOL
            assert middle.round_trips(c.session) == 10 and middle.stats.reprefills == 1  # refused step + one frame
            assert middle._sessions[c.session].remote not in (None, remote)
    local = LocalMiddle(load_middle(d))
    sid = await local.open_session()
    await local.forward(torch.zeros(1, 3, local.hidden_size), torch.arange(3)[None], sid)
    assert local.round_trips(sid) == 0
