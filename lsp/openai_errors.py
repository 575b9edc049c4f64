"""Errors of the OpenAI-compatible routes, in OpenAI's shape:

    {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": null}}

The status comes from the one error table (lsp/errors.py), except that a body the schema or the
engine refuses is 400, as OpenAI answers it (Umbra's own routes say 422). The type is
"invalid_request_error" below 500 and "server_error" from 500 on; `code` names the case where a
client may act on it (`invalid_api_key`, `model_not_found`, `cloud_unavailable`, ...); `param`
the request field at fault. `OpenAIRoute` applies this to every error of a route — its body,
its access checks (401 / 421) and the completion itself — and a stream that fails after its
first chunk sends the same object as its last event (openai_completions.py)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from lsp.api_auth import MisdirectedHost, Unauthorized
from lsp.errors import ModelNotFound, NotReady, Superseded, fault_for
from umbra.errors import CloudRejected, CloudUnavailable, UmbraError

NATIVE_HINT = " (a body with `prefix`: Umbra's own API is POST /v1/infill)"

# Most specific class first: the first isinstance match wins.
_CODES: list[tuple[type[BaseException], str]] = [
    (Unauthorized, "invalid_api_key"),
    (MisdirectedHost, "misdirected_host"),
    (ModelNotFound, "model_not_found"),
    (Superseded, "superseded"),
    (CloudUnavailable, "cloud_unavailable"),
    (CloudRejected, "cloud_rejected"),
    (NotReady, "not_ready"),
]


class OpenAIRoute(APIRoute):
    """A route whose errors are OpenAI's error objects (FastAPI's custom route class)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return invalid_body(exc)
            except UmbraError as exc:
                return error_response(exc)

        return handle


def error_body(exc: BaseException, param: str | None = None) -> dict:
    """The `{"error": {...}}` object of an error (a bug: "internal error" only)."""
    fault = fault_for(exc)
    return _body(fault.message, _status(fault.http_status), param or getattr(exc, "param", None),
                 next((code for cls, code in _CODES if isinstance(exc, cls)), None))


def error_response(exc: BaseException) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    return JSONResponse(error_body(exc), status_code=_status(fault_for(exc).http_status), headers=headers)


def invalid_body(exc: RequestValidationError) -> JSONResponse:
    """400 naming each bad field (`max_tokens: Input should be greater than or equal to 1`)."""
    errors = exc.errors()
    paths = [".".join(map(str, e.get("loc", ())[1:])) for e in errors]  # after "body"
    message = "; ".join(f"{path}: {e.get('msg', '')}" if path else str(e.get("msg", ""))
                        for path, e in zip(paths, errors)) or "invalid request"
    param = next((str(e["loc"][1]) for e in errors if len(e.get("loc", ())) > 1), None)  # the top-level field
    if any(e.get("type") == "json_invalid" for e in errors):
        message, param = f"the body is not valid JSON: {message}", None
    body = exc.body if isinstance(exc.body, dict) else {}
    if "prefix" in body and "prompt" not in body:
        message += NATIVE_HINT
    return JSONResponse(_body(message, 400, param, None), status_code=400)


def _status(status: int) -> int:
    return 400 if status == 422 else status


def _body(message: str, status: int, param: str | None, code: str | None) -> dict:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
