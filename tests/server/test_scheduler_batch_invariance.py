"""Batch invariance through the real scheduler and cloud, with the service's default slab widths
(on the CPU: the narrowest slab whose bits every wider one shares, chosen at start): a session's
decode step returns the same bits whether it runs alone or in a slab beside 1 or 4 other sessions
of other lengths, and a greedy completion through the split returns the same logits and tokens
alone and while other completions decode beside it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import torch
from websockets.asyncio.client import connect

from cloud_helpers import C, auth, metric, open_session
from server.launch import local_cloud_thread
from umbra import wire
from umbra.engine import ClientModel
from umbra.engine.runner import SplitRunner
from umbra.middle.remote import RemoteMiddle

STEPS = 5
TINY = Path(__file__).resolve().parents[2] / "models" / "umbra-code-tiny"


def frames(i: int) -> list[bytes]:
    """Session i: a prefill of 3 + 4i positions (every session its own length), then STEPS steps."""
    g = torch.Generator().manual_seed(500 + i)
    t = 3 + 4 * i
    out = [wire.encode(wire.forward_frame(torch.randn(1, t, C, generator=g), torch.arange(t)[None], start=0))]
    for s in range(STEPS):
        out.append(wire.encode(wire.forward_frame(torch.randn(1, 1, C, generator=g), torch.tensor([[t + s]]),
                                                  start=t + s)))
    return out


async def lockstep(cloud, sids: list[str], members: list[int]) -> list[list[bytes]]:
    """Sessions `members` (frames(i) each) on their streams, every round one slab: the compute worker
    is held while all of them send their step, and released once every step is pending."""
    worker = cloud.server.config.app.state.cloud.worker
    url = cloud.base_url.replace("http", "ws") + "/v1/sessions/{}/stream"
    streams = [await connect(url.format(sid), additional_headers=auth(cloud.token), max_size=None) for sid in sids]
    sent = [frames(i) for i in members]
    replies: list[list[bytes]] = [[] for _ in members]
    async with httpx.AsyncClient(base_url=cloud.base_url, timeout=30) as h:
        try:
            for k in range(STEPS + 1):
                gate, running = threading.Event(), threading.Event()
                held = worker.submit(lambda: (running.set(), gate.wait(30)))
                assert await asyncio.to_thread(running.wait, 30), "the worker never took the holding job"
                try:
                    for ws, fs in zip(streams, sent):
                        await ws.send(fs[k])
                    for _ in range(600 if k else 0):  # decode steps: until every one is pending
                        pending = metric((await h.get("/metrics", headers=auth(cloud.token))).text,
                                         "umbra_cloud_decode_pending")
                        if pending == len(members):
                            break
                        await asyncio.sleep(0.05)
                    else:
                        assert k == 0, f"round {k}: {pending} of {len(members)} steps pending"
                finally:
                    gate.set()
                held.result(timeout=30)
                for r, ws in zip(replies, streams):
                    r.append(await ws.recv())
        finally:
            for ws in streams:
                await ws.close()
    return replies


def test_a_sessions_steps_are_the_same_bits_alone_and_beside_one_or_four_others(model_dir):
    with local_cloud_thread(model_dir, settings=dict(torch_threads=1)) as cloud, \
            httpx.Client(base_url=cloud.base_url, timeout=30) as http:
        widths = cloud.server.config.app.state.cloud.manager.limits.decode_widths

        def slabs() -> tuple[float, float, float]:
            text = http.get("/metrics", headers=auth(cloud.token)).text
            return (metric(text, "umbra_cloud_decode_slabs_total"), metric(text, "umbra_cloud_decode_batched_steps_total"),
                    metric(text, "umbra_cloud_decode_solo"))

        alone = {i: asyncio.run(lockstep(cloud, [open_session(http, cloud.token)], [i]))[0] for i in range(5)}
        runs = {}
        for members in ([0, 3], [4, 2, 0, 1, 3]):  # 2 and 5 sessions, the watched one (0) in another slot
            before = slabs()
            runs[len(members)] = dict(zip(members, asyncio.run(
                lockstep(cloud, [open_session(http, cloud.token) for _ in members], members))))
            after = slabs()
            assert after[0] - before[0] == STEPS and after[1] - before[1] == STEPS * len(members)  # one slab a round
    assert all(wire.decode(r).kind == wire.Kind.HIDDEN for rs in alone.values() for r in rs)
    for n, run in runs.items():
        for i, replies in run.items():
            assert replies == alone[i], (n, i, widths)  # every reply's bytes: prefill and each decode step
    assert after[2] == 0  # a lone step ran padded to the narrowest slab that agrees, not at width 1


async def greedy(model: ClientModel, cloud, prompt: list[int], steps: int) -> tuple[list[int], list[torch.Tensor]]:
    remote = RemoteMiddle(cloud.base_url, cloud.token, hidden_size=model.spec.hidden_size)
    runner = SplitRunner(model.encoder, model.decoder, remote)
    try:
        logits = [await runner.run(prompt)]
        tokens = []
        for _ in range(steps):
            tokens.append(int(logits[-1].reshape(-1, logits[-1].shape[-1])[-1].argmax()))
            logits.append(await runner.run([tokens[-1]]))
        return tokens, logits
    finally:
        await runner.close()
        await remote.aclose()


def test_a_greedy_completion_is_the_same_alone_and_beside_other_completions():
    model = ClientModel.load(TINY)
    tok = model.tokenizer
    prompts = [tok.encode(text) for text in ("def fibonacci(n):\n    ", "import os\n\nfor name in os.",
                                             "class Stack:\n    def push(self, item):\n        self.",
                                             "x = [i * i for i in ", "# sum of a list\ndef total(xs):\n"
                                             "    return ")]
    # a long gather wait: the completions' steps wait for each other, so they share slabs on any machine
    with local_cloud_thread(TINY, settings=dict(torch_threads=1, decode_gather_ms=2000)) as cloud, \
            httpx.Client(base_url=cloud.base_url, timeout=30) as http:
        alone = asyncio.run(greedy(model, cloud, prompts[0], 12))

        def slabs() -> tuple[float, float]:
            text = http.get("/metrics", headers=auth(cloud.token)).text
            return metric(text, "umbra_cloud_decode_slabs_total"), metric(text, "umbra_cloud_decode_batched_steps_total")

        async def together():
            return await asyncio.gather(*(greedy(model, cloud, p, 12) for p in prompts))

        before = slabs()
        company = asyncio.run(together())
        after = slabs()
    assert (after[1] - before[1]) / (after[0] - before[0]) > 2  # the completions really shared slabs
    tokens, logits = company[0]
    assert tokens == alone[0] and len(tokens) == 12
    assert all(torch.equal(a, b) for a, b in zip(logits, alone[1]))  # and every step's logits, bit for bit
