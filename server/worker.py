"""The compute worker: one thread runs every model call and session change, highest priority
first, in submission order within a priority.

Decode slabs (server/scheduler.py) go before everything else, so a decode step waits at most for
the one job already running — a prefill chunk, bounded by `prefill_chunk_tokens` — never for a
queue of them. One thread because torch is compute-bound on a few cores (batching, not parallel
steps, is what raises throughput) and it keeps SessionManager free of locks. Once the middle
is loaded, each job runs as one scheduler step of its device (`use`): on a CUDA device on a stream
of its own, waited for before its result is handed back (umbra/model/transfer.py); on the CPU as is."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import queue
import threading
from concurrent.futures import Future

import torch

from umbra.model.transfer import Transfer

DECODE, NORMAL = 0, 1  # priorities: lower runs first
_STOP = -1


class ComputeWorker:
    def __init__(self, torch_threads: int | None = None):
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._seq = itertools.count()
        self._transfer: Transfer | None = None  # the middle's device, once loaded (`use`)
        self._thread = threading.Thread(target=self._loop, name="umbra-compute", daemon=True)
        self._thread.start()
        if torch_threads:  # OpenMP's thread count is per calling thread: set it on the worker itself
            self.submit(torch.set_num_threads, torch_threads).result()

    def use(self, transfer: Transfer) -> None:
        """From the next job on, run each job as one step of `transfer`'s device."""
        self._transfer = transfer

    def submit(self, fn, *args, priority: int = NORMAL, **kwargs) -> Future:
        fut: Future = Future()
        self._queue.put((priority, next(self._seq), fut, functools.partial(fn, *args, **kwargs)))
        return fut

    async def run(self, fn, *args, priority: int = NORMAL, **kwargs):
        return await asyncio.wrap_future(self.submit(fn, *args, priority=priority, **kwargs))

    def _loop(self) -> None:
        while True:
            priority, _, fut, fn = self._queue.get()
            if priority == _STOP:
                return
            if not fut.set_running_or_notify_cancel():
                continue
            transfer = self._transfer
            try:
                with contextlib.nullcontext() if transfer is None else transfer.step():
                    result = fn()
            except BaseException as exc:  # handed to the awaiting coroutine
                fut.set_exception(exc)
            else:
                fut.set_result(result)

    def shutdown(self) -> None:
        """Finish the running job, cancel the queued ones, stop the thread."""
        self._queue.put((_STOP, -1, None, None))
        self._thread.join()
        while True:
            try:
                _, _, fut, _ = self._queue.get_nowait()
            except queue.Empty:
                return
            if fut is not None:
                fut.cancel()
