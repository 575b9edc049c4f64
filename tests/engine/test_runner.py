"""Runners: the split runner (through LocalMiddle and through the real cloud service) gives the
monolithic runner's logits at every step, across truncation and after a step cancelled while
awaiting the cloud."""

from __future__ import annotations

import asyncio

import pytest
import torch

from server.launch import local_cloud_sync
from umbra.engine.runner import MonolithicRunner, SplitRunner
from umbra.middle.remote import RemoteMiddle

TOL = 1e-4
IDS = torch.randint(5, 500, (40,), generator=torch.Generator().manual_seed(3)).tolist()


@pytest.fixture(scope="module")
def cloud(tiny_dir):
    """The real cloud service (subprocess, 127.0.0.1, free port) serving the tiny model."""
    with local_cloud_sync(tiny_dir, settings={"torch_threads": 1}) as c:
        yield c


def _mono(client_model):
    return MonolithicRunner(client_model.encoder, client_model.load_middle(), client_model.decoder)


async def _script(runner) -> list[torch.Tensor]:
    """Prefill, decode, roll back, diverge: the logits after each call."""
    out = [await runner.run(IDS[:20])]
    for i in range(20, 25):
        out.append(await runner.run([IDS[i]]))
    await runner.truncate(12)
    assert runner.length == 12
    out.append(await runner.run(IDS[30:34]))
    out.append(await runner.run([IDS[35]]))
    await runner.close()
    return out


async def test_split_through_local_middle_equals_monolithic(client_model, local_middle):
    split = await _script(SplitRunner(client_model.encoder, client_model.decoder, local_middle))
    mono = await _script(_mono(client_model))
    assert len(split) == len(mono)
    for a, b in zip(split, mono):
        assert a.shape == (client_model.spec.vocab_size,)
        assert (a - b).abs().max().item() <= TOL
    assert not local_middle.runtime.sessions  # close() released the middle session


async def test_split_through_the_real_cloud_equals_monolithic(client_model, cloud):
    middle = RemoteMiddle(cloud.base_url, cloud.token, hidden_size=client_model.spec.hidden_size)
    try:
        split = await _script(SplitRunner(client_model.encoder, client_model.decoder, middle))
    finally:
        await middle.aclose()
    mono = await _script(_mono(client_model))
    for a, b in zip(split, mono):
        assert (a - b).abs().max().item() <= TOL


async def test_step_cancelled_while_awaiting_the_cloud_is_rolled_back(client_model, cloud):
    middle = RemoteMiddle(cloud.base_url, cloud.token)
    runner = SplitRunner(client_model.encoder, client_model.decoder, middle)
    mono = _mono(client_model)
    try:
        await runner.run(IDS[:16])
        task = asyncio.create_task(runner.run(IDS[16:24]))
        while runner.enc_cache.length == 16:  # the encoder ran; the middle call is in flight
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert runner.length == 16 and runner.enc_cache.length == 24  # parts disagree until the next call
        got = await runner.run(IDS[16:20])
        assert runner.enc_cache.length == runner.dec_cache.length == runner.length == 20
    finally:
        await runner.close()
        await middle.aclose()
    await mono.run(IDS[:16])
    ref = await mono.run(IDS[16:20])
    assert (got - ref).abs().max().item() <= TOL


async def test_reset_opens_a_new_middle_session(client_model, local_middle):
    runner = SplitRunner(client_model.encoder, client_model.decoder, local_middle)
    first = await runner.run(IDS[:10])
    old = runner.session
    await runner.reset()
    assert runner.length == 0 and old not in local_middle.runtime.sessions
    again = await runner.run(IDS[:10])
    assert runner.session != old and torch.equal(first, again)
    await runner.close()
