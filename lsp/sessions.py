"""SessionPool: one warm CompletionSession per key (an editor document, an HTTP session id).

    result = await pool.run(key, engine.new_session, lambda s: s.complete(prefix, suffix))

- Prefix reuse: consecutive requests on a key share the session's KV caches (client and cloud).
- One request per key in its session: a newer request on a key cancels every older one still
  running or waiting (each gets CancelledError at the engine's next cancellation point, i.e.
  within the decode step in flight; the session's caches stay consistent — the engine rolls
  back a half-done step) and enters the session only once they have all unwound. Under rapid
  typing the keystrokes in between never decode: only the newest request runs.
  `superseded(task)` tells a caller why its task was cancelled; `supersede(key)` cancels a key's
  requests for a newer answer that needs no decode (the type-ahead, lsp/typeahead.py).
- Counted (`stats()`): requests inside a session now, decodes started, and the most ever inside
  one key's session at once — 1 by construction, kept so that a test and `umbra/stats` can
  check it from the outside.
- Bounded: past `max_sessions` the least recently used idle session is closed (its key simply
  starts over, in full, next time). A request is never cancelled to make room: while every
  session has a request in it, the pool holds more than `max_sessions` and closes the extra
  idle ones as those requests end. Each session also holds one cloud session, and the cloud
  caps those per client.
- `release(key)` (didClose) lets a key go at once, before the caller's next await, and closes its
  session in the background; `close(key)` (DELETE) waits for that close; `close_all()` (shutdown)
  closes every session, the background closes included."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from umbra.engine import CompletionSession
from umbra.errors import UmbraError

T = TypeVar("T")
log = logging.getLogger("umbra.lsp")


@dataclass(frozen=True)
class PoolStats:
    running: int  # requests inside their key's session now (prefill or decode), all keys
    started: int  # requests that entered their key's session since the pool was made
    max_per_key: int  # the most ever inside one key's session at the same time (one, or zero before any)


class SessionPool:
    def __init__(self, max_sessions: int = 16):
        if max_sessions < 1:
            raise ValueError("max_sessions must be >= 1")
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, CompletionSession] = OrderedDict()
        self._requests: dict[str, set[asyncio.Task]] = {}  # per key: running, unwinding or waiting to enter
        self._inside: dict[str, int] = {}  # per key: requests inside its session now
        self._started = 0
        self._max_per_key = 0
        self._superseded: set[asyncio.Task] = set()
        self._closing: set[asyncio.Task] = set()

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: str) -> bool:
        return key in self._sessions

    def stats(self) -> PoolStats:
        return PoolStats(sum(self._inside.values()), self._started, self._max_per_key)

    def superseded(self, task: asyncio.Task) -> bool:
        """True if `task` was cancelled because a newer request on its key replaced it."""
        return task in self._superseded

    def supersede(self, key: str) -> None:
        """Cancel the key's requests other than the current task's: a newer answer replaces them."""
        me = asyncio.current_task()
        self._cancel((t for t in self._requests.get(key, ()) if t is not me), superseded=True)

    async def run(self, key: str, new_session: Callable[[], CompletionSession],
                  fn: Callable[[CompletionSession], Awaitable[T]]) -> T:
        """`fn(session)` on the key's session (made with `new_session` if absent), in the current
        task, once every older request on the key has been cancelled and has unwound."""
        me = asyncio.current_task()
        requests = self._requests.setdefault(key, set())
        older = [t for t in requests if not t.done()]
        self._cancel(older, superseded=True)
        requests.add(me)
        try:
            if older:  # they stop at their next cancellation point; a newer request cancels this wait
                await asyncio.wait(older)
            session = self._sessions.get(key)
            if session is None or session.closed:
                session = self._sessions[key] = new_session()
                self._evict()
            self._sessions.move_to_end(key)
            inside = self._inside[key] = self._inside.get(key, 0) + 1
            self._started += 1
            self._max_per_key = max(self._max_per_key, inside)
            try:
                return await fn(session)
            finally:
                self._inside[key] -= 1
                if not self._inside[key]:
                    del self._inside[key]
        finally:
            requests.discard(me)
            if not requests and self._requests.get(key) is requests:
                del self._requests[key]
            self._evict()  # the pool may have grown past its bound while every session was busy

    def release(self, key: str) -> asyncio.Future | None:
        """Cancel the key's requests and drop its session now (a request after this starts a new
        one); the session's close, running in the background, or None if the key had none."""
        self._cancel(self._requests.pop(key, ()))
        session = self._sessions.pop(key, None)
        return None if session is None else self._close_later(session)

    async def close(self, key: str) -> bool:
        """`release(key)`, waiting for the close; False if the key had no session."""
        closing = self.release(key)
        if closing is None:
            return False
        await closing
        return True

    async def close_all(self) -> None:
        for requests in self._requests.values():
            self._cancel(requests)
        self._requests.clear()
        sessions, self._sessions = list(self._sessions.values()), OrderedDict()
        await asyncio.gather(*(_close(s) for s in sessions), *self._closing, return_exceptions=True)

    def _cancel(self, tasks: Iterable[asyncio.Task], *, superseded: bool = False) -> None:
        for task in list(tasks):
            if task.done():
                continue
            if superseded and task not in self._superseded:
                self._superseded.add(task)
                task.add_done_callback(self._superseded.discard)
            task.cancel()

    def _evict(self) -> None:
        """Close the least recently used idle sessions past `max_sessions` (busy ones stay)."""
        excess = len(self._sessions) - self.max_sessions
        idle = [key for key in self._sessions if not self._requests.get(key)][:max(0, excess)]
        for key in idle:
            self._close_later(self._sessions.pop(key))

    def _close_later(self, session: CompletionSession) -> asyncio.Future:
        closing = asyncio.ensure_future(_close(session))
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)
        return closing


async def _close(session: CompletionSession) -> None:
    try:
        await session.close()
    except UmbraError as exc:  # the cloud is gone or refused: nothing of ours is held there any more
        log.info("closing a completion session: %s", type(exc).__name__)
