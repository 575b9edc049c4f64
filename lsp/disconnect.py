"""A completion lives only as long as its HTTP client: waiting on one, or on its first streamed
text, while watching the connection, and cancelling it when the client goes away first."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from umbra.errors import UmbraError

CLIENT_CLOSED = 499  # nginx's "client closed request": nobody reads it, the log does

Receive = Callable[[], Awaitable[dict]]


async def disconnected(receive: Receive) -> None:
    """Returns once the client has disconnected (the request body has been read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(receive: Receive, task: asyncio.Task, ready: asyncio.Future | None = None) -> bool:
    """Wait for `task` (or for `ready`, if given, whichever comes first); if the HTTP client goes
    away first, cancel `task`, wait for it to stop and return False."""
    watcher = asyncio.ensure_future(disconnected(receive))
    waited = {task, watcher} | ({ready} if ready is not None else set())
    try:
        await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the server is shutting down
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task.done() or (ready is not None and ready.done()):
        return True
    await cancel_and_wait(task)
    return False


async def cancel_and_wait(task: asyncio.Task) -> None:
    """Cancel `task` and wait until it has stopped (its errors are the client's no more)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, UmbraError):
        await task
