"""Translate the umbra.errors hierarchy to HTTP statuses and WebSocket close codes, in one place.

Client mistakes map to 4xx; anything else (a bug, a broken model directory) is a 500 whose body
says only "internal error" — payloads are never echoed or logged."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from server.auth import Unauthorized
from umbra.errors import (
    ConfigError, SessionError, SessionEvicted, UmbraError, ValidationError, WireError,
)
from umbra.listen import validation_error_response
from umbra.wire import FrameTooLarge

log = logging.getLogger("umbra.cloud")


class TooManySessions(UmbraError):
    """The client holds its maximum number of sessions (HTTP 429)."""


class OutOfSync(SessionError):
    """The step's `start` differs from the session's cache length (HTTP 409)."""


class BudgetExceeded(ValidationError):
    """One session alone needs more KV memory than the whole budget (HTTP 413)."""


class BatchTooLarge(ValidationError):
    """A frame holds more rows than `max_batch_rows` (HTTP 413)."""


class ServerBusy(UmbraError):
    """The server's KV budget is held by other clients' sessions (HTTP 503, retry later)."""


class RequestTimeout(UmbraError):
    """A request body or an idle stream took longer than the service waits (HTTP 408)."""


# Most specific class first: the first isinstance match wins.
_STATUS: list[tuple[type[BaseException], int]] = [
    (Unauthorized, 401),
    (FrameTooLarge, 413),
    (BudgetExceeded, 413),
    (BatchTooLarge, 413),
    (ServerBusy, 503),
    (RequestTimeout, 408),
    (WireError, 400),
    (OutOfSync, 409),
    (SessionEvicted, 410),
    (SessionError, 404),
    (TooManySessions, 429),
    (ValidationError, 422),
    (ConfigError, 500),
]


def status_for(exc: BaseException) -> int:
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    return 500


def message_for(exc: BaseException) -> str:
    return str(exc) if status_for(exc) < 500 or isinstance(exc, ServerBusy) else "internal error"


def ws_close_code(status: int) -> int:
    """Application close code for an HTTP-like status: 4000 + status (e.g. 4410 = evicted)."""
    return 4000 + status


def error_body(exc: BaseException) -> dict:
    return {"error": type(exc).__name__, "detail": message_for(exc)}


def log_unexpected(exc: BaseException, where: str) -> None:
    if status_for(exc) >= 500 and not isinstance(exc, ServerBusy):  # type and message only: never hidden states, tokens or payloads
        log.error("%s failed: %s: %s", where, type(exc).__name__, exc)


def install_handlers(app: FastAPI) -> None:
    async def umbra_error(request: Request, exc: Exception) -> JSONResponse:
        log_unexpected(exc, request.url.path)
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
        if isinstance(exc, ServerBusy):
            headers = {"Retry-After": "1"}
        return JSONResponse(error_body(exc), status_code=status_for(exc), headers=headers)

    async def bad_request(request: Request, exc: Exception) -> JSONResponse:
        return validation_error_response(exc)

    app.add_exception_handler(UmbraError, umbra_error)
    app.add_exception_handler(RequestValidationError, bad_request)
