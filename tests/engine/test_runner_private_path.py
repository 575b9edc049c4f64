"""The engine with a private local path runs exactly what STuning trains: the split runner's logits
(through LocalMiddle and the real cloud service; prefill in chunks, decode, truncation) equal a
plain full forward of the same client with the same keyed noise; a re-sent prefix is sent with the
same noise, a different prefix with different noise; a completion runs through the path. The clean
residual: incremental decode equals split_logits (its own encoder cache), the cloud receives what
it receives without it, and a step cancelled while the cloud computes rolls every cache back."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
import torch

from server.launch import local_cloud_thread
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig
from umbra.engine.runner import MonolithicRunner, SplitRunner
from umbra.attacks.recorder import RecordingMiddle
from umbra.attacks.transcript import ForwardEvent
from umbra.middle.local import LocalMiddle
from umbra.middle.remote import RemoteMiddle
from umbra.model.private_path import PrivatePath, split_logits
from umbra.model.private_path_config import PrivatePathConfig

TOL = 1e-4
IDS = torch.randint(5, 500, (40,), generator=torch.Generator().manual_seed(5)).tolist()
SECRET = b"engine-test-secret-0123456789abc"


def received(middle: RecordingMiddle) -> list[torch.Tensor]:
    """The hidden states the cloud received, one tensor per forward call."""
    return [e.hidden for e in middle.events if isinstance(e, ForwardEvent)]


@pytest.fixture(scope="module")
def model(tiny_dir) -> ClientModel:
    """A client of its own (the shared fixture stays path-free) with a trained-looking path."""
    m = ClientModel.load(tiny_dir)
    path = PrivatePath(PrivatePathConfig(enabled=True, noise=0.4, rank=16), m.spec.hidden_size, SECRET)
    with torch.no_grad():
        path.local.weight.normal_(0, 0.05, generator=torch.Generator().manual_seed(0))
    m.private_path = path.eval()
    return m


@pytest.fixture(scope="module")
def middle_blocks(model):
    return model.load_middle()


def _reference(model, middle_blocks, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return split_logits(model.encoder, middle_blocks, model.decoder, model.private_path,
                            torch.tensor([ids]))[0, -1].float()


async def _script(runner) -> list[tuple[list[int], torch.Tensor]]:
    """Prefill in two chunks, decode, roll back, diverge: (ids so far, logits) after each call."""
    out = []
    await runner.run(IDS[:7])
    out.append((IDS[:20], await runner.run(IDS[7:20])))
    for i in range(20, 24):
        out.append((IDS[: i + 1], await runner.run([IDS[i]])))
    await runner.truncate(12)
    out.append((IDS[:12] + IDS[30:34], await runner.run(IDS[30:34])))
    out.append((IDS[:12] + IDS[30:35], await runner.run([IDS[34]])))
    await runner.close()
    return out


async def _split_equals_reference_and_monolithic(model, middle_blocks) -> list:
    """The split runner's steps with the model's path: each equal to the full forward and to the
    monolithic runner's (TOL); returned for further checks."""
    steps = await _script(SplitRunner(model.encoder, model.decoder, LocalMiddle(middle_blocks), model.private_path))
    for ids, logits in steps:
        assert (logits - _reference(model, middle_blocks, ids)).abs().max().item() <= TOL
    mono = await _script(MonolithicRunner(model.encoder, middle_blocks, model.decoder, model.private_path))
    for (_, a), (_, b) in zip(steps, mono):
        assert (a - b).abs().max().item() <= TOL
    return steps


async def test_split_runner_equals_a_full_forward_with_the_same_noise(model, middle_blocks):
    steps = await _split_equals_reference_and_monolithic(model, middle_blocks)
    plain = await _script(SplitRunner(model.encoder, model.decoder, LocalMiddle(middle_blocks)))
    assert (plain[0][1] - steps[0][1]).abs().max().item() > 1e-2  # the path is really in force


async def test_through_the_real_cloud(model, middle_blocks, tiny_dir):
    with local_cloud_thread(tiny_dir, settings={"torch_threads": 1}) as cloud:  # the real service, in a thread
        middle = RemoteMiddle(cloud.base_url, cloud.token, hidden_size=model.spec.hidden_size)
        try:
            steps = await _script(SplitRunner(model.encoder, model.decoder, middle, model.private_path))
        finally:
            await middle.aclose()
    for ids, logits in steps:
        assert (logits - _reference(model, middle_blocks, ids)).abs().max().item() <= TOL


async def test_a_resent_prefix_carries_the_same_noise(model, middle_blocks):
    middle = RecordingMiddle(LocalMiddle(middle_blocks))

    async def send(ids: list[int], chunks: list[int]) -> torch.Tensor:
        runner = SplitRunner(model.encoder, model.decoder, middle, model.private_path)
        middle.events.clear()
        start = 0
        for n in chunks:
            await runner.run(ids[start : start + n])
            start += n
        await runner.close()
        return torch.cat(received(middle), dim=1)[0]  # [T, d]: every position as the cloud got it

    first = await send(IDS[:24], [24])
    again = await send(IDS[:24], [24])  # a new session over the same text: bit-identical
    chunked = await send(IDS[:24], [5, 1, 18])  # chunked otherwise: the same noise (the encoder's
    changed = IDS[:10] + [IDS[10] + 1] + IDS[11:24]  # float summation order differs a little)
    other = await send(changed, [24])
    assert torch.equal(first, again)
    assert (first - chunked).abs().max().item() < 1e-5  # a fresh draw would differ by ~0.4·rms
    assert torch.equal(first[:10], other[:10])
    assert ((first[10:] - other[10:]).abs().amax(-1) > 1e-3).all()  # from the change on: new noise
    runner = SplitRunner(model.encoder, model.decoder, middle, model.private_path)  # truncate + re-send
    middle.events.clear()
    await runner.run(IDS[:24])
    await runner.truncate(8)
    await runner.run(IDS[8:24])
    await runner.close()
    assert (received(middle)[1][0] - first[8:24]).abs().max().item() < 1e-5


async def test_a_completion_runs_through_the_path(model, middle_blocks):
    engine = CompletionEngine.split(model, LocalMiddle(middle_blocks),
                                    EngineConfig(stop=StopConfig(max_tokens=6, multiline=True)))
    async with engine.session() as session:
        first = await session.complete("def add(a, b):\n    return ", "\n")
        again = await session.complete("def add(a, b):\n    return ", "\n")
    assert first.text == again.text and again.reused_tokens > 0 and first.generated_tokens >= 1


# -- the clean residual: its own encoder pass and KV cache ------------------------------------------
CLEAN = PrivatePathConfig(enabled=True, residual="clean", noise=0.4, rank=16)


@pytest.fixture(scope="module")
def clean_model(tiny_dir) -> ClientModel:
    """A client whose clean table differs from the table it sends (as with INDVocab) and whose gate
    has moved, so every term of h_c + g ⊙ (y − sent) counts."""
    m = ClientModel.load(tiny_dir)
    gen = torch.Generator().manual_seed(1)
    table = m.encoder.embed_tokens.weight
    clean = table + 0.5 * table.std() * torch.randn(table.shape, generator=gen)
    path = PrivatePath(CLEAN, m.spec.hidden_size, SECRET, clean_table=clean)
    with torch.no_grad():
        path.gate.uniform_(0.3, 1.3, generator=gen)
    m.private_path = path.eval()
    return m


class StallingMiddle:
    """A LocalMiddle whose forward waits forever while `stall` is set (to cancel a step mid-flight)."""

    def __init__(self, inner):
        self.inner, self.stall = inner, False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def forward(self, hidden, positions, session):
        if self.stall:
            await asyncio.sleep(3600)
        return await self.inner.forward(hidden, positions, session)


async def test_clean_residual_incremental_decode_equals_split_logits(clean_model, middle_blocks):
    model = clean_model
    steps = await _split_equals_reference_and_monolithic(model, middle_blocks)
    plain_path = PrivatePath(replace(CLEAN, residual="local"), model.spec.hidden_size, SECRET)
    other = await _script(SplitRunner(model.encoder, model.decoder, LocalMiddle(middle_blocks), plain_path))
    assert (other[0][1] - steps[0][1]).abs().max().item() > 1e-2  # the clean residual is really in force


async def test_clean_residual_sends_what_the_path_sends_without_it(clean_model, middle_blocks):
    model, seen = clean_model, []
    plain_path = PrivatePath(replace(CLEAN, residual="local"), model.spec.hidden_size, SECRET)
    for path in (model.private_path, plain_path):
        middle = RecordingMiddle(LocalMiddle(middle_blocks))
        runner = SplitRunner(model.encoder, model.decoder, middle, path)
        await runner.run(IDS[:20])
        await runner.run([IDS[20]])
        await runner.close()
        seen.append(torch.cat(received(middle), dim=1))
    assert torch.equal(seen[0], seen[1])


async def test_clean_residual_step_cancelled_at_the_cloud_rolls_back(clean_model, middle_blocks):
    model = clean_model
    middle = StallingMiddle(LocalMiddle(middle_blocks))
    runner = SplitRunner(model.encoder, model.decoder, middle, model.private_path)
    await runner.run(IDS[:10])
    middle.stall = True
    task = asyncio.create_task(runner.run(IDS[10:16]))  # the clean pass has run, the cloud has not answered
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    middle.stall = False
    assert runner.length == 10
    logits = await runner.run(IDS[10:14])
    await runner.close()
    assert (logits - _reference(model, middle_blocks, IDS[:14])).abs().max().item() <= TOL
