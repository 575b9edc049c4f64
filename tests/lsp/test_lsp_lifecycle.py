"""Language server lifecycle: initializationOptions errors at `initialize` (an unknown key is
none: test_lsp_server.py), a failed set-up as an "error" status, and the self-started cloud
stopped however the server ends (shutdown + exit, end of input, SIGTERM).

The bad-options tests share one `umbra lsp` server (`uninitialized`, started once for the module):
an `initialize` refused with InvalidParams sets nothing up, so the server stays uninitialized and
takes the next test's `initialize`. The others set their server up or end it, so start their own."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import sys

import pytest
import pytest_asyncio
from lsp_helpers import (
    LSP_COMMAND,
    StatusLog,
    initialize_params,
    open_document,
    refuses_connections,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig

pytestmark = pytest.mark.asyncio(loop_scope="module")

INVALID_PARAMS, REQUEST_FAILED = -32602, -32803


@contextlib.asynccontextmanager
async def language_server(command=LSP_COMMAND):
    client = await ClientServerConfig(server_command=command).start()
    client.statuses = StatusLog(client)
    try:
        yield client
    finally:
        if client._server.returncode is None:  # end of input makes the server exit
            client._server.stdin.close()
        await asyncio.wait_for(client.stop(), 60)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def uninitialized():
    """One `umbra lsp` server that no test sets up: each refused `initialize` leaves it as it was."""
    async with language_server([sys.executable, "-m", "umbra.cli.main", "lsp"]) as client:
        yield client
    assert client._server.returncode == 0  # still serving to the end: end of input, a clean exit


@pytest.mark.parametrize("options, message", [
    ({"languages": {"aliases": {"golang": 3}}}, "languages.aliases.golang must be a string"),
    ({"threads": "2"}, "threads must be an integer, got a string"),
    ({"cloud": {"url": "ftp://cloud"}}, "cloud.url must start with http:// or https://"),
])
async def test_bad_initialization_options_are_invalid_params(uninitialized, options, message):
    client = uninitialized  # via `umbra lsp`
    with pytest.raises(JsonRpcException) as err:
        await client.initialize_session(initialize_params(options))
    assert err.value.code == INVALID_PARAMS and message in err.value.message
    assert client.statuses.items == []  # nothing was set up (by this test or an earlier one)


async def test_a_failed_set_up_is_an_error_status_and_requests_fail_with_its_message(tmp_path):
    async with language_server() as client:
        await client.initialize_session(initialize_params({"model": {"dir": str(tmp_path / "absent")}}))
        status = await client.statuses.wait_for("error")
        assert "does not exist" in status["message"] and status["mode"] == "split"
        open_document(client, "file:///a.py", "x = ")
        with pytest.raises(JsonRpcException) as err:
            await client.text_document_inline_completion_async(types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri="file:///a.py"),
                position=types.Position(line=0, character=4),
                context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)))
        assert err.value.code == REQUEST_FAILED and "does not exist" in err.value.message
        await client.shutdown_session()
        assert client._server.returncode == 0


@pytest.mark.parametrize("ending", ["shutdown", "end-of-input", "sigterm"])
async def test_the_self_started_cloud_stops_with_the_server(lsp_model_dir, ending):
    async with language_server() as client:
        await client.initialize_session(initialize_params({"model": {"dir": str(lsp_model_dir)}, "threads": 1}))
        ready = await client.statuses.wait_for("ready")
        url = re.search(r"http://127\.0\.0\.1:\d+", ready["message"]).group(0)
        assert not refuses_connections(url)
        if ending == "shutdown":
            await client.shutdown_session()  # shutdown, exit, wait for the process
            assert client._server.returncode == 0
        elif ending == "end-of-input":
            client._server.stdin.close()  # the editor died without a word
            assert await asyncio.wait_for(client._server.wait(), 60) == 0
        else:
            client._server.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(client._server.wait(), 60) == 128 + signal.SIGTERM
        assert refuses_connections(url)
