"""WS /v1/sessions/{sid}/stream: decode steps of one inference session over one WebSocket.

Handshake: `Authorization: Bearer` is checked and the session must belong to the client and be
an inference session; otherwise the upgrade is denied with the same HTTP status and JSON body
as over HTTP (401, 404, 410, 422). After that, every binary message is a FORWARD (or FORWARD_TRIM) frame and gets
exactly one reply: a HIDDEN frame, or an ERROR frame carrying the HTTP-like status. When the
session is gone (404, 410) or the token was revoked (401) the error frame is followed by a close
with code 4000 + status; the sweeper closes a revoked token's idle streams with 4401 too. A
stream with no message for `ws_idle_seconds` is closed with 1001 (going away).

A client that leaves without a close frame (the connection dropped: mid-stream, in the middle
of a verify frame or while its reply is computed), or that is gone when its upgrade is answered,
is a client abort (server/aborts.py: counted, one line, no traceback); a close frame from the
client ends the stream quietly."""

from __future__ import annotations

import asyncio
import logging
import time

from fastapi import APIRouter, WebSocket
from fastapi.responses import JSONResponse
from starlette.websockets import WebSocketDisconnect

from server.aborts import ClientAborts
from server.deps import CloudState
from server.routes.sessions import trim_first
from server.errors import error_body, log_unexpected, message_for, status_for, ws_close_code
from umbra import wire
from umbra.errors import UmbraError

router = APIRouter()
log = logging.getLogger("umbra.cloud")


ROUTE = "WS /v1/sessions/{sid}/stream"  # the route template of its abort lines and metric labels
_GONE = (WebSocketDisconnect, OSError, RuntimeError)  # sending to, or receiving from, a client that left
_DROPPED = (1005, 1006)  # disconnect codes of a connection that ended without a close frame


@router.websocket("/v1/sessions/{sid}/stream")
async def stream(websocket: WebSocket, sid: str) -> None:
    state: CloudState = websocket.app.state.cloud
    aborts: ClientAborts = websocket.app.state.aborts
    denial = None
    try:
        client = state.tokens.authenticate(websocket.headers.get("authorization"))
        state.manager.check(client, sid, inference=True)  # reads only: on the event loop, not behind a compute step
    except UmbraError as exc:
        denial = exc
    try:
        if denial is not None:
            await websocket.send_denial_response(JSONResponse(error_body(denial), status_code=status_for(denial)))
            state.metrics.inc("umbra_cloud_errors_total", status=str(status_for(denial)))
            return
        await websocket.accept()
    except _GONE:  # the client left while its token and session were checked: nobody reads the answer
        aborts.count(ROUTE, "disconnect")
        return
    state.streams[websocket] = websocket.headers.get("authorization")
    try:
        if await _serve(websocket, state, client, sid) and websocket in state.streams:  # the sweeper did not close it
            aborts.count(ROUTE, "disconnect")
    except _GONE:  # the client left while its reply was sent
        aborts.count(ROUTE, "disconnect")
    finally:
        state.streams.pop(websocket, None)
        state.scheduler.forget(sid)


async def _serve(websocket: WebSocket, state: CloudState, client: str, sid: str) -> bool:
    """Serve steps until the stream ends; True if the client dropped it without a close frame."""
    metrics = state.metrics
    authorization = websocket.headers.get("authorization")
    while True:
        try:  # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that comes as the message does
            async with asyncio.timeout(state.settings.ws_idle_seconds):
                message = await websocket.receive()
        except TimeoutError:
            await websocket.close(1001, "idle stream closed")
            return False
        if message["type"] == "websocket.disconnect":
            return message.get("code") in _DROPPED
        data = message.get("bytes")
        t0 = time.perf_counter()
        try:
            state.tokens.authenticate(authorization)  # a revoked token's stream ends here
            if data is None:
                raise wire.WireError("the stream takes binary FORWARD frames only")
            metrics.inc("umbra_cloud_bytes_in_total", len(data), transport="ws")
            reply = await state.scheduler.step(client, sid, await trim_first(state, client, sid, data))
        except Exception as exc:  # every failure becomes an error frame, never a dead process
            status = status_for(exc)
            log_unexpected(exc, "stream step")
            metrics.inc("umbra_cloud_errors_total", status=str(status))
            reply = wire.encode(wire.error_frame(status, message_for(exc)))
            await websocket.send_bytes(reply)
            metrics.inc("umbra_cloud_bytes_out_total", len(reply), transport="ws")
            if status in (401, 404, 410) or (status >= 500 and status != 503):
                await websocket.close(ws_close_code(status) if status < 500 else 1011, _reason(message_for(exc)))
                return False
            continue
        finally:
            metrics.observe(time.perf_counter() - t0, route="ws:/v1/sessions/{sid}/stream")
        await websocket.send_bytes(reply)
        metrics.inc("umbra_cloud_bytes_out_total", len(reply), transport="ws")


def _reason(text: str) -> str:
    """A close reason must fit in 123 UTF-8 bytes."""
    return text.encode("utf-8")[:120].decode("utf-8", "ignore")
