"""The benchmark's control (e): the bare-pipe middle computes exactly what the monolithic loop
computes, so its timings price the two-process split and nothing else."""

from __future__ import annotations

import torch

from bare_split import PipeMiddle
from umbra.engine.runner import MonolithicRunner, SplitRunner
from umbra.model.loader import load_client, load_middle
from umbra.model.parts import SplitPlan

IDS = torch.randint(5, 500, (24,), generator=torch.Generator().manual_seed(7)).tolist()


async def _script(runner) -> list[torch.Tensor]:
    out = [await runner.run(IDS[:16])]
    for i in range(16, 20):
        out.append(await runner.run([IDS[i]]))
    await runner.truncate(10)
    out.append(await runner.run(IDS[20:24]))
    await runner.close()
    return out


async def test_pipe_middle_matches_the_monolithic_loop(tiny_model_dirs):
    model_dir = tiny_model_dirs["qwen2-tied"]
    plan = SplitPlan(1, 2)
    encoder, decoder = load_client(model_dir, plan)
    pipe = PipeMiddle(model_dir, plan.encoder_blocks, plan.decoder_blocks, encoder.spec.hidden_size)
    try:
        split = await _script(SplitRunner(encoder, decoder, pipe))
        second = await _script(SplitRunner(encoder, decoder, pipe))  # a second session on the same child
    finally:
        await pipe.aclose()
    mono = await _script(MonolithicRunner(encoder, load_middle(model_dir, plan), decoder))
    for s, t, m in zip(split, second, mono, strict=True):
        torch.testing.assert_close(s, m, atol=1e-5, rtol=0)
        torch.testing.assert_close(t, m, atol=1e-5, rtol=0)
    assert not pipe._proc.is_alive()
