"""Sessions of many clients over one MiddleRuntime: ownership, limits, idle expiry and a KV
memory budget with LRU eviction — plus the single worker thread all of it runs on.

`SessionManager` is deliberately not thread-safe: every call goes through `ComputeWorker`,
whose one thread serializes all compute and all session bookkeeping (torch is compute-bound on
a few cores, so there is nothing to gain from parallel steps, and the event loop never blocks).
Evicted and expired sessions leave a tombstone visible only to their owner, who gets
SessionEvicted (HTTP 410: re-prefill into a new session); anybody else gets 404."""

from __future__ import annotations

import asyncio
import functools
import time
from collections import Counter, OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from server.errors import BudgetExceeded, OutOfSync, TooManySessions
from server.lora import LoraStore
from server.metrics import Metrics
from umbra.errors import SessionError, SessionEvicted, ValidationError
from umbra.middle.runtime import MiddleRuntime
from umbra.wire import Frame

_MAX_TOMBSTONES = 65536


@dataclass(frozen=True)
class Limits:
    max_sessions_per_client: int = 64
    idle_seconds: float = 900.0
    kv_budget_bytes: int = 4 * 1024**3


class ComputeWorker:
    """One thread for every model call and session change, in submission order."""

    def __init__(self, torch_threads: int | None = None):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="umbra-compute")
        if torch_threads:  # OpenMP's thread count is per calling thread: set it on the worker itself
            self._pool.submit(torch.set_num_threads, torch_threads).result()

    async def run(self, fn, *args, **kwargs):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class SessionManager:
    def __init__(self, runtime: MiddleRuntime, limits: Limits, metrics: Metrics, lora: LoraStore | None = None):
        self.runtime, self.limits, self.metrics = runtime, limits, metrics
        self.lora = lora  # per-client LoRA adapters (settings.lora), applied only to their owner's calls
        self.owners: dict[str, str] = {}  # session id -> client name
        self.lru: OrderedDict[str, float] = OrderedDict()  # session id -> last use, oldest first
        self.gone: OrderedDict[str, str] = OrderedDict()  # evicted/expired session id -> owner
        self.per_client: Counter[str] = Counter()
        self.kv_bytes = 0  # as of the last budget check (read by /metrics from another thread)

    # -- bookkeeping -------------------------------------------------------------------------------
    def open(self, owner: str, training: bool) -> str:
        if self.per_client[owner] >= self.limits.max_sessions_per_client:
            raise TooManySessions(f"client already holds {self.per_client[owner]} sessions "
                                  f"(limit {self.limits.max_sessions_per_client}); close some first")
        sid = self.runtime.create(training)
        self.owners[sid] = owner
        self.lru[sid] = time.monotonic()
        self.per_client[owner] += 1
        self.metrics.inc("umbra_cloud_sessions_opened_total")
        return sid

    def own(self, owner: str, sid: str, *, inference: bool = False):
        """The session's state if `owner` holds it; SessionEvicted / SessionError otherwise."""
        if self.owners.get(sid) != owner:
            if self.gone.get(sid) == owner:
                raise SessionEvicted("session was evicted (KV memory budget) or expired (idle); "
                                     "open a new session and re-prefill")
            raise SessionError("unknown session")
        state = self.runtime.get(sid)
        if inference and state.training:
            raise ValidationError("this is a training session; streaming needs an inference session")
        self.lru[sid] = time.monotonic()
        self.lru.move_to_end(sid)
        return state

    def _drop(self, sid: str, tombstone: bool) -> None:
        self.runtime.sessions.pop(sid, None)
        owner = self.owners.pop(sid)
        self.lru.pop(sid, None)
        self.per_client[owner] -= 1
        if not self.per_client[owner]:
            del self.per_client[owner]
        if tombstone:
            self.gone[sid] = owner
            while len(self.gone) > _MAX_TOMBSTONES:
                self.gone.popitem(last=False)

    def close(self, owner: str, sid: str) -> None:
        self.own(owner, sid)
        self._drop(sid, tombstone=False)
        self.kv_bytes = self._total_bytes()

    def truncate(self, owner: str, sid: str, length: int) -> None:
        self.own(owner, sid)
        self.runtime.truncate(sid, length)

    def expire_idle(self, now: float | None = None) -> int:
        now = time.monotonic() if now is None else now
        expired = [sid for sid, used in self.lru.items() if now - used > self.limits.idle_seconds]
        for sid in expired:
            self._drop(sid, tombstone=True)
        if expired:
            self.metrics.inc("umbra_cloud_sessions_expired_total", len(expired))
            self.kv_bytes = self._total_bytes()
        return len(expired)

    def _total_bytes(self) -> int:
        return sum(s.nbytes for s in self.runtime.sessions.values())

    def _enforce_budget(self, sid: str) -> None:
        budget = self.limits.kv_budget_bytes
        own = self.runtime.sessions[sid].nbytes
        if own > budget:
            self._drop(sid, tombstone=False)
            raise BudgetExceeded(f"this session needs {own} bytes of KV cache, more than the server's "
                                 f"whole budget of {budget} bytes; use a shorter context")
        total = self._total_bytes()
        for victim in [v for v in self.lru if v != sid]:  # least recently used first
            if total <= budget:
                break
            total -= self.runtime.sessions[victim].nbytes
            self._drop(victim, tombstone=True)
            self.metrics.inc("umbra_cloud_sessions_evicted_total")
        self.kv_bytes = total

    # -- compute -----------------------------------------------------------------------------------
    def forward(self, owner: str, sid: str, frame: Frame) -> torch.Tensor:
        state = self.own(owner, sid)
        if frame.start is not None and frame.start != state.length:
            raise OutOfSync(f"session holds {state.length} positions but the step expects {frame.start}")
        y = self.runtime.forward(sid, frame.hidden, frame.positions, frame.key_padding,
                                 adapters=self._adapters(owner, training=False))
        self.metrics.inc("umbra_cloud_tokens_processed_total", frame.hidden.shape[0] * frame.hidden.shape[1])
        self._enforce_budget(sid)
        return y[:, -frame.tail :] if frame.tail else y

    def backward(self, owner: str, sid: str, grad: torch.Tensor) -> torch.Tensor:
        self.own(owner, sid)
        grad_in = self.runtime.backward(sid, grad, adapters=self._adapters(owner, training=True))
        if self.lora is not None:
            self.lora.after_backward(owner)  # the owner's adapter takes its step (if training)
        return grad_in

    def _adapters(self, owner: str, *, training: bool):
        """The owner's own LoRA (if any) as the adapters of its calls; nobody else's."""
        return self.lora.adapters_for(owner, training=training) if self.lora is not None else None
