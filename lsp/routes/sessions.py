"""DELETE /v1/sessions/{session}: drop a warm session (its caches here and in the cloud).
Sessions are created by the first completion that names them; unused ones also age out (LRU)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Response
from fastapi.responses import JSONResponse

from lsp.backend import Backend
from lsp.deps import get_backend
from lsp.fields import SESSION_PATTERN

router = APIRouter()


@router.delete("/v1/sessions/{session}", status_code=204)
async def delete_session(session: str = Path(max_length=128, pattern=SESSION_PATTERN),
                         backend: Backend = Depends(get_backend)) -> Response:
    if not await backend.forget(session):
        return JSONResponse({"error": "SessionError", "detail": "no such session"}, status_code=404)
    return Response(status_code=204)
