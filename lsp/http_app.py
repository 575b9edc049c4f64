"""The local completion HTTP server (`umbra serve`): `create_app()` and `run()` under uvicorn.

A separate module from the language server because it is a separate process with its own
protocol; both are thin over lsp/backend.py. The lifespan sets the backend up (model, cloud,
connection) before the first request — or adopts one `run` has set up already, so that a set-up
failure is one line, not a failed lifespan — and tears it down after the last; a set-up failure
stops the server (a cloud that is merely unreachable does not: completions answer 503 until it
is back). Before any of that, umbra/edge.py bounds what a connection costs before its token is
looked at: bodies over `max_body_bytes` 413 (from Content-Length alone when declared), slow
headers or bodies 408, oversized headers 431. A client that leaves before its answer (mid-body,
mid-completion, mid-stream) is a counted client abort (lsp/api_aborts.py), never an error. Errors map through lsp/errors.py: bad input 422, superseded 409, cloud unreachable
503, cloud refused 502, no or wrong API token 401, non-loopback Host 421 — as
`{"error": NAME, "detail": ...}` on Umbra's own routes, as OpenAI's error object (bad input
400) on the OpenAI-compatible ones (lsp/openai_errors.py). Every completion response carries
the privacy mode in force in `X-Umbra-Privacy` (lsp/privacy_header.py). Binds 127.0.0.1 unless
told otherwise; who may call it is lsp/api_auth.py's business (a token file made at each start)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from collections import Counter
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from lsp.api_aborts import ApiAborts, api_aborts
from lsp.api_auth import ApiAuth, Unauthorized, default_token_file, new_token, remove_token_file, write_token_file
from lsp.backend import Backend
from lsp.deps import require_host, require_token
from lsp.errors import fault_for
from lsp.privacy_header import PrivacyHeader
from lsp.routes import health, infill, models, openai_completions, sessions
from lsp.settings import LocalSettings, get_settings
from umbra.edge import BodyGuard, edge_protocol
from umbra.errors import UmbraError
from umbra.listen import listen_socket, validation_error_response

LOOPBACK = ("127.0.0.1", "::1", "localhost")


async def start_backend(settings: LocalSettings, holder: list | None = None) -> Backend:
    """A started backend; its set-up error is raised (and everything it started stopped).
    `holder` receives the backend before it starts (for a last-resort `stop_cloud`)."""
    backend = Backend(settings.options(), max_sessions=settings.max_sessions)
    if holder is not None:
        holder.append(backend)
    try:
        await backend.start()
    finally:
        if backend.setup_error is not None or backend.status.state == "starting":  # failed or interrupted
            await backend.aclose()
    if backend.setup_error is not None:
        raise backend.setup_error
    return backend


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI):
    backend = app.state.backend  # adopted from `run`, if it set one up
    if backend is None:
        backend = app.state.backend = await start_backend(
            app.dependency_overrides.get(get_settings, get_settings)())
    try:
        yield
    finally:
        if app.state.token_file is not None:  # here, not after serve(): uvicorn re-raises SIGTERM on its way out
            remove_token_file(app.state.token_file)
        await backend.aclose()


def install_handlers(app: FastAPI) -> None:
    async def umbra_error(request: Request, exc: Exception) -> JSONResponse:
        fault = fault_for(exc)
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
        return JSONResponse({"error": type(exc).__name__, "detail": fault.message}, status_code=fault.http_status,
                            headers=headers)

    async def bad_request(request: Request, exc: Exception) -> JSONResponse:
        return validation_error_response(exc)

    app.add_exception_handler(UmbraError, umbra_error)
    app.add_exception_handler(RequestValidationError, bad_request)


def api_auth(settings: LocalSettings) -> ApiAuth:
    """A fresh token unless auth is off; the Host check whenever the server listens on loopback."""
    return ApiAuth(token=new_token() if settings.auth else None, loopback_only=settings.host in LOOPBACK)


def create_app(settings: LocalSettings | None = None, backend: Backend | None = None,
               auth: ApiAuth | None = None, token_file: Path | None = None) -> FastAPI:
    """The ASGI app; `settings` overrides the environment (UMBRA_LOCAL_*) when given. `backend`:
    one already started, which the app adopts (and closes at shutdown). `auth`: who may call it
    (default: `api_auth(settings)`, a fresh token, found in `app.state.auth.token`). `token_file`:
    where `run` wrote that token; removed at shutdown."""
    app = FastAPI(title="Umbra local completions", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    if settings is not None:
        app.dependency_overrides[get_settings] = lambda: settings
    app.state.backend = backend
    app.state.auth = auth or api_auth(settings or get_settings())
    app.state.token_file = token_file
    app.state.aborts = api_aborts()  # clients that left before their answer (GET /healthz's clientAborts)
    app.state.errors = Counter()  # errors answered, by status (GET /healthz's errors)
    install_handlers(app)
    for module in (openai_completions, models, infill, sessions):
        app.include_router(module.router, dependencies=[Depends(require_token)])
    app.include_router(health.router, dependencies=[Depends(require_host)])
    app.add_middleware(PrivacyHeader, backend_of=lambda: app.state.backend)  # X-Umbra-Privacy on completions
    # Outermost: bodies are bounded before parsing and before the token is checked.
    app.add_middleware(BodyGuard, limits=lambda: app.dependency_overrides.get(get_settings, get_settings)().edge_limits())
    routes = [route for module in (openai_completions, models, infill, sessions, health) for route in module.router.routes]
    app.add_middleware(ApiAborts, aborts=app.state.aborts, routes=routes, errors=app.state.errors)  # outermost: sees BodyGuard's too
    return app


def uvicorn_config(settings: LocalSettings, backend: Backend | None = None, auth: ApiAuth | None = None,
                   token_file: Path | None = None):
    import uvicorn

    limits = settings.edge_limits()
    return uvicorn.Config(create_app(settings, backend, auth, token_file), log_level="warning", lifespan="on",
                          http=edge_protocol(limits),  # header deadline and size, connections per address
                          h11_max_incomplete_event_size=limits.max_header_bytes,
                          access_log=False)  # URLs carry session ids: keep them out of logs


def run(settings: LocalSettings) -> int:
    """Set up, then serve until SIGINT/SIGTERM; prints the URL on stderr once ready (port 0: a free
    one). A set-up failure raises its UmbraError (the CLI prints one line)."""
    settings.options()  # invalid settings: one clear line before anything starts
    if settings.host not in LOOPBACK:
        print(f"umbra serve: warning: listening on {settings.host} exposes completions to the network",
              file=sys.stderr)
    sock = listen_socket(settings.host, settings.port)
    holder: list[Backend] = []
    try:
        return asyncio.run(_serve(settings, sock, holder))
    finally:
        sock.close()
        for backend in holder:  # a set-up interrupted while a cloud was still starting in a thread
            backend.stop_cloud()


async def _serve(settings: LocalSettings, sock: socket.socket, holder: list) -> int:
    import uvicorn

    loop, me = asyncio.get_running_loop(), asyncio.current_task()
    for sig in (signal.SIGINT, signal.SIGTERM):  # until uvicorn takes the signals over
        loop.add_signal_handler(sig, me.cancel)
    try:
        backend = await start_backend(settings, holder)
    except asyncio.CancelledError:
        return 128 + signal.SIGTERM
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    host, port = sock.getsockname()[:2]
    auth = api_auth(settings)
    token_file = None
    try:
        if auth.token is not None:
            token_file = write_token_file(settings.token_file or default_token_file(port), auth.token)
        access = f"API token in {token_file}" if token_file else "no API token (--no-auth)"
        print(f"umbra serve: listening on http://{host if ':' not in host else f'[{host}]'}:{port} ({access})",
              file=sys.stderr, flush=True)
        server = uvicorn.Server(uvicorn_config(settings, backend, auth, token_file))  # adopts and closes the backend
        await server.serve(sockets=[sock])
    finally:
        if token_file is not None:
            remove_token_file(token_file)
    return 0 if server.started else 2
