"""umbra.listen: the listening socket and the 422 body both HTTP services use."""

from __future__ import annotations

import json

import pytest
from fastapi.exceptions import RequestValidationError

from umbra.errors import ConfigError
from umbra.listen import listen_socket, validation_error_response


def test_port_zero_binds_a_free_port_and_a_taken_port_is_a_config_error():
    sock = listen_socket("127.0.0.1", 0)
    try:
        host, port = sock.getsockname()[:2]
        assert host == "127.0.0.1" and port > 0 and not sock.get_inheritable()
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
            listen_socket("127.0.0.1", port)
    finally:
        sock.close()
    inherited = listen_socket("127.0.0.1", 0, inheritable=True)
    assert inherited.get_inheritable()
    inherited.close()


def test_validation_errors_name_each_field():
    exc = RequestValidationError([{"loc": ("body", "prefix"), "msg": "Field required", "type": "missing"},
                                  {"loc": ("body", "maxTokens"), "msg": "too big", "type": "x"}])
    response = validation_error_response(exc)
    assert response.status_code == 422
    assert json.loads(response.body) == {"error": "ValidationError",
                                         "detail": "body.prefix: Field required; body.maxTokens: too big"}
