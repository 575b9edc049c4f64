"""Server-sent events whose producer stops when the client goes away.

`EventStream(events)` sends each item of the async iterator `events` as one event
(`data: <json>`, or `data: [DONE]` for DONE) while watching the connection. When the client
disconnects, sending stops and `events` is closed at once — its `finally` cancels whatever
produces the events (a completion: it stops at its next decode step). Starlette's
StreamingResponse watches the connection only under some ASGI versions; this one always does."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from lsp.disconnect import disconnected

DONE = "[DONE]"


def event(data: dict | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data, separators=(',', ':'))}\n\n".encode()


class EventStream(Response):
    media_type = "text/event-stream"

    def __init__(self, events: AsyncGenerator[dict | str, None]):
        self.events = events
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})  # no body: no Content-Length

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            pump = asyncio.ensure_future(self._pump(send))
            watcher = asyncio.ensure_future(disconnected(receive))
            try:
                await asyncio.wait({pump, watcher}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                watcher.cancel()
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await pump
        finally:
            await self.events.aclose()  # runs the producer's `finally`: a completion is cancelled there

    async def _pump(self, send: Send) -> None:
        async for item in self.events:
            await send({"type": "http.response.body", "body": event(item), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
