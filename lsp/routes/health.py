"""GET /healthz: the backend's status (the language server's `umbra/status`), warm sessions and
completion counts. 200 when ready, 503 otherwise (e.g. the cloud is unreachable)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from lsp.backend import Backend
from lsp.deps import get_backend

router = APIRouter()


@router.get("/healthz")
async def healthz(backend: Backend = Depends(get_backend)) -> JSONResponse:
    body = {**backend.status.to_json(), "sessions": len(backend.pool), "completions": dict(backend.counts)}
    return JSONResponse(body, status_code=200 if backend.status.state == "ready" else 503)
