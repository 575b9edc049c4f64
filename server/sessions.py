"""Sessions of many clients over one MiddleRuntime: ownership, limits, idle expiry, and KV memory
that is checked before it is spent — a per-client quota and a server-wide budget.

Every growth of a KV cache is admitted first: its size after the growth is known from the
frame's header (batch x length x layers x kv heads x head dim), and a client over its quota makes
room by losing its own least recently used sessions, never anybody else's. When the server's
whole budget is held by other clients the step is refused with 503 (retry later); a session that
alone needs more than the client's quota gets 413.

`SessionManager` is deliberately not thread-safe: every call goes through the ComputeWorker
(server/worker.py), whose one thread serializes all compute and all session bookkeeping.
Evicted and expired sessions leave a tombstone visible only to their owner, who gets
SessionEvicted (HTTP 410: re-prefill into a new session); anybody else gets 404."""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from dataclasses import dataclass

import torch

from server.errors import BatchTooLarge, BudgetExceeded, OutOfSync, ServerBusy, TooManySessions
from umbra.middle.lora_store import LoraStore
from server.metrics import Metrics
from umbra.errors import SessionError, SessionEvicted, ValidationError
from umbra.middle.runtime import MiddleRuntime
from umbra.model.batch_decode import GROUP_SLOTS, DecodeStep, decode_slab, slab_width, slabs
from umbra.wire import Frame

_MAX_TOMBSTONES = 65536


@dataclass(frozen=True)
class Limits:
    max_sessions_per_client: int = 64
    idle_seconds: float = 900.0
    kv_budget_bytes: int = 4 * 1024**3
    kv_client_quota_bytes: int = 1024**3  # one client's sessions together
    max_batch_rows: int = 64  # rows (B) of one frame
    decode_widths: tuple[int, ...] = (16, 32, 64)  # slab widths, ascending (checked row-invariant)
    group_slots: int = GROUP_SLOTS  # longest attention (slots) gathered with others (umbra/model/ragged_attention.py)

    @property
    def decode_width(self) -> int:
        """Most rows of one batched decode slab."""
        return self.decode_widths[-1]


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
        state = self.check(owner, sid, inference=inference)
        state.last_used = self.lru[sid] = time.monotonic()
        self.lru.move_to_end(sid)
        return state

    def check(self, owner: str, sid: str, *, inference: bool = False):
        """`own` without marking the session used: it only reads, so the event loop may call it
        while the compute worker runs (a WebSocket handshake need not queue behind a step)."""
        if self.owners.get(sid) != owner:
            if self.gone.get(sid) == owner:
                raise SessionEvicted("session was evicted (KV memory budget) or expired (idle); "
                                     "open a new session and re-prefill")
            raise SessionError("unknown session")
        state = self.runtime.sessions.get(sid)
        if state is None:  # dropped by the worker between the two reads
            raise SessionError("unknown session")
        if inference and state.training:
            raise ValidationError("this is a training session; streaming needs an inference session")
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

    def client_bytes(self, owner: str) -> int:
        return sum(self.runtime.sessions[sid].nbytes for sid, o in self.owners.items() if o == owner)

    def _admit(self, owner: str, sid: str, batch: int, needed: int) -> None:
        """Make room for session `sid` to hold `batch` x `needed` slots, before any allocation:
        the owner's own LRU sessions go first; nobody else's ever do."""
        cache = self.runtime.sessions[sid].cache
        before, after = cache.nbytes, cache.bytes_after(batch, needed)
        if after <= before:
            return
        quota, budget = self.limits.kv_client_quota_bytes, self.limits.kv_budget_bytes
        if after > min(quota, budget):
            raise BudgetExceeded(f"this session needs {after} bytes of KV cache, more than this client's "
                                 f"quota of {min(quota, budget)} bytes; use a shorter context or a smaller batch")
        # while the cache grows, old and new buffers are both alive: count both against the budget
        own, total = self.client_bytes(owner), self._total_bytes()
        victims = [v for v in self.lru if v != sid and self.owners[v] == owner]  # least recently used first
        if total - sum(self.runtime.sessions[v].nbytes for v in victims) + after > budget:
            self.metrics.inc("umbra_cloud_budget_refusals_total")  # refuse before evicting in vain
            raise ServerBusy("the server's KV memory is held by other clients' sessions; retry later")
        while victims and (own - before + after > quota or total + after > budget):
            victim = victims.pop(0)
            freed = self.runtime.sessions[victim].nbytes
            self._drop(victim, tombstone=True)
            own, total = own - freed, total - freed
            self.metrics.inc("umbra_cloud_sessions_evicted_total")
        self.kv_bytes = total
        if total + after > budget:
            self.metrics.inc("umbra_cloud_budget_refusals_total")
            raise ServerBusy("the server's KV memory is held by other clients' sessions; retry later")

    def _check_rows(self, frame: Frame) -> None:
        rows = frame.hidden.shape[0]
        if rows > self.limits.max_batch_rows:
            raise BatchTooLarge(f"a frame holds at most {self.limits.max_batch_rows} rows, got {rows}")

    # -- compute -----------------------------------------------------------------------------------
    def begin(self, owner: str, sid: str, frame: Frame) -> int:
        """Check a FORWARD frame against the session and reserve its whole KV growth (admitted
        first); returns the session's length before it. The frame then runs in chunks."""
        state = self.own(owner, sid)
        self._check_rows(frame)
        if frame.start is not None and frame.start != state.length:
            raise OutOfSync(f"session holds {state.length} positions but the step expects {frame.start}")
        self.runtime.validate(state, frame.hidden, frame.positions, frame.key_padding)
        b, t = frame.hidden.shape[:2]
        if state.cache is not None:
            before = state.cache.nbytes
            self._admit(owner, sid, b, state.length + t)
            state.cache.reserve(b, state.length + t)
            if state.cache.nbytes != before:  # most steps fit the capacity: no sum over every session
                self.kv_bytes = self._total_bytes()
        self.metrics.inc("umbra_cloud_tokens_processed_total", b * t)
        return state.length

    def forward_chunk(self, owner: str, sid: str, frame: Frame, a: int, b: int, start: int) -> torch.Tensor:
        """Positions [a, b) of a frame admitted by `begin` (the session then holds start + a)."""
        state = self.own(owner, sid)
        if state.length != start + a:
            raise OutOfSync(f"session holds {state.length} positions but the chunk expects {start + a}")
        kp = frame.key_padding
        kp = None if kp is None else kp[:, : start + b]
        return self.runtime.forward(sid, frame.hidden[:, a:b], frame.positions[:, a:b], kp,
                                    adapters=self._adapters(owner, training=False))

    def rollback(self, owner: str, sid: str, start: int) -> None:
        """Undo a frame that failed midway: the session keeps its first `start` positions."""
        if self.owners.get(sid) == owner:
            state = self.runtime.sessions[sid]
            if state.cache is not None and state.length > start:
                state.cache.truncate(start)

    def batchable(self, owner: str, sid: str, frame: Frame) -> bool:
        state = self.runtime.sessions.get(sid)
        return (state is not None and state.cache is not None and frame.hidden.shape[1] == 1
                and frame.hidden.shape[0] <= self.limits.decode_width
                and self._adapters(owner, training=False) is None)

    def decode_batch(self, items: list[tuple[str, str, Frame]]) -> list[torch.Tensor | Exception]:
        """One decode step of each item (owner, session, T=1 frame), batched through the blocks
        (umbra/model/batch_decode.py); each result equals the step run alone, bit for bit.
        Items that cannot be batched (training sessions, adapters, wide frames) run alone here;
        a failure is that item's result only. A session listed twice runs its steps in order."""
        results: list[torch.Tensor | Exception | None] = [None] * len(items)
        todo = list(range(len(items)))
        while todo:
            seen, later, run = set(), [], []
            for i in todo:
                (later if items[i][1] in seen else run).append(i)
                seen.add(items[i][1])
            self._decode_round(items, run, results)
            todo = later
        return results

    def _decode_round(self, items, idx: list[int], results: list) -> None:
        ready: list[int] = []
        for i in idx:
            owner, sid, frame = items[i]
            try:
                if not self.batchable(owner, sid, frame):
                    results[i] = self._whole(owner, sid, frame)
                    continue
                self.begin(owner, sid, frame)
                ready.append(i)
            except Exception as exc:  # this item's error only
                results[i] = exc
        steps = []
        for i in ready:
            owner, sid, frame = items[i]
            state = self.runtime.sessions[sid]
            io = self.runtime.transfer  # cast at the edge: the wire's dtype and the CPU outside, the blocks' inside
            kp = None if frame.key_padding is None else io.to_device(frame.key_padding)
            steps.append(DecodeStep(io.to_device(frame.hidden, self.runtime.dtype), io.to_device(frame.positions),
                                    state.cache, kp))
        widths = self.limits.decode_widths
        for group in slabs(steps, widths[-1]):
            width = slab_width(sum(steps[j].rows for j in group), widths)
            outs = decode_slab(self.runtime.blocks.stack, [steps[j] for j in group], width, self.limits.group_slots)
            self.metrics.inc("umbra_cloud_decode_slabs_total")
            self.metrics.inc("umbra_cloud_decode_batched_steps_total", len(group))
            for j, y in zip(group, outs):
                i = ready[j]
                results[i] = self.runtime.transfer.to_host(y, items[i][2].hidden)

    def _whole(self, owner: str, sid: str, frame: Frame) -> torch.Tensor:
        start = self.begin(owner, sid, frame)
        try:
            y = self.forward_chunk(owner, sid, frame, 0, frame.hidden.shape[1], start)
        except Exception:
            self.rollback(owner, sid, start)
            raise
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
