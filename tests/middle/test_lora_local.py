"""LoraLocalMiddle (umbra/middle/lora_local.py): the in-process middle with one client's LoRA steps
exactly as the cloud service does with `--lora` for the same seed — the same outputs, input
gradients and adapter after each training backward; frozen, it stops stepping; B = 0 at the start."""

from __future__ import annotations

import pytest
import torch

from server.launch import local_cloud_thread
from umbra.middle.local import LocalMiddle
from umbra.middle.lora_local import LoraLocalMiddle
from umbra.middle.lora_store import LoraConfig
from umbra.middle.remote import RemoteMiddle
from umbra.model.loader import load_middle
from umbra.tuning.cloud_lora import CloudLora, CloudLoraConfig

STEPS = 3


@pytest.fixture(scope="module")
def base_dir(fim_qwen2_dir):
    return fim_qwen2_dir


def _traffic(hidden_size: int):
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(2, 6, hidden_size, generator=gen), torch.randn(2, 6, hidden_size, generator=gen))
            for _ in range(STEPS)]


async def _train(middle, traffic) -> list[tuple[torch.Tensor, torch.Tensor]]:
    session = await middle.open_session(training=True)
    out = []
    for hidden, grad in traffic:
        y = await middle.forward(hidden, torch.arange(6).expand(2, 6), session)
        out.append((y, await middle.backward(grad, session)))
    await middle.close(session)
    return out


async def test_steps_exactly_as_the_cloud_service(base_dir):
    blocks = load_middle(base_dir)
    traffic = _traffic(blocks.spec.hidden_size)
    local = LoraLocalMiddle(blocks, LoraConfig(rank=4, alpha=8.0, lr=1e-2, seed=0))
    mine = await _train(local, traffic)
    assert local.steps == STEPS
    with local_cloud_thread(base_dir, settings={"lora": True, "torch_threads": 1}) as cloud:
        async with CloudLora(cloud.base_url, cloud.token) as lora:
            await lora.configure(CloudLoraConfig(rank=4, alpha=8.0, lr=1e-2, seed=0))
            remote = RemoteMiddle(cloud.base_url, cloud.token, hidden_size=blocks.spec.hidden_size)
            try:
                theirs = await _train(remote, traffic)
            finally:
                await remote.aclose()
            served = cloud.server.config.app.state.cloud.manager.lora.adapters["local"].adapter
    for (y_a, g_a), (y_b, g_b) in zip(mine, theirs):
        assert torch.equal(y_a, y_b)
        assert torch.equal(g_a, g_b)
    for (name, a), (_, b) in zip(sorted(local.adapter.state_dict().items()), sorted(served.state_dict().items())):
        assert torch.equal(a, b), name


async def test_starts_as_the_plain_middle_and_stops_stepping_when_frozen(base_dir):
    blocks = load_middle(base_dir)
    traffic = _traffic(blocks.spec.hidden_size)
    plain, lora = LocalMiddle(blocks), LoraLocalMiddle(blocks, LoraConfig(rank=2, lr=1e-2, seed=1))
    first_plain = (await _train(plain, traffic[:1]))[0][0]
    first_lora = (await _train(lora, traffic[:1]))[0][0]
    assert torch.equal(first_plain, first_lora)  # B = 0 until the first step
    before = {k: v.clone() for k, v in lora.adapter.state_dict().items()}
    assert lora.steps == 1 and any(v.abs().sum() > 0 for k, v in before.items() if k.endswith(".b"))
    lora.set_training(False)
    await _train(lora, traffic[1:])
    assert lora.steps == 1
    assert all(torch.equal(before[k], v) for k, v in lora.adapter.state_dict().items())
    session = await lora.open_session()
    y = await lora.forward(traffic[0][0], torch.arange(6).expand(2, 6), session)
    assert not torch.allclose(y, await plain.forward(traffic[0][0], torch.arange(6).expand(2, 6),
                                                     await plain.open_session()))
