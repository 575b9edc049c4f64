"""FastAPI dependencies of the local HTTP server: the backend the lifespan built."""

from __future__ import annotations

from fastapi import Request

from lsp.backend import Backend


def get_backend(request: Request) -> Backend:
    return request.app.state.backend  # set by the lifespan before uvicorn serves any request
