"""One table maps every error to an LSP error code and an HTTP status."""

from __future__ import annotations

import pytest

from keys.errors import NoSecureKeyring
from lsp.errors import NotReady, OptionsError, Superseded, fault_for
from umbra.errors import (
    Cancelled,
    CloudRejected,
    CloudUnavailable,
    ConfigError,
    SessionError,
    UmbraError,
    ValidationError,
)


@pytest.mark.parametrize("exc, code, status", [
    (OptionsError("completion.maxTokens must be >= 1"), -32602, 422),
    (ValidationError("line 9 is outside the document"), -32602, 422),
    (Superseded("replaced"), -32800, 409),
    (Cancelled("cancelled"), -32800, 499),
    (CloudUnavailable("cloud unreachable at http://x"), -32803, 503),
    (NotReady("Umbra could not start"), -32803, 503),
    (CloudRejected("HTTP 401", 401), -32803, 502),
    (SessionError("closed"), -32803, 409),
    (NoSecureKeyring("no OS keyring"), -32803, 500),
    (ConfigError("max_tokens 600 leaves no room"), -32803, 422),
    (UmbraError("other"), -32803, 500),
])
def test_umbra_errors_keep_their_message(exc, code, status):
    fault = fault_for(exc)
    assert (fault.lsp_code, fault.http_status, fault.message) == (code, status, str(exc))


def test_anything_else_is_an_internal_error_that_says_nothing_more():
    fault = fault_for(KeyError("def secret_function(): ..."))
    assert (fault.lsp_code, fault.http_status, fault.message) == (-32603, 500, "internal error")
