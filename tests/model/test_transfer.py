"""umbra/model/transfer.py: the cloud's host <-> device edge. On the CPU every call is the plain
`.to()` it replaces (same tensors, same bits, nothing pinned, no stream); on a CUDA device frames
go through pinned host buffers and each step runs on a stream of its own."""

from __future__ import annotations

import pytest
import torch

from umbra.model.transfer import Transfer

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA accelerator")


def test_on_the_cpu_the_edge_is_the_plain_cast():
    io = Transfer("cpu")
    x = torch.randn(2, 3, 8)
    assert io.to_device(x) is x  # nothing to do: no copy
    y = io.to_device(x, torch.bfloat16)
    assert y.dtype == torch.bfloat16 and torch.equal(y, x.to(torch.bfloat16)) and not y.is_pinned()
    back = io.to_host(y, like=x)
    assert back.dtype == torch.float32 and torch.equal(back, x.to(torch.bfloat16).float()) and not back.is_pinned()
    assert io.to_host(x, like=x) is x
    positions = torch.arange(5)[None]
    assert io.to_device(positions) is positions


def test_on_the_cpu_a_step_is_nothing():
    io = Transfer("cpu")
    with io.step() as stream:
        assert stream is None
        y = io.to_device(torch.ones(3), torch.float16)
    assert y.dtype == torch.float16


def test_a_step_hands_back_an_error_unchanged():
    with pytest.raises(ValueError, match="boom"), Transfer("cpu").step():
        raise ValueError("boom")


@needs_cuda
def test_on_cuda_frames_go_through_pinned_buffers():
    io = Transfer("cuda")
    x = torch.randn(4, 1, 64)
    with io.step():
        d = io.to_device(x, torch.bfloat16)
        assert d.device.type == "cuda" and d.dtype == torch.bfloat16
        back = io.to_host(d * 2, like=x)
    assert back.is_pinned() and back.device.type == "cpu" and back.dtype == torch.float32
    assert torch.equal(back, (x.to(torch.bfloat16) * 2).float())
    pinned = torch.randn(3).pin_memory()
    assert torch.equal(io.to_device(pinned).cpu(), pinned)
    on_device = torch.randn(3, device="cuda")
    assert io.to_host(on_device, like=on_device) is on_device  # a caller on the device stays there
    outside = io.to_host(on_device * 3, like=x[:1, 0, :3].reshape(3))  # outside a step: waited for too
    assert outside.is_pinned() and torch.equal(outside, (on_device * 3).cpu())


@needs_cuda
def test_on_cuda_each_step_runs_on_a_stream_of_its_own():
    io = Transfer("cuda", streams=2)
    default = torch.cuda.default_stream()
    seen = []
    for _ in range(4):
        with io.step() as stream:
            assert torch.cuda.current_stream() == stream != default
            seen.append(stream)
    assert seen[0] != seen[1] and seen[0] == seen[2] and seen[1] == seen[3]
    assert torch.cuda.current_stream() == default  # restored after each step
    queued = torch.full((1 << 20,), 2.0, device="cuda") * 3  # on the default stream, before the step
    with io.step():
        total = io.to_host(queued.sum(), like=torch.zeros(()))
    assert total.item() == 6.0 * (1 << 20)
