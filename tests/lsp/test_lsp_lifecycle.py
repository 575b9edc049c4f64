"""Language server lifecycle: initializationOptions errors at `initialize` (an unknown key is
none: test_lsp_server.py), a failed set-up as an "error" status, and the self-started cloud
stopped however the server ends (shutdown + exit, end of input, SIGTERM).

The bad options and the failed set-up share one `umbra lsp` server: an `initialize` refused with
InvalidParams sets nothing up, so the server stays uninitialized and takes the next `initialize`,
the last one with a model that does not exist. The others end their server, so start their own."""

from __future__ import annotations

import asyncio
import re
import signal
import sys

import pytest
from lsp_helpers import (
    initialize_params,
    language_server,
    open_document,
    refuses_connections,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcException

pytestmark = pytest.mark.asyncio(loop_scope="module")

INVALID_PARAMS, REQUEST_FAILED = -32602, -32803


BAD_OPTIONS = [
    ({"languages": {"aliases": {"golang": 3}}}, "languages.aliases.golang must be a string"),
    ({"threads": "2"}, "threads must be an integer, got a string"),
    ({"cloud": {"url": "ftp://cloud"}}, "cloud.url must start with http:// or https://"),
]


async def test_bad_options_are_invalid_params_and_a_failed_set_up_is_an_error_status(tmp_path):
    async with language_server(command=[sys.executable, "-m", "umbra.cli.main", "lsp"]) as client:  # `umbra lsp`
        for options, message in BAD_OPTIONS:
            with pytest.raises(JsonRpcException) as err:
                await client.initialize_session(initialize_params(options))
            assert err.value.code == INVALID_PARAMS and message in err.value.message, options
            assert client.statuses.items == []  # nothing was set up (by these options or the ones before)

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
