"""Runners: the split runner (through LocalMiddle and through the real cloud service) gives the
monolithic runner's logits at every step, across truncation, after a step cancelled while
awaiting the cloud and after truncations cancelled while awaiting the cloud (rapid typing)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from server.launch import local_cloud_thread
from umbra.engine.runner import MonolithicRunner, SplitRunner
from umbra.middle.remote import RemoteMiddle

TOL = 1e-4
IDS = torch.randint(5, 500, (40,), generator=torch.Generator().manual_seed(3)).tolist()


@pytest.fixture(scope="module")
def cloud(tiny_dir):
    """The real cloud service (127.0.0.1, free port) serving the tiny model, from a thread of this
    process: the same HTTP service without a Python start-up and torch import of its own."""
    with local_cloud_thread(tiny_dir, settings={"torch_threads": 1}) as c:
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


async def _cancel_in_flight(task: asyncio.Task, in_flight) -> None:
    """Cancel `task` once `in_flight()` says it is awaiting the cloud; it must end cancelled."""
    while not in_flight():
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _resumes_like_monolithic(runner, middle, client_model) -> None:
    """Left with 16 positions, the runner runs 4 more with every part in step and the monolithic
    runner's logits; then it and its middle are closed."""
    try:
        got = await runner.run(IDS[16:20])
        assert runner.enc_cache.length == runner.dec_cache.length == runner.length == 20
    finally:
        await runner.close()
        await middle.aclose()
    mono = _mono(client_model)
    await mono.run(IDS[:16])
    ref = await mono.run(IDS[16:20])
    assert (got - ref).abs().max().item() <= TOL


async def test_step_cancelled_while_awaiting_the_cloud_is_rolled_back(client_model, cloud):
    middle = RemoteMiddle(cloud.base_url, cloud.token)
    runner = SplitRunner(client_model.encoder, client_model.decoder, middle)
    await runner.run(IDS[:16])
    # the encoder ran; the middle call is in flight
    await _cancel_in_flight(asyncio.create_task(runner.run(IDS[16:24])), lambda: runner.enc_cache.length != 16)
    assert runner.length == 16 and runner.enc_cache.length == 24  # parts disagree until the next call
    await _resumes_like_monolithic(runner, middle, client_model)


async def test_truncations_cancelled_while_awaiting_the_cloud_leave_no_part_longer(client_model, cloud):
    middle = RemoteMiddle(cloud.base_url, cloud.token)
    middle.trim_in_frame = False  # truncates of their own, as to a cloud without FORWARD_TRIM: one can be in flight
    runner = SplitRunner(client_model.encoder, client_model.decoder, middle)
    await runner.run(IDS[:24])
    for length in (20, 16):  # keystrokes in a row, each cancelled by the next
        await _cancel_in_flight(asyncio.create_task(runner.truncate(length)),  # the cloud's truncate in flight
                                lambda: middle._sessions[runner.session].length == length)
        assert runner.length == length
    await runner.truncate(18)  # longer than what is left: nothing to cut
    assert runner.length == 16
    await _resumes_like_monolithic(runner, middle, client_model)


async def test_reset_opens_a_new_middle_session(client_model, local_middle):
    runner = SplitRunner(client_model.encoder, client_model.decoder, local_middle)
    first = await runner.run(IDS[:10])
    old = runner.session
    await runner.reset()
    assert runner.length == 0 and old not in local_middle.runtime.sessions
    again = await runner.run(IDS[:10])
    assert runner.session != old and torch.equal(first, again)
    await runner.close()
