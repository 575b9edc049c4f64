"""The real language server (`python -m lsp`) over stdio, driven by pytest-lsp, completing through
the real cloud service it starts itself on loopback: inline completion and completion equal the
monolithic result, unknown initializationOptions are a warning, typing reuses the prefix,
cancellation and supersession leave the session consistent, bad requests are LSP errors."""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from lsp_helpers import (
    LSP_COMMAND,
    SOURCE,
    Monolithic,
    StatusLog,
    initialize_params,
    insert,
    offset_of,
    open_document,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient

from lsp.options import CompletionOptions

pytestmark = [pytest.mark.asyncio(loop_scope="module"),
              pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")]

COMPLETION = CompletionOptions(max_tokens=300, multiline=True)  # long enough to cancel mid-flight
# With keys of a newer editor extension, which this server warns about and ignores.
OPTIONS = {"completion": {"maxTokens": 300, "multiline": True, "draftTokens": 4}, "threads": 1,
           "telemetry": {"level": 1}}
CURSOR = (11, 17)  # after "        self.y = "
REQUEST_CANCELLED = -32800
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
    return types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))


def _completion(uri: str, line: int, character: int) -> types.CompletionParams:
    return types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri),
                                  position=types.Position(line=line, character=character))


def _send(client: LanguageClient, params: types.InlineCompletionParams, msg_id: str | None = None) -> asyncio.Future:
    """Send an inline completion request now (pytest-lsp's async variant sends only when awaited)."""
    return asyncio.wrap_future(client.protocol.send_request(types.TEXT_DOCUMENT_INLINE_COMPLETION, params,
                                                            msg_id=msg_id))


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
    assert all(s["mode"] == "split" and set(s) == {"state", "message", "mode", "expert", "access", "privacy"}
               for s in statuses)
    assert statuses[0]["privacy"] is None and ready["privacy"] == "none"  # a plain model: no NOIR
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

    insert(client, uri, 2, *CURSOR, "x")  # incremental sync: one keystroke at the cursor
    edited = SOURCE[: offset_of(SOURCE, *CURSOR)] + "x" + SOURCE[offset_of(SOURCE, *CURSOR):]
    second = (await client.text_document_completion_async(_completion(uri, CURSOR[0], CURSOR[1] + 1))).items[0]
    assert second.text_edit.new_text == "x" + await _expected(mono, edited, CURSOR[0], CURSOR[1] + 1)
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
