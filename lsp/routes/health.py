"""GET /healthz: the backend's status (the language server's `umbra/status`). 200 when ready,
503 otherwise (e.g. the cloud is unreachable).

It needs no API token, so that a supervisor can probe it; without the token it says only the
state and mode. The status message (which names the cloud), the number of warm sessions, the
completion counts, the client aborts ({route: {reason: count}}) and the errors answered
({status: count}; both lsp/api_aborts.py) come only with the token: they would tell another
local user when, and how much, this one is completing."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from lsp.backend import Backend
from lsp.deps import get_backend

router = APIRouter()


@router.get("/healthz")
async def healthz(request: Request, backend: Backend = Depends(get_backend)) -> JSONResponse:
    status = backend.status.to_json()
    if request.app.state.auth.authorized(request):
        body = {**status, "sessions": len(backend.pool), "completions": dict(backend.counts),
                "clientAborts": request.app.state.aborts.to_json(), "errors": dict(request.app.state.errors)}
    else:
        body = {"state": status["state"], "mode": status["mode"]}
    return JSONResponse(body, status_code=200 if backend.status.state == "ready" else 503)
