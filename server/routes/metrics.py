"""GET /metrics: Prometheus text format (auth required)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse

from server.deps import CloudState, client_name, get_state

router = APIRouter()


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(client: str = Depends(client_name), state: CloudState = Depends(get_state)) -> PlainTextResponse:
    return PlainTextResponse(state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
