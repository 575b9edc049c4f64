"""Session resource over HTTP: open, forward (prefill / training forward), backward, truncate,
close. Bodies of forward/backward are wire frames (umbra.wire); the rest is JSON.

POST /v1/sessions/forward opens an inference session and runs its first FORWARD frame in one
request: the reply is the HIDDEN frame, the new session's id in its X-Umbra-Session-Id header
(so a client's open costs no trip of its own; /v1/info says `open_in_frame`). A frame that
fails there closes the session it opened, and so does a client whose connection is gone before
its answer (it never learns the id). A client cancelled after that check, while the answer
crosses the link, still learns the id: it waits for the answer in the background and closes the
session (umbra/middle/cloud_link.py, CloudLink.open_with); only a client that dies in that
window leaves the session to idle expiry."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, Field

from server.deps import CloudState, client_name, get_state, read_body
from server.settings import CloudSettings, get_settings
from umbra import wire
from umbra.errors import ValidationError
from umbra.middle.cloud_link import SESSION_ID_HEADER

router = APIRouter(prefix="/v1/sessions")


class OpenRequest(BaseModel):
    training: bool = False  # training sessions keep no cache and support backward


class TruncateRequest(BaseModel):
    length: int = Field(ge=0)  # cached positions to keep


async def trim_first(state: CloudState, client: str, sid: str, data: bytes) -> bytes:
    """A FORWARD_TRIM frame (umbra.wire): truncate the session to the frame's `start`, then it is
    a FORWARD frame like any other (a `start` beyond the session's length stays a 409 there)."""
    start, data = wire.untrim(data)
    if start is not None:
        await state.worker.run(_trim, state, client, sid, start)
    return data


def _trim(state: CloudState, client: str, sid: str, start: int) -> None:
    if start < state.manager.own(client, sid).length:
        state.manager.truncate(client, sid, start)


def _frame_response(state: CloudState, data: bytes) -> Response:
    state.metrics.inc("umbra_cloud_bytes_out_total", len(data), transport="http")
    return Response(content=data, media_type=wire.MEDIA_TYPE)


@router.post("", status_code=201)
async def open_session(body: OpenRequest | None = None, client: str = Depends(client_name),
                       state: CloudState = Depends(get_state)) -> dict:
    training = bool(body and body.training)
    sid = await state.worker.run(state.manager.open, client, training)
    return {"session": sid, "training": training}


@router.post("/forward", status_code=201)
async def open_forward(request: Request, client: str = Depends(client_name), state: CloudState = Depends(get_state),
                       settings: CloudSettings = Depends(get_settings)) -> Response:
    data = await read_body(request, settings.max_frame_bytes)
    state.metrics.inc("umbra_cloud_bytes_in_total", len(data), transport="http")
    if wire.untrim(data)[0] is not None:
        raise ValidationError("a new session's first frame has nothing to trim; send a FORWARD frame")
    sid = await state.worker.run(state.manager.open, client, False)
    try:
        reply = await state.scheduler.step(client, sid, data)
    except Exception:
        await state.worker.run(_close_quietly, state, client, sid)
        state.scheduler.forget(sid)
        raise
    if await request.is_disconnected():  # the client left (a cancelled open): it never learns the id,
        await state.worker.run(_close_quietly, state, client, sid)  # so the session would only hold a
        state.scheduler.forget(sid)  # slot of its 64 until idle expiry
        return Response(status_code=204)  # nobody reads it
    response = _frame_response(state, reply)
    response.status_code = 201
    response.headers[SESSION_ID_HEADER] = sid
    return response


def _close_quietly(state: CloudState, client: str, sid: str) -> None:
    if state.manager.owners.get(sid) == client:  # not already evicted by the failed frame
        state.manager.close(client, sid)


@router.post("/{sid}/forward")
async def forward(sid: str, request: Request, client: str = Depends(client_name),
                  state: CloudState = Depends(get_state),
                  settings: CloudSettings = Depends(get_settings)) -> Response:
    data = await read_body(request, settings.max_frame_bytes)
    state.metrics.inc("umbra_cloud_bytes_in_total", len(data), transport="http")
    data = await trim_first(state, client, sid, data)
    return _frame_response(state, await state.scheduler.step(client, sid, data))


@router.post("/{sid}/backward")
async def backward(sid: str, request: Request, client: str = Depends(client_name),
                   state: CloudState = Depends(get_state),
                   settings: CloudSettings = Depends(get_settings)) -> Response:
    data = await read_body(request, settings.max_frame_bytes)
    state.metrics.inc("umbra_cloud_bytes_in_total", len(data), transport="http")

    def step() -> bytes:
        frame = wire.decode(data, settings.max_frame_bytes, expect=wire.Kind.BACKWARD)
        return wire.encode(wire.grad_frame(state.manager.backward(client, sid, frame.grad)))

    return _frame_response(state, await state.worker.run(step))


@router.post("/{sid}/truncate", status_code=204)
async def truncate(sid: str, body: TruncateRequest, client: str = Depends(client_name),
                   state: CloudState = Depends(get_state)) -> Response:
    await state.worker.run(state.manager.truncate, client, sid, body.length)
    return Response(status_code=204)


@router.delete("/{sid}", status_code=204)
async def close(sid: str, client: str = Depends(client_name), state: CloudState = Depends(get_state)) -> Response:
    await state.worker.run(state.manager.close, client, sid)
    state.scheduler.forget(sid)
    return Response(status_code=204)
