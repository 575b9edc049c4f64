"""FastAPI dependencies shared by the routers: the service state and the authenticated client.

They are coroutines on purpose: FastAPI runs a plain `def` dependency in its thread pool, a
thread hop (and a GIL hand-over) per dependency per request — under a flood of requests
(malformed frames, mid-body disconnects, connection churn) that queueing, not the work, was what
delayed every other request. Both are a few microseconds on the event loop."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Depends, Request

from server.auth import TokenStore
from server.metrics import Metrics
from server.scheduler import Scheduler
from server.sessions import SessionManager
from server.worker import ComputeWorker
from server.settings import CloudSettings
from umbra.middle.runtime import MiddleRuntime
from umbra.edge import EDGE_EXTENSION
from umbra.wire import FrameTooLarge


@dataclass
class CloudState:
    """Everything the lifespan builds; lives in `app.state.cloud`."""

    settings: CloudSettings
    runtime: MiddleRuntime
    manager: SessionManager
    worker: ComputeWorker
    tokens: TokenStore
    metrics: Metrics
    layers: tuple[int, int]  # global block range [first, last) held by this service
    read_keys: list[str]  # checkpoint tensors read while loading (audit: middle blocks only)
    scheduler: Scheduler | None = None  # FORWARD frames: batched decode, chunked prefill
    streams: dict | None = None  # open WebSocket -> its Authorization header (revocation closes it)


async def get_state(request: Request) -> CloudState:
    return request.app.state.cloud  # set by the lifespan before uvicorn serves any request


async def client_name(request: Request, state: CloudState = Depends(get_state)) -> str:
    """The authenticated client (token name); Unauthorized -> 401. A valid token proves the
    connection to the edge (umbra/edge.py): longer deadlines, a slot that unproven ones cannot take."""
    name = state.tokens.authenticate(request.headers.get("authorization"))
    edge = request.scope.get("extensions", {}).get(EDGE_EXTENSION)
    if edge is not None:
        edge["authenticated"]()
    return name


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or FrameTooLarge once it passes `limit` bytes. An oversize body is
    drained (up to 16x the limit) so the client reads a clean 413 instead of a reset socket."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > 16 * limit:
        raise FrameTooLarge(f"body of {declared} bytes exceeds the limit of {limit} bytes")
    buf, size = bytearray(), 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= limit:
            buf += chunk
        elif size > 16 * limit:
            break
    if size > limit:
        raise FrameTooLarge(f"body of {size}+ bytes exceeds the limit of {limit} bytes")
    return bytes(buf)
