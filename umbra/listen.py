"""What Umbra's two HTTP services share at their edge — the cloud service (`server/`) and the
local completion server (`lsp/http_app.py`): a listening socket bound before serving (so port 0
resolves to a real port that can be announced), and the one-line description of bad fields
(the 422 body for a malformed request, and `umbra serve`'s error for bad settings)."""

from __future__ import annotations

import socket

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from umbra.errors import ConfigError


def listen_socket(host: str, port: int, inheritable: bool = False) -> socket.socket:
    """A TCP socket bound to (host, port) and listening; ConfigError when the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc}") from exc
    sock.listen(128)
    sock.set_inheritable(inheritable)
    return sock


def error_detail(errors: list[dict]) -> str:
    """pydantic's error list as one line naming each bad field (`body.prefix: Field required; ...`)."""
    return "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}" for e in errors)


def validation_error_response(exc: Exception) -> JSONResponse:
    """422 with one line naming each bad field."""
    detail = error_detail(exc.errors()) if isinstance(exc, RequestValidationError) else ""
    return JSONResponse({"error": "ValidationError", "detail": detail or "invalid request"}, status_code=422)
