"""Errors of the client servers, and the one table that maps every error to what a client sees.

Both servers translate through `fault_for`: the language server into an LSP response error
(lsp/server.py), the HTTP server into a status code and JSON body (lsp/http_app.py). Messages
of UmbraErrors are shown as they are (they never carry prompts, completions, tokens or keys);
anything else is a bug and is reported as "internal error" only."""

from __future__ import annotations

from dataclasses import dataclass

from lsprotocol.types import ErrorCodes, LSPErrorCodes

from keys.errors import KeyStoreError
from lsp.api_auth import MisdirectedHost, Unauthorized
from umbra.errors import (
    Cancelled,
    CloudRejected,
    CloudUnavailable,
    ConfigError,
    SessionError,
    UmbraError,
    ValidationError,
)


class OptionsError(ConfigError):
    """The client's initializationOptions (or the HTTP server's settings) are invalid."""


class NotReady(UmbraError):
    """Completions cannot run: set-up failed (model, keyring, cloud token) or the server is closing."""


class Superseded(Cancelled):
    """A newer request on the same document / session replaced this one."""


class ModelNotFound(UmbraError):
    """An OpenAI-style request names a model this server does not serve (HTTP 404)."""

    param = "model"  # the request field at fault (OpenAI's error object names it)


@dataclass(frozen=True)
class Fault:
    lsp_code: int  # JSON-RPC / LSP error code of the response
    http_status: int  # status of the local HTTP API
    message: str  # what the user reads


# Most specific class first: the first isinstance match wins.
_TABLE: list[tuple[type[BaseException], int, int]] = [
    (Unauthorized, LSPErrorCodes.RequestFailed, 401),  # local HTTP API only (lsp/api_auth.py)
    (MisdirectedHost, LSPErrorCodes.RequestFailed, 421),
    (ModelNotFound, LSPErrorCodes.RequestFailed, 404),  # local HTTP API only (lsp/routes/models.py)
    (OptionsError, ErrorCodes.InvalidParams, 422),
    (Superseded, LSPErrorCodes.RequestCancelled, 409),
    (Cancelled, LSPErrorCodes.RequestCancelled, 499),
    (ValidationError, ErrorCodes.InvalidParams, 422),
    (CloudUnavailable, LSPErrorCodes.RequestFailed, 503),  # invariant 2: said, never worked around
    (CloudRejected, LSPErrorCodes.RequestFailed, 502),  # the cloud refused (token, limits)
    (NotReady, LSPErrorCodes.RequestFailed, 503),
    (SessionError, LSPErrorCodes.RequestFailed, 409),
    (KeyStoreError, LSPErrorCodes.RequestFailed, 500),
    (ConfigError, LSPErrorCodes.RequestFailed, 422),  # during a request: its settings are unusable
    (UmbraError, LSPErrorCodes.RequestFailed, 500),
]


def fault_for(exc: BaseException) -> Fault:
    for cls, code, status in _TABLE:
        if isinstance(exc, cls):
            return Fault(int(code), status, str(exc) or type(exc).__name__)
    return Fault(int(ErrorCodes.InternalError), 500, "internal error")
