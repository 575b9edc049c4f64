"""Scheduling FORWARD frames onto the compute worker: continuous batching of decode steps and
chunked prefill.

A decode step (T = 1, at most `decode_width` rows) joins the pending list; one DECODE-priority
job takes everything pending when it starts and runs it as one batch (SessionManager.decode_batch),
so sessions that step together share the blocks, each bit-identical to running alone. Any other
frame (a prefill) is admitted once (its whole KV growth checked against the quota and the budget
before anything is allocated) and then runs in chunks of about `prefill_chunk_tokens` positions,
each a NORMAL-priority job: between two chunks every pending decode step runs, so a large prefill
delays the others by one chunk at most. Chunk boundaries depend on the frame alone, never on
the load, so the result is the same whoever else is connected.

Steps of one session never overlap: a per-session lock orders them (HTTP and the stream alike)."""

from __future__ import annotations

import asyncio
import threading
from contextlib import asynccontextmanager

import torch

from server.metrics import Metrics
from server.sessions import SessionManager
from server.worker import DECODE, ComputeWorker
from umbra import wire


class Scheduler:
    def __init__(self, worker: ComputeWorker, manager: SessionManager, metrics: Metrics,
                 max_frame_bytes: int, prefill_chunk_tokens: int):
        self.worker, self.manager, self.metrics = worker, manager, metrics
        self.max_frame_bytes, self.chunk_tokens = max_frame_bytes, prefill_chunk_tokens
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}  # sid -> (lock, [holders + waiters])
        self._pending: list[tuple[str, str, wire.Frame, asyncio.Future]] = []
        self._pending_lock = threading.Lock()
        self._queued = False

    async def step(self, client: str, sid: str, data: bytes) -> bytes:
        """Run one FORWARD frame (wire bytes) of `client`'s session; returns the HIDDEN frame."""
        if len(data) > 256 * 1024:  # large frames are parsed off the event loop
            frame = await self.worker.run(wire.decode, data, self.max_frame_bytes, expect=wire.Kind.FORWARD)
        else:
            frame = wire.decode(data, self.max_frame_bytes, expect=wire.Kind.FORWARD)
        async with self._session(sid):
            if frame.hidden.shape[1] == 1 and frame.hidden.shape[0] <= self.manager.limits.decode_width:
                y = await self._decode(client, sid, frame)
            else:
                y = await self._prefill(client, sid, frame)
        return wire.encode(wire.hidden_frame(y))

    # -- per-session order -----------------------------------------------------------------------
    @asynccontextmanager
    async def _session(self, sid: str):
        lock, users = self._locks.setdefault(sid, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:  # nobody holds or waits for it: forget the session's lock
                self._locks.pop(sid, None)

    @property
    def pending_decodes(self) -> int:
        """Decode steps waiting for the next batch (a gauge: the queue the batch will take)."""
        with self._pending_lock:
            return len(self._pending)

    # -- decode: continuous batching -------------------------------------------------------------
    async def _decode(self, client: str, sid: str, frame: wire.Frame) -> torch.Tensor:
        fut = asyncio.get_running_loop().create_future()
        with self._pending_lock:
            self._pending.append((client, sid, frame, fut))
            queue_job, self._queued = not self._queued, True
        if queue_job:
            self.worker.submit(self._run_pending, asyncio.get_running_loop(), priority=DECODE)
        return await fut

    def _run_pending(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the worker: every step pending right now, as one batch."""
        with self._pending_lock:
            batch, self._pending, self._queued = self._pending, [], False
        try:
            results = self.manager.decode_batch([(c, s, f) for c, s, f, _ in batch])
        except Exception as exc:  # a bug in batching fails these steps, never the worker
            results = [exc] * len(batch)
        for (_, _, _, fut), result in zip(batch, results):
            loop.call_soon_threadsafe(_settle, fut, result)

    # -- prefill: admitted once, run in chunks ---------------------------------------------------
    async def _prefill(self, client: str, sid: str, frame: wire.Frame) -> torch.Tensor:
        start = await self.worker.run(self.manager.begin, client, sid, frame)
        b, t = frame.hidden.shape[:2]
        state = self.manager.runtime.sessions.get(sid)
        size = t if state is None or state.cache is None else max(1, self.chunk_tokens // b)
        outs = []
        try:
            for a in range(0, t, size):
                outs.append(await self.worker.run(self.manager.forward_chunk, client, sid, frame, a,
                                                  min(t, a + size), start))
                self.metrics.inc("umbra_cloud_prefill_chunks_total")
        except BaseException:
            await asyncio.shield(self.worker.run(self.manager.rollback, client, sid, start))
            raise
        y = torch.cat(outs, 1) if len(outs) > 1 else outs[0]
        return y[:, -frame.tail :] if frame.tail else y


def _settle(fut: asyncio.Future, result) -> None:
    if fut.done():
        return
    if isinstance(result, BaseException):
        fut.set_exception(result)
    else:
        fut.set_result(result)
