"""Scheduling FORWARD frames onto the compute worker: continuous batching of decode steps and
chunked prefill.

A decode step (T = 1, at most `decode_width` rows) joins the pending list; one DECODE-priority
job takes everything pending when it starts and runs it as one batch (SessionManager.decode_batch),
so sessions that step together share the blocks, each bit-identical to running alone. Sessions
step together only if the batch waits for them: their clients answer the last slab one after
another, and a job started on the first arrival would split them over two slabs of the same cost.
So a decode step that finds the worker free is held back while sessions are due back soon: each
session's last answer-to-next-step gap predicts its next arrival, and the batch waits while any
session answered since is due within `gather_s` (or overdue by less) — sessions answered during
the wait included, so two groups that drifted apart merge again — until the slab is full or the
worker has been free for `gather_s` (a slab that ends restarts the wait: holding a batch while
the worker is busy costs it nothing). A lone session never waits, nor one whose partners take
longer than `gather_s` between steps; one of several in step waits at most `gather_s` of free
worker time, and none waits for a session whose stream ended or that was closed (`forget`).

Any other frame (a prefill) is admitted once (its whole KV growth checked against the quota and the budget
before anything is allocated) and then runs in chunks of about `prefill_chunk_tokens` positions,
each a NORMAL-priority job: between two chunks every pending decode step runs, so a large prefill
delays the others by one chunk at most. Chunk boundaries depend on the frame alone, never on
the load, so the result is the same whoever else is connected.

Steps of one session never overlap: a per-session lock orders them (HTTP and the stream alike)."""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from contextlib import asynccontextmanager

import torch

from server.metrics import Metrics
from server.sessions import SessionManager
from server.worker import DECODE, ComputeWorker
from umbra import wire


_QUIET_S = 1.0  # a session not back this long after its answer is forgotten (never waited for)


class Scheduler:
    def __init__(self, worker: ComputeWorker, manager: SessionManager, metrics: Metrics,
                 max_frame_bytes: int, prefill_chunk_tokens: int, gather_s: float = 0.0):
        self.worker, self.manager, self.metrics = worker, manager, metrics
        self.max_frame_bytes, self.chunk_tokens = max_frame_bytes, prefill_chunk_tokens
        self.gather_s = gather_s
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}  # sid -> (lock, [holders + waiters])
        self._pending: list[tuple[str, str, wire.Frame, asyncio.Future]] = []
        self._pending_lock = threading.Lock()
        self._queued = False
        # event-loop side (times are loop.time()): sid -> (when its last decode step was answered,
        # the gap before that step), oldest first, for sessions not back yet; sid -> gap, for steps
        # in flight; the timer that ends a held-back batch's wait
        self._answered: OrderedDict[str, tuple[float, float | None]] = OrderedDict()
        self._gaps: dict[str, float] = {}
        self._running: set[str] = set()  # sessions of the slab the worker runs now
        self._gather: asyncio.TimerHandle | None = None
        self._held = False  # a batch is held back (its timer may have run out while a slab runs)

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

    def forget(self, sid: str) -> None:
        """The session's stream ended or it was closed: never wait for it (a held batch that was
        waiting only for it goes now)."""
        if self._answered.pop(sid, None) is not None and self._held:
            loop = asyncio.get_running_loop()
            if not self._due(loop.time()):
                self._submit(loop)

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
        loop = asyncio.get_running_loop()
        now, fut = loop.time(), loop.create_future()
        answered = self._answered.pop(sid, None)
        if answered is not None:
            self._gaps[sid] = now - answered[0]
        with self._pending_lock:
            self._pending.append((client, sid, frame, fut))
            idle, full = not self._queued, len(self._pending) >= self.manager.limits.decode_width
        if idle:
            if full or not self._due(now):
                self._submit(loop)
            elif not self._held:
                self._held = True
                self._arm(loop)
        return await fut

    def _due(self, now: float) -> bool:
        """Is a session due back within `gather_s`: one in the running slab whose last gap is
        shorter, or one answered (a decode step or a prefill) whose next step is due by then (by
        its last gap; after a prefill or a first step, 0) or overdue by less?"""
        if self.gather_s <= 0:
            return False
        while self._answered and next(iter(self._answered.values()))[0] < now - _QUIET_S:
            self._answered.popitem(last=False)  # gone quiet: its completion ended (or its client is slow)
        return (any(self._gaps.get(sid, 0.0) <= self.gather_s for sid in self._running)
                or any(abs(answered + (gap or 0.0) - now) <= self.gather_s
                       for answered, gap in self._answered.values()))

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """(Re)start the held batch's wait: `gather_s` from now."""
        if self._gather is not None:
            self._gather.cancel()
        self._gather = loop.call_later(self.gather_s, self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """The held batch's wait ran out: it goes, unless a slab is running — then the worker was
        not free all that time, and the slab's end restarts the wait (_settle_batch)."""
        self._gather = None
        if not self._running:
            self._submit(loop)

    def _submit(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop: queue one job that takes every pending step (unless one is queued already)."""
        if self._gather is not None:
            self._gather.cancel()
            self._gather = None
        self._held = False
        with self._pending_lock:
            if self._queued or not self._pending:
                return
            self._queued = True
        self.worker.submit(self._run_pending, loop, priority=DECODE)

    def _run_pending(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the worker: every step pending right now, as one batch."""
        with self._pending_lock:
            batch, self._pending, self._queued = self._pending, [], False
        loop.call_soon_threadsafe(self._running.update, [sid for _, sid, _, _ in batch])
        try:
            results = self.manager.decode_batch([(c, s, f) for c, s, f, _ in batch])
        except Exception as exc:  # a bug in batching fails these steps, never the worker
            results = [exc] * len(batch)
        loop.call_soon_threadsafe(self._settle_batch, batch, results)

    def _settle_batch(self, batch: list, results: list) -> None:
        """On the loop: answer a slab's steps; its sessions are now awaited back."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        for (_, sid, _, fut), result in zip(batch, results):
            self._running.discard(sid)
            gap = self._gaps.pop(sid, None)
            if not isinstance(result, BaseException):
                self._answered.pop(sid, None)
                self._answered[sid] = (now, gap)
            _settle(fut, result)
        if self._held:  # a batch held while this slab ran: its wait starts now
            self._arm(loop)

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
        self._answered.pop(sid, None)
        self._answered[sid] = (asyncio.get_running_loop().time(), None)  # its first decode step is due
        return y[:, -frame.tail :] if frame.tail else y


def _settle(fut: asyncio.Future, result) -> None:
    if fut.done():
        return
    if isinstance(result, BaseException):
        fut.set_exception(result)
    else:
        fut.set_result(result)
