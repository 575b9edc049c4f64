"""SessionPool: one warm CompletionSession per key (an editor document, an HTTP session id).

    result = await pool.run(key, engine.new_session, lambda s: s.complete(prefix, suffix))

- Prefix reuse: consecutive requests on a key share the session's KV caches (client and cloud).
- A newer request on a key cancels the older one still running (its task gets CancelledError
  at the engine's next cancellation point; the session's caches stay consistent — the engine
  rolls back a half-done step). `superseded(task)` tells a caller why its task was cancelled.
- Bounded: past `max_sessions` the least recently used session is cancelled and closed (its
  key simply starts over, in full, next time). Each session also holds one cloud session,
  and the cloud caps those per client.
- `close(key)` (didClose, DELETE) and `close_all()` (shutdown) release sessions and their cloud
  sessions."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TypeVar

from umbra.engine import CompletionSession
from umbra.errors import UmbraError

T = TypeVar("T")
log = logging.getLogger("umbra.lsp")


class SessionPool:
    def __init__(self, max_sessions: int = 16):
        if max_sessions < 1:
            raise ValueError("max_sessions must be >= 1")
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, CompletionSession] = OrderedDict()
        self._running: dict[str, asyncio.Task] = {}
        self._superseded: set[asyncio.Task] = set()
        self._closing: set[asyncio.Task] = set()

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: str) -> bool:
        return key in self._sessions

    def superseded(self, task: asyncio.Task) -> bool:
        """True if `task` was cancelled because a newer request on its key replaced it."""
        return task in self._superseded

    async def run(self, key: str, new_session: Callable[[], CompletionSession],
                  fn: Callable[[CompletionSession], Awaitable[T]]) -> T:
        """`fn(session)` on the key's session (made with `new_session` if absent), in the current task."""
        me = asyncio.current_task()
        older = self._running.get(key)
        if older is not None and older is not me and not older.done():
            self._superseded.add(older)
            older.add_done_callback(self._superseded.discard)
            older.cancel()
        self._running[key] = me
        try:
            session = self._sessions.get(key)
            if session is None or session.closed:
                session = self._sessions[key] = new_session()
                self._evict()
            self._sessions.move_to_end(key)
            return await fn(session)
        finally:
            if self._running.get(key) is me:
                del self._running[key]

    async def close(self, key: str) -> bool:
        """Cancel the key's running request and close its session; False if it had none."""
        task = self._running.pop(key, None)
        if task is not None and not task.done():
            task.cancel()
        session = self._sessions.pop(key, None)
        if session is None:
            return False
        await _close(session)
        return True

    async def close_all(self) -> None:
        for task in list(self._running.values()):
            if not task.done():
                task.cancel()
        self._running.clear()
        sessions, self._sessions = list(self._sessions.values()), OrderedDict()
        await asyncio.gather(*(_close(s) for s in sessions), *self._closing, return_exceptions=True)

    def _evict(self) -> None:
        while len(self._sessions) > self.max_sessions:
            key, session = self._sessions.popitem(last=False)
            task = self._running.pop(key, None)
            if task is not None and not task.done():
                task.cancel()
            closing = asyncio.ensure_future(_close(session))  # waits for the cancelled request's lock
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)


async def _close(session: CompletionSession) -> None:
    try:
        await session.close()
    except UmbraError as exc:  # the cloud is gone or refused: nothing of ours is held there any more
        log.info("closing a completion session: %s", type(exc).__name__)
