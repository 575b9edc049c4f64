"""FastAPI dependencies of the local HTTP server: the backend the lifespan built, and the API's
access checks (lsp/api_auth.py) set by create_app. Coroutines on purpose: FastAPI runs a plain
`def` dependency in its thread pool, a thread hop per dependency per request (server/deps.py)."""

from __future__ import annotations

from fastapi import Request

from lsp.backend import Backend


async def get_backend(request: Request) -> Backend:
    return request.app.state.backend  # set by the lifespan before uvicorn serves any request


async def require_token(request: Request) -> None:
    """Loopback Host (when listening on loopback) and the bearer token; else 421 / 401."""
    request.app.state.auth.check(request, token_required=True)


async def require_host(request: Request) -> None:
    """Loopback Host only (GET /healthz needs no token)."""
    request.app.state.auth.check(request, token_required=False)
