"""The real language server (`python -m lsp`) over stdio, driven by pytest-lsp, completing through
the real cloud service it starts itself on loopback: inline completion and completion equal the
monolithic result, unknown initializationOptions are a warning, typing reuses the prefix,
cancellation and supersession leave the session consistent, 50 keystrokes sent without waiting
run one decode at a time and answer the last (the server's own `umbra/stats` counters), typing
the completion just shown is answered with its rest without a decode, bad requests are LSP errors."""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from lsp_helpers import (
    EXACT_INLINE,
    LSP_COMMAND,
    inline_params,
    SOURCE,
    Monolithic,
    StatusLog,
    initialize_params,
    insert,
    offset_of,
    open_document,
    plain,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient

from lsp.documents import Document
from lsp.options import CompletionOptions
from lsp.server import STATS_METHOD

pytestmark = [pytest.mark.asyncio(loop_scope="module"),
              pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")]

COMPLETION = CompletionOptions(max_tokens=300, multiline=True)  # long enough to cancel mid-flight
# With keys of a newer editor extension, which this server warns about and ignores.
OPTIONS = {"completion": {"maxTokens": 300, "multiline": True, "draftTokens": 4}, "inline": EXACT_INLINE,
           "threads": 1, "telemetry": {"level": 1}}
CURSOR = (11, 17)  # after "        self.y = "
REQUEST_CANCELLED = -32800
CONTENT_MODIFIED = -32801
INVALID_PARAMS = -32602


@pytest.fixture(scope="module")
def mono(lsp_model_dir) -> Monolithic:
    return Monolithic(lsp_model_dir)


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=LSP_COMMAND))
async def client(lsp_client: LanguageClient, lsp_model_dir):
    lsp_client.statuses = StatusLog(lsp_client)
    result = await lsp_client.initialize_session(
        initialize_params({**OPTIONS, "model": {"dir": str(lsp_model_dir)}}))
    assert result.capabilities.inline_completion_provider is not None
    assert result.capabilities.completion_provider is not None
    assert result.capabilities.text_document_sync.change == types.TextDocumentSyncKind.Incremental
    await lsp_client.statuses.wait_for("ready")
    yield
    await lsp_client.shutdown_session()


def _inline(uri: str, line: int, character: int) -> types.InlineCompletionParams:
    return inline_params(uri, line, character, types.InlineCompletionTriggerKind.Automatic)


def _completion(uri: str, line: int, character: int) -> types.CompletionParams:
    return types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri),
                                  position=types.Position(line=line, character=character))


def _send(client: LanguageClient, params: types.InlineCompletionParams, msg_id: str | None = None) -> asyncio.Future:
    """Send an inline completion request now (pytest-lsp's async variant sends only when awaited)."""
    return asyncio.wrap_future(client.protocol.send_request(types.TEXT_DOCUMENT_INLINE_COMPLETION, params,
                                                            msg_id=msg_id))


async def _stats(client: LanguageClient) -> dict:
    return plain(await client.protocol.send_request_async(STATS_METHOD, None))


async def _expected(mono: Monolithic, text: str, line: int, character: int) -> str:
    at = offset_of(text, line, character)
    expected = await mono.complete(text[:at], text[at:], COMPLETION)
    assert expected, "the tiny model completes nothing here; pick another cursor"
    return expected


async def test_status_goes_from_starting_to_ready_in_split_mode(client: LanguageClient):
    statuses = client.statuses.items
    assert statuses[0]["state"] == "starting"
    ready = await client.statuses.wait_for("ready")
    assert ready["mode"] == "split" and "self-started cloud at http://127.0.0.1:" in ready["message"]
    assert all(s["mode"] == "split" and set(s) == {"state", "message", "mode", "expert", "access", "privacy",
                                                   "privacyDetails"} for s in statuses)
    assert statuses[0]["privacy"] is None and statuses[0]["privacyDetails"] is None
    # a plain model through its self-started loopback cloud: no NOIR, and what the tables say of that
    assert ready["privacy"] == "none · cloud reads ~99.9 % of tokens"
    details = ready["privacyDetails"]
    assert details["key"] == "none" and details["defended"] is False and details["optedIn"] is False
    assert {"name": "(a) nearest neighbour", "percent": 99.9} in details["attacks"] and details["baseline"] == 9.2
    assert all(s["expert"] is None for s in statuses)  # a plain model has no experts
    assert "unreachable" not in client.statuses.states and "error" not in client.statuses.states


async def test_unknown_initialization_options_are_a_warning_and_ignored(client: LanguageClient):
    [warning] = [m for m in client.log_messages if "unknown option" in m.message]
    assert warning.type == types.MessageType.Warning
    assert "completion.draftTokens" in warning.message and "telemetry" in warning.message


async def test_inline_completion_equals_the_monolithic_result(client: LanguageClient, mono):
    uri = "file:///inline.py"
    open_document(client, uri, SOURCE)
    result = await client.text_document_inline_completion_async(_inline(uri, *CURSOR))
    assert isinstance(result, types.InlineCompletionList) and len(result.items) == 1
    item = result.items[0]
    assert item.insert_text == await _expected(mono, SOURCE, *CURSOR)
    cursor = types.Position(line=CURSOR[0], character=CURSOR[1])
    assert item.range == types.Range(start=cursor, end=cursor)


async def test_inline_completion_after_the_selected_suggestion(client: LanguageClient, mono):
    uri = "file:///selected.py"
    text = "import os\nprint(os.pa"
    open_document(client, uri, text)
    selected = types.SelectedCompletionInfo(
        range=types.Range(start=types.Position(line=1, character=9), end=types.Position(line=1, character=11)),
        text="path")
    params = _inline(uri, 1, 11)
    params.context.selected_completion_info = selected
    result = await client.text_document_inline_completion_async(params)
    expected = await mono.complete("import os\nprint(os.path", "", COMPLETION)
    assert [i.insert_text for i in result.items] == (["path" + expected] if expected else [])
    assert all(i.range == selected.range for i in result.items)


async def test_completion_request_gives_one_item_with_the_completion(client: LanguageClient, mono):
    uri = "file:///completion.py"
    text = "def add(a, b):\n    return a\n"
    open_document(client, uri, text)
    result = await client.text_document_completion_async(_completion(uri, 1, 12))  # after "return a"
    expected = await _expected(mono, text, 1, 12)
    assert isinstance(result, types.CompletionList) and result.is_incomplete and len(result.items) == 1
    item = result.items[0]
    assert item.text_edit.new_text == "a" + expected  # the identifier before the cursor, completed
    assert item.text_edit.range == types.Range(start=types.Position(line=1, character=11),
                                               end=types.Position(line=1, character=12))
    assert item.filter_text == "a" + expected
    assert item.data["generatedTokens"] > 0 and "tokens" not in item.data


async def test_typing_a_character_reuses_the_prefix(client: LanguageClient, mono):
    uri = "file:///typing.py"
    open_document(client, uri, SOURCE)
    first = (await client.text_document_completion_async(_completion(uri, *CURSOR))).items[0]
    assert first.data["reusedTokens"] == 0 and first.data["recomputedTokens"] == first.data["promptTokens"]

    char = "z" if first.text_edit.new_text.startswith("x") else "x"  # not the shown text: no type-ahead
    insert(client, uri, 2, *CURSOR, char)  # incremental sync: one keystroke at the cursor
    edited = SOURCE[: offset_of(SOURCE, *CURSOR)] + char + SOURCE[offset_of(SOURCE, *CURSOR):]
    second = (await client.text_document_completion_async(_completion(uri, CURSOR[0], CURSOR[1] + 1))).items[0]
    assert second.text_edit.new_text == char + await _expected(mono, edited, CURSOR[0], CURSOR[1] + 1)
    assert second.data["reusedTokens"] > second.data["promptTokens"] // 2
    assert 0 < second.data["recomputedTokens"] < second.data["promptTokens"] // 2


async def test_cancel_request_cancels_and_the_session_stays_consistent(client: LanguageClient, mono):
    uri = "file:///cancel.py"
    open_document(client, uri, SOURCE)
    pending = _send(client, _inline(uri, *CURSOR), msg_id="cancel-me")
    await asyncio.sleep(0.05)  # the server is prefilling / decoding now (the completion takes ~0.5 s)
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="cancel-me"))
    with pytest.raises(JsonRpcException) as err:
        await pending
    assert err.value.code == REQUEST_CANCELLED
    again = await client.text_document_inline_completion_async(_inline(uri, *CURSOR))
    assert [i.insert_text for i in again.items] == [await _expected(mono, SOURCE, *CURSOR)]


async def test_a_newer_request_on_the_document_cancels_the_older(client: LanguageClient, mono):
    uri = "file:///supersede.py"
    open_document(client, uri, SOURCE)
    older = _send(client, _inline(uri, 4, 17))
    newer = _send(client, _inline(uri, *CURSOR))  # right behind it, before the older can finish
    with pytest.raises(JsonRpcException) as err:
        await older
    assert err.value.code == REQUEST_CANCELLED
    assert [i.insert_text for i in (await newer).items] == [await _expected(mono, SOURCE, *CURSOR)]


async def test_positions_count_utf16_code_units(client: LanguageClient, mono):
    uri = "file:///emoji.py"
    text = "s = '\U0001F600' + t  # tail\n"
    open_document(client, uri, text)
    cursor = len("s = '\U0001F600' + ") + 1  # the emoji is two UTF-16 code units
    result = await client.text_document_inline_completion_async(_inline(uri, 0, cursor))
    at = len("s = '\U0001F600' + ")
    expected = await mono.complete(text[:at], text[at:], COMPLETION)
    assert [i.insert_text for i in result.items] == ([expected] if expected else [])


async def test_requests_on_closed_or_unknown_documents_and_bad_positions_are_invalid_params(client: LanguageClient):
    uri = "file:///closing.py"
    open_document(client, uri, "x = 1\n")
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    for params in (_inline(uri, 0, 4), _inline("file:///never-opened.py", 0, 0)):
        with pytest.raises(JsonRpcException) as err:
            await client.text_document_inline_completion_async(params)
        assert err.value.code == INVALID_PARAMS and "not open" in err.value.message
    open_document(client, "file:///short.py", "x = 1\n")
    with pytest.raises(JsonRpcException) as err:
        await client.text_document_completion_async(_completion("file:///short.py", 5, 0))
    assert err.value.code == INVALID_PARAMS and "line 5 is outside the document" in err.value.message


def _type(client: LanguageClient, uri: str, text: str, at: int, char: str, version: int) -> tuple[str, types.Position]:
    """Type `char` at offset `at` of `text` (one incremental didChange); the new text and cursor."""
    pos = Document(text).position(at)
    insert(client, uri, version, pos.line, pos.character, char)
    text = text[:at] + char + text[at:]
    return text, Document(text).position(at + 1)


async def test_fifty_keystrokes_without_waiting_run_one_decode_at_a_time_and_answer_the_last(
        client: LanguageClient, mono):
    """A burst: the requests already superseded when their handler starts never begin a decode."""
    uri = "file:///rapid.py"
    open_document(client, uri, SOURCE)
    text, at = SOURCE, offset_of(SOURCE, *CURSOR)
    before = await _stats(client)
    pending, answered = [], []
    typed = "x * 2 + self.x - 1 if x else y  # the point's y, a longer comment"[:50]
    for i, char in enumerate(typed):  # 50 didChange + inlineCompletion pairs, none awaited
        text, cursor = _type(client, uri, text, at + i, char, version=2 + i)
        future = _send(client, _inline(uri, cursor.line, cursor.character))
        future.add_done_callback(lambda f, i=i: answered.append(i))
        pending.append(future)
    results = await asyncio.gather(*pending, return_exceptions=True)
    after = await _stats(client)

    assert len(typed) == 50 and answered[-1] == 49  # the last request is the last answered: none after it
    expected = await _expected(mono, text, cursor.line, cursor.character)
    assert [i.insert_text for i in results[-1].items] == [expected]  # a real answer, for the final text
    cancelled = [r for r in results[:-1] if isinstance(r, JsonRpcException)]
    assert all(r.code in (REQUEST_CANCELLED, CONTENT_MODIFIED) for r in cancelled)
    assert all(isinstance(r, (JsonRpcException, types.InlineCompletionList)) for r in results[:-1])
    assert after["decodes"]["maxPerDocument"] == 1 and after["decodes"]["running"] == 0
    started = after["decodes"]["started"] - before["decodes"]["started"]
    outcomes = {k: after["completions"][k] - before["completions"][k] for k in after["completions"]}
    assert sum(outcomes.values()) == 50
    assert outcomes["failed"] == outcomes["unreachable"] == outcomes["typeahead"] == 0
    assert outcomes["cancelled"] + outcomes["skipped"] == len(cancelled) >= 40  # never ran a decode to its end
    # the server read the burst in a few chunks: only the newest request of each got past the stale
    # check, and one of those may still be cancelled while it waits for the older one to unwind
    # (cancelled without starting a decode), so at most one decode per request not skipped
    assert 1 <= started <= 10 and outcomes["skipped"] >= 40 and started <= 50 - outcomes["skipped"]
    await asyncio.sleep(0.5)
    assert await _stats(client) == after  # nothing started after the last answer


async def test_typing_the_shown_completion_is_answered_with_its_rest_without_a_decode(client: LanguageClient, mono):
    uri = "file:///typeahead.py"
    open_document(client, uri, SOURCE)
    at = offset_of(SOURCE, *CURSOR)
    shown = (await client.text_document_inline_completion_async(_inline(uri, *CURSOR))).items[0].insert_text
    assert shown == await _expected(mono, SOURCE, *CURSOR) and len(shown) >= 3
    before = await _stats(client)
    text = SOURCE
    for i in range(2):  # type the first two characters of what is shown
        text, cursor = _type(client, uri, text, at + i, shown[i], version=2 + i)
        result = await client.text_document_inline_completion_async(_inline(uri, cursor.line, cursor.character))
        assert [item.insert_text for item in result.items] == [shown[i + 1:]]
        assert result.items[0].range == types.Range(start=cursor, end=cursor)
    served = await _stats(client)
    assert served["decodes"]["started"] == before["decodes"]["started"]  # no decode, no cloud round trip
    assert served["completions"]["typeahead"] == before["completions"]["typeahead"] + 2
    assert served["completions"]["ok"] == before["completions"]["ok"]

    other = "#" if shown[2] != "#" else "@"  # a character the completion does not go on with: a decode
    text, cursor = _type(client, uri, text, at + 2, other, version=4)
    result = await client.text_document_inline_completion_async(_inline(uri, cursor.line, cursor.character))
    expected = await mono.complete(text[: at + 3], text[at + 3:], COMPLETION)
    assert [item.insert_text for item in result.items] == ([expected] if expected else [])
    missed = await _stats(client)
    assert missed["decodes"]["started"] == served["decodes"]["started"] + 1
    assert missed["completions"]["typeahead"] == served["completions"]["typeahead"]

    client.text_document_did_close(types.DidCloseTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))
    closed = await _stats(client)  # answered after didClose was handled: the document's completions are gone
    assert closed["typeaheadEntries"] < missed["typeaheadEntries"]
