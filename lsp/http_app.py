"""The local completion HTTP server (`umbra serve`): `create_app()` and `run()` under uvicorn.

A separate module from the language server because it is a separate process with its own
protocol; both are thin over lsp/backend.py. The lifespan sets the backend up (model, cloud,
connection) before the first request and tears it down after the last; a set-up failure stops
the server (a cloud that is merely unreachable does not: completions answer 503 until it is
back). Errors map through lsp/errors.py: bad input 422, superseded 409, cloud unreachable 503,
cloud refused 502. Binds 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import contextlib
import logging
import socket
import sys

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from lsp.backend import Backend
from lsp.errors import fault_for
from lsp.routes import completions, health, sessions
from lsp.settings import LocalSettings, get_settings
from umbra.errors import ConfigError, UmbraError

log = logging.getLogger("umbra.lsp")
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI):
    settings = app.dependency_overrides.get(get_settings, get_settings)()
    backend = Backend(settings.options(), max_sessions=settings.max_sessions)
    await backend.start()
    if backend.setup_error is not None:
        await backend.aclose()
        raise backend.setup_error
    app.state.backend = backend
    try:
        yield
    finally:
        await backend.aclose()


def install_handlers(app: FastAPI) -> None:
    async def umbra_error(request: Request, exc: Exception) -> JSONResponse:
        fault = fault_for(exc)
        return JSONResponse({"error": type(exc).__name__, "detail": fault.message}, status_code=fault.http_status)

    async def bad_request(request: Request, exc: Exception) -> JSONResponse:
        errors = exc.errors() if isinstance(exc, RequestValidationError) else []
        detail = "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}" for e in errors)
        return JSONResponse({"error": "ValidationError", "detail": detail or "invalid request"}, status_code=422)

    app.add_exception_handler(UmbraError, umbra_error)
    app.add_exception_handler(RequestValidationError, bad_request)


def create_app(settings: LocalSettings | None = None) -> FastAPI:
    """The ASGI app; `settings` overrides the environment (UMBRA_LOCAL_*) when given."""
    app = FastAPI(title="Umbra local completions", lifespan=lifespan, docs_url=None, redoc_url=None)
    if settings is not None:
        app.dependency_overrides[get_settings] = lambda: settings
    install_handlers(app)
    for module in (completions, sessions, health):
        app.include_router(module.router)
    return app


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc}") from exc
    sock.listen(128)
    return sock


def uvicorn_config(settings: LocalSettings):
    import uvicorn

    return uvicorn.Config(create_app(settings), log_level="warning", lifespan="on",
                          access_log=False)  # URLs carry session ids: keep them out of logs


def run(settings: LocalSettings) -> int:
    """Serve until SIGINT/SIGTERM; prints the URL on stderr once listening (port 0: a free one)."""
    import uvicorn

    settings.options()  # invalid settings: one clear line before anything starts
    if settings.host not in LOOPBACK:
        print(f"umbra serve: warning: listening on {settings.host} exposes completions to the network",
              file=sys.stderr)
    sock = bind(settings.host, settings.port)
    host, port = sock.getsockname()[:2]
    print(f"umbra serve: listening on http://{host if ':' not in host else f'[{host}]'}:{port}",
          file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn_config(settings))
    server.run(sockets=[sock])
    if not server.started:
        print("umbra serve: error: the server did not start (see the log above)", file=sys.stderr)
        return 2
    return 0
