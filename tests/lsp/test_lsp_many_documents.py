"""Many open documents through the real language server over stdio and the real cloud on loopback
(`loopback_cloud`, one for the module's two servers): 1,000 open documents and 20 concurrent inline completions (the default options, the
editor's 250 ms deadline included) still give completions, and every empty answer says why in the
editor's log (window/logMessage) — never a silent empty result. A client's error that the server
answers on purpose (a completion in a document that is not open) leaves no traceback."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest
import pytest_asyncio
from lsp_helpers import (LSP_COMMAND, SOURCE, cloud_env, initialize_params, inline_params, language_server,
                         open_document, through_cloud)
from pytest_lsp import LanguageClient


OPEN, CONCURRENT = 1000, 20
LINE, CHAR = 11, 17  # after "        self.y = " in SOURCE


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(lsp_model_dir, loopback_cloud):
    async with language_server(cloud_env(loopback_cloud.token)) as lsp_client:
        await lsp_client.initialize_session(initialize_params(through_cloud(
            {"model": {"dir": str(lsp_model_dir)}, "threads": 1}, loopback_cloud.base_url)))
        await lsp_client.statuses.wait_for("ready")
        yield lsp_client
        await lsp_client.shutdown_session()


def _uri(i: int) -> str:
    return f"file:///many/m{i}.py"


async def _inline(client: LanguageClient, i: int) -> str:
    result = await client.text_document_inline_completion_async(inline_params(_uri(i), LINE, CHAR))
    return result.items[0].insert_text if result.items else ""


@pytest.mark.asyncio(loop_scope="module")
async def test_a_thousand_open_documents_and_twenty_concurrent_completions(client: LanguageClient):
    for i in range(10):
        open_document(client, _uri(i), SOURCE.replace("Point", f"Point{i}"))
    await _inline(client, 0)
    await _inline(client, 1)
    few = await client.protocol.send_request_async("umbra/stats", None)
    for i in range(10, OPEN):
        open_document(client, _uri(i), SOURCE.replace("Point", f"Point{i}"))
    many = await client.protocol.send_request_async("umbra/stats", None)  # read after every didOpen: handled
    # a document that is only open holds no model state (no session, no decode): what a completion
    # reads of the others is bounded apart (tests/lsp/test_open_context.py: the 64 most recent)
    assert (many.sessions, many.decodes.started) == (few.sessions, few.decodes.started), (few, many)
    client.log_messages.clear()
    answers = await asyncio.gather(*(_inline(client, OPEN - 1 - i) for i in range(CONCURRENT)))
    said = [m.message for m in client.log_messages if "empty completion" in m.message]
    stats = await client.protocol.send_request_async("umbra/stats", None)
    assert sum(bool(a) for a in answers) >= 1, (answers, said, stats)  # today: all 20 empty, nothing said
    assert len(said) >= answers.count(""), (answers, said)  # every empty answer says why
    assert all("deadline" in m or "stop" in m for m in said), said


def _frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _read_reply(proc: subprocess.Popen, answered: dict) -> None:
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = proc.stdout.read(1)
        assert byte, "the server closed its output"
        head += byte
    reply = json.loads(proc.stdout.read(int(head.split(b":")[1].split(b"\r\n")[0])))
    if "id" in reply and "method" not in reply:
        answered[reply["id"]] = reply


def test_handled_client_errors_leave_no_traceback(lsp_model_dir, loopback_cloud):
    """Every client error the server answers on purpose (lsp/protocol.py) — completions in
    documents that are not open, a body that is not JSON, a message that is not JSON-RPC, params
    that do not fit (a negative or a non-integer position), a second `initialize` — gets its
    JSON-RPC error, one line in the server's log, no traceback and none of the request's params
    (its stderr, read whole after `exit`)."""
    init = {"processId": None, "rootUri": None, "capabilities": {},
            "initializationOptions": through_cloud({"model": {"dir": str(lsp_model_dir)}, "threads": 1},
                                                   loopback_cloud.base_url)}

    def inline(i: int, uri: str, position: dict) -> dict:
        return {"jsonrpc": "2.0", "id": i, "method": "textDocument/inlineCompletion",
                "params": {"textDocument": {"uri": uri}, "position": position, "context": {"triggerKind": 1}}}

    opened = {"uri": "file:///opened.py", "languageId": "python", "version": 1, "text": "x = 1\n"}
    frames = [_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}),
              _frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
              _frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": opened}})]
    frames += [_frame(inline(10 + i, f"file:///never/opened{i}.py", {"line": 0, "character": 0})) for i in range(5)]
    frames += [_frame(inline(20, opened["uri"], {"line": -1, "character": 0})),
               _frame(inline(21, opened["uri"], {"line": 0.5, "character": 0})),
               _frame({"jsonrpc": "2.0", "id": 22, "method": "initialize", "params": init}),
               _frame({"jsonrpc": "1.0", "id": 23, "method": "textDocument/inlineCompletion"}),
               b"Content-Length: 14\r\n\r\n{not json opened"[:len(b"Content-Length: 14\r\n\r\n") + 14]]
    expected = {*range(10, 15), 20, 21, 22, 23, None}
    proc = subprocess.Popen(LSP_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=cloud_env(loopback_cloud.token))
    try:
        proc.stdin.write(b"".join(frames))
        proc.stdin.flush()
        answered = {}
        while not expected <= set(answered):
            _read_reply(proc, answered)
        proc.stdin.write(_frame({"jsonrpc": "2.0", "id": 99, "method": "shutdown"}))
        proc.stdin.flush()
        while 99 not in answered:
            _read_reply(proc, answered)
        proc.stdin.write(_frame({"jsonrpc": "2.0", "method": "exit"}))
        proc.stdin.close()
        err = proc.stderr.read().decode(errors="replace")
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert all("error" in answered[i] for i in expected), answered
    assert "Traceback" not in err, err[-3000:]  # today: one traceback per request
    assert "opened" not in err, err[-3000:]  # nor the request's params
