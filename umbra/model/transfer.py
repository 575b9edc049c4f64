"""Frames between the host and the middle's device (issue 61, point 2).

Frames arrive and leave on the CPU in the client's dtype (the wire's); the middle runs on its own
device in its own dtype, and the cast happens at this edge. On a CUDA device:

  * host buffers are pinned: a frame is staged in page-locked memory and copied to the device
    asynchronously, and a result is copied back into a page-locked buffer (the DMA engine reads
    and writes it directly, no bounce through a pageable staging copy);
  * every scheduler step (one job of the compute worker: a decode slab, a prefill chunk) runs on a
    CUDA stream of its own, taken in turn from a small pool, and ends by waiting for that stream,
    so what it hands back is complete, while the copies and kernels of one step never wait behind
    another step's work on the default stream.

On the CPU every one of these is the plain `.to()` it replaces: no copy that was not made before,
no stream, the same tensors and bits.

    transfer = Transfer(device)
    with transfer.step():                       # the compute worker, around each job
        x = transfer.to_device(frame.hidden, dtype)
        y = blocks(x, ...)
        out = transfer.to_host(y, frame.hidden)"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator

import torch

STREAMS = 2  # CUDA streams a device's steps take in turn (one per step; the worker runs one at a time)


class Transfer:
    """Host <-> `device` copies of frames and the per-step CUDA stream; no-ops off CUDA."""

    def __init__(self, device: torch.device | str, streams: int = STREAMS):
        self.device = torch.device(device)
        self._pool = [torch.cuda.Stream(self.device) for _ in range(max(1, streams))] if self.cuda else []
        self._next = itertools.count()

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def to_device(self, t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """`t` (a host tensor) on the device, in `dtype` (default: its own). On CUDA: staged in a
        pinned buffer and copied on the current stream without blocking the host."""
        dtype = t.dtype if dtype is None else dtype
        if not self.cuda or t.device.type != "cpu":
            return t.to(self.device, dtype)
        staged = t if t.is_pinned() else torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t)
        return staged.to(self.device, non_blocking=True).to(dtype)

    def to_host(self, t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """`t` (a result on the device) where the frame `like` came from, in its dtype. From CUDA to
        the host: into a pinned buffer, waited for here (outside a step too), so the caller may
        read it at once. Anything else: `t.to(like.device, like.dtype)`."""
        if not self.cuda or t.device.type != "cuda" or like.device.type != "cpu":
            return t.to(like.device, like.dtype)
        out = torch.empty(t.shape, dtype=like.dtype, pin_memory=True)
        out.copy_(t.to(like.dtype), non_blocking=True)
        torch.cuda.current_stream(self.device).synchronize()
        return out

    @contextlib.contextmanager
    def step(self) -> Iterator[torch.cuda.Stream | None]:
        """One scheduler step: on CUDA its own stream (after the work already queued on the default
        stream, e.g. loading, and waited for at the end); elsewhere nothing."""
        if not self.cuda:
            yield None
            return
        stream = self._pool[next(self._next) % len(self._pool)]
        stream.wait_stream(torch.cuda.default_stream(self.device))
        with torch.cuda.device(self.device), torch.cuda.stream(stream):
            try:
                yield stream
            finally:
                stream.synchronize()
