"""The language server's JSON-RPC edge (lsp/protocol.py), spoken to in raw frames over stdio:
every request is answered with a result or an LSP error — broken JSON, bad params, a second
`initialize`, anything after `shutdown` — and the server keeps serving; a document with lone
surrogates completes; many documents completing at once are all answered.

The tests that only need a server serving share one (`shared`, started once for the module): each
opens documents of its own and checks that the server still answers after what it sent. The one
that shuts the server down starts its own, and sends its broken JSON before `initialize`. Both
complete through one cloud (`loopback_cloud`, the real service on loopback; the cloud a server
starts itself is test_lsp_server's and test_lsp_lifecycle's)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import pytest_asyncio
from lsp_helpers import SOURCE, cloud_env, through_cloud
from raw_lsp_client import RawLspClient

pytestmark = pytest.mark.asyncio(loop_scope="module")

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602


@contextlib.asynccontextmanager
async def raw_server(cloud):
    client = await RawLspClient.start(cloud_env(cloud.token))
    try:
        yield client
    finally:
        if client.proc.returncode is None:
            await client.close()


def options(model_dir, cloud) -> dict:
    return through_cloud({"model": {"dir": str(model_dir)}, "threads": 1, "completion": {"maxTokens": 8}},
                         cloud.base_url)


def open_doc(client: RawLspClient, uri: str, text: str) -> None:
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                            "text": text}})


def complete(client: RawLspClient, uri: str, line: int, character) -> asyncio.Future:
    return asyncio.ensure_future(client.request("textDocument/completion", {
        "textDocument": {"uri": uri}, "position": {"line": line, "character": character}}))


async def ready(client: RawLspClient, model_dir, cloud) -> None:
    assert "result" in await client.initialize(options(model_dir, cloud))
    await client.wait_for_status("ready")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(lsp_model_dir, loopback_cloud):
    """One initialized, ready language server for the tests that only need one serving."""
    async with raw_server(loopback_cloud) as client:
        await ready(client, lsp_model_dir, loopback_cloud)
        yield client


@pytest.mark.parametrize("character", [-1, 1.5, "3", True, None, 2**40])
async def test_a_bad_position_is_invalid_params_and_the_server_keeps_serving(shared, character):
    client, uri = shared, f"file:///position-{character!r}.py"
    open_doc(client, uri, SOURCE)
    bad = await complete(client, uri, 11, character)
    assert bad["error"]["code"] == INVALID_PARAMS and "textDocument/completion" in bad["error"]["message"]
    good = await complete(client, uri, 11, 17)
    assert "result" in good and good["result"]["items"]


async def test_a_second_initialize_is_an_error_and_the_server_keeps_its_session(shared):
    client = shared
    again = await client.request("initialize", {"processId": None, "rootUri": None, "capabilities": {},
                                                "initializationOptions": {"model": {"dir": "/absent"}}})
    assert again["error"]["code"] == INVALID_REQUEST and "already initialized" in again["error"]["message"]
    open_doc(client, "file:///again.py", SOURCE)
    answer = await complete(client, "file:///again.py", 11, 17)
    assert answer["result"]["items"], answer


async def test_broken_json_is_a_parse_error_and_every_request_after_shutdown_is_invalid_request(lsp_model_dir,
                                                                                                   loopback_cloud):
    """Broken frames before `initialize`, then a session set up and shut down: one server."""
    async with raw_server(loopback_cloud) as client:
        for body in (b'{"jsonrpc": "2.0", "id": 1, "method": ', b"\xff\xfe not utf-8", b""):
            client.send_frame(body)
            answer = await asyncio.wait_for(client.response(None), 30)
            assert answer["id"] is None and answer["error"]["code"] == PARSE_ERROR
            client._responses.pop(None)
        client.send({"jsonrpc": "2.0", "id": 7, "params": {}})  # no method
        client.send([1, 2])  # not an object
        answers = [await asyncio.wait_for(client.response(7), 30), await asyncio.wait_for(client.response(None), 30)]
        assert [a["error"]["code"] for a in answers] == [INVALID_REQUEST, INVALID_REQUEST]
        client._responses.pop(7), client._responses.pop(None)  # the ids the session's requests take next

        await ready(client, lsp_model_dir, loopback_cloud)  # still serving: it takes the session
        open_doc(client, "file:///a.py", SOURCE)
        assert (await complete(client, "file:///a.py", 11, 17))["result"]["items"]
        assert (await client.request("shutdown"))["result"] is None
        for method, params in [("textDocument/completion", {"textDocument": {"uri": "file:///a.py"},
                                                              "position": {"line": 11, "character": 17}}),
                               ("umbra/stats", None), ("shutdown", None), ("no/such/method", {})]:
            answer = await client.request(method, params, timeout=30)
            assert answer["error"]["code"] == INVALID_REQUEST and "shutting down" in answer["error"]["message"]
        client.notify("exit", None)
        assert await asyncio.wait_for(client.proc.wait(), 60) == 0


async def test_lone_surrogates_in_a_document_complete_and_the_next_document_too(shared):
    client = shared
    text = 'name = "\ud800x\udfff"\nvalue = '  # lone surrogates, sent as JSON escapes
    open_doc(client, "file:///bad.py", text)
    client.notify("textDocument/didChange", {
        "textDocument": {"uri": "file:///bad.py", "version": 2},
        "contentChanges": [{"range": {"start": {"line": 1, "character": 8}, "end": {"line": 1, "character": 8}},
                            "text": "\udc00"}]})
    for position in [(1, 9), (0, 10)]:
        answer = await complete(client, "file:///bad.py", *position)
        assert "result" in answer, answer
    inline = await client.request("textDocument/inlineCompletion", {
        "textDocument": {"uri": "file:///bad.py"}, "position": {"line": 1, "character": 9},
        "context": {"triggerKind": 1}})
    assert "result" in inline, inline
    open_doc(client, "file:///good.py", SOURCE)
    assert (await complete(client, "file:///good.py", 11, 17))["result"]["items"]


async def test_twenty_documents_completing_at_once_are_all_answered(shared):
    client = shared
    uris = [f"file:///doc{i}.py" for i in range(20)]
    for i, uri in enumerate(uris):
        open_doc(client, uri, SOURCE.replace("total", f"total{i}"))
    answers = await asyncio.gather(*(complete(client, uri, 11, 17) for uri in uris))
    assert all("result" in a for a in answers), [a.get("error") for a in answers if "error" in a]
