"""lsp/server.py in process: the answers whose timing a real editor cannot pin down. The process
tests (test_lsp_server.py) reach them only when a loaded machine happens to interleave messages
so; here each is made to happen: a request made stale by a newer one, by an edit or by a close
(RequestCancelled / ContentModified / InvalidParams, counted as skipped), a completion asked of a
server that was never initialized, a language `completion.languages` leaves out, and a request
replaced by a newer one on its document while it waited for the decode slot (and cancelled
as the slot is handed to it). The server's
notifications go to a real writer; no model is loaded (none of these paths decodes)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcRequestCancelled

from lsp.backend import Backend
from lsp.options import InitializationOptions
from lsp.server import CONTENT_MODIFIED, UmbraLanguageServer

INVALID_PARAMS, REQUEST_FAILED = -32602, -32803
URI = "file:///stale.py"


class Sent:
    """The writer the server's protocol sends its messages to (what an editor would read)."""

    def __init__(self) -> None:
        self.messages: list[dict] = []

    def write(self, data: bytes) -> None:
        self.messages.append(json.loads(data.decode().split("\r\n\r\n", 1)[1]))

    def logged(self) -> list[str]:
        return [m["params"]["message"] for m in self.messages if m.get("method") == "window/logMessage"]


def _server(options: dict | None = None) -> tuple[UmbraLanguageServer, Sent]:
    ls, sent = UmbraLanguageServer(), Sent()
    ls.protocol.set_writer(sent)
    if options is not None:
        ls.options = InitializationOptions.from_json(options)
        ls.backend = Backend(ls.options)
    return ls, sent


def _open(ls: UmbraLanguageServer, text: str = "x = 1\n", version: int = 1) -> None:
    ls.documents.open(types.TextDocumentItem(uri=URI, language_id="python", version=version, text=text))


def _edit(ls: UmbraLanguageServer, version: int) -> None:
    ls.documents.change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=f"y = {version}\n")]))


def _arrive(ls: UmbraLanguageServer) -> object:
    params = types.InlineCompletionParams(  # the handler's params (matched by identity)
        text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line=0, character=0),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))
    ls.arrivals.arrived(params, URI, ls.documents.find(URI))
    return params


def test_a_request_that_never_arrived_or_on_a_document_not_open_then_is_not_stale():
    ls, _ = _server({})
    assert ls.stale(None) is None
    params = _arrive(ls)  # the document was not open when the request was read, but is now
    _open(ls)
    document, _, arrival = ls.arrival(params)
    assert arrival is not None and arrival.document is None and ls.stale(arrival) is None
    assert document.text == "x = 1\n"  # the document as it is now
    assert ls.backend.counts["skipped"] == 0


def test_a_newer_request_an_edit_or_a_close_makes_a_request_stale_and_it_is_skipped():
    ls, _ = _server({})
    _open(ls)
    first = ls.arrival(_arrive(ls))[2]
    second = ls.arrival(_arrive(ls))[2]
    replaced = ls.stale(first)
    assert isinstance(replaced, JsonRpcRequestCancelled) and ls.backend.counts["skipped"] == 1
    assert ls.stale(second) is None  # the newest, on the document as it is

    edited = ls.arrival(_arrive(ls))[2]
    _edit(ls, version=2)
    modified = ls.stale(edited)
    assert modified.code == CONTENT_MODIFIED and ls.backend.counts["skipped"] == 2

    closing = ls.arrival(_arrive(ls))[2]
    ls.documents.close(URI)
    gone = ls.stale(closing)
    assert gone.code == INVALID_PARAMS and "not open" in gone.message


def test_a_server_never_initialized_answers_not_ready():
    ls, _ = _server()
    with pytest.raises(JsonRpcException) as err:
        asyncio.run(ls.complete(URI, "x = ", "", "python", time.monotonic()))
    assert err.value.code == REQUEST_FAILED and "not initialized" in err.value.message


def test_a_language_left_out_of_completion_languages_is_empty_and_says_why():
    ls, sent = _server({"completion": {"languages": ["go"]}})
    assert asyncio.run(ls.complete(URI, "x = ", "", "python", time.monotonic())) is None
    assert ls._decodes.locked() is False and ls.backend.counts["skipped"] == 0
    assert sent.logged() == ["Umbra: empty completion: the document's language is not in completion.languages"]


@pytest.mark.parametrize("deadline_ms", [0, 60_000])  # no deadline; one that does not pass meanwhile
def test_a_request_replaced_while_it_waits_for_the_decode_slot_is_cancelled_without_a_decode(deadline_ms):
    ls, _ = _server({"inline": {"deadlineMs": deadline_ms}})

    async def scenario() -> None:
        await ls._decodes.acquire()  # another document's decode holds the slot
        older = asyncio.ensure_future(ls.complete(URI, "x = ", "", "python", time.monotonic()))
        await asyncio.sleep(0)  # the older request waits for the slot
        newer = asyncio.ensure_future(ls.complete(URI, "x = 1", "", "python", time.monotonic()))
        await asyncio.sleep(0)  # the newer request is the document's latest, and waits too
        ls._decodes.release()
        try:
            with pytest.raises(JsonRpcRequestCancelled):
                await older
            assert ls.backend.counts["skipped"] == 1
        finally:
            newer.cancel()  # as the slot is handed to it: the cancel must win (its decode would wait
            # for a model forever, none is loaded here); wait_for on 3.11 swallowed it
            done, _ = await asyncio.wait([newer], timeout=30)
            assert done, "the cancel of a request given the decode slot was lost"
        assert not ls._decodes.locked() and URI not in ls._latest

    asyncio.run(scenario())
