"""The editor path's own options (lsp/options.py `inline`, `completion.multiline` "auto") through
the real language server over stdio and the real cloud on loopback (`loopback_cloud`; the
self-started cloud is test_lsp_server's): with the default options an inline completion is the
rest of the line mid-line and a block at a blank line, a degenerate loop is cut after one copy,
and the latency deadline ends a long decode with the text so far — a target: past it the decode
goes on to the first whole word, within its grace (the server's `umbra/stats` counts completions
by stop reason). One server for the module: each test puts its options in force with
`workspace/didChangeConfiguration` (lsp/reconfiguration.py), in place, before its requests."""

from __future__ import annotations

import time

import pytest
import pytest_asyncio
from lsp_helpers import (SOURCE, Monolithic, cloud_env, initialize_params, inline_params, language_server, offset_of,
                         open_document, plain, through_cloud)
from lsprotocol import types
from pytest_lsp import LanguageClient

from lsp.options import CompletionOptions, InlineOptions
from lsp.server import STATS_METHOD
from umbra.engine import CompletionResult
from umbra.engine.fim import build_prompt
from umbra.engine.postprocess import postprocess
from umbra.engine.repetition import loop_cut
from umbra.engine.stops import unfinished_cut

pytestmark = [pytest.mark.asyncio(loop_scope="module"),
              pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")]

DEFAULTS = CompletionOptions()  # maxTokens 64, multiline "auto"
NO_DEADLINE = InlineOptions(deadline_ms=0)  # the default loop stop; no deadline, so answers are exact
MID_LINE = (11, 17)  # after "        self.y = "
BLANK_LINE = (13, 0)  # the empty line before `print(...)`


@pytest.fixture(scope="module")
def mono(lsp_model_dir) -> Monolithic:
    return Monolithic(lsp_model_dir)


@pytest.fixture(scope="module")
def base(loopback_cloud, lsp_model_dir) -> dict:
    """The options every test starts from: the model, the cloud, one thread (the rest default)."""
    return through_cloud({"model": {"dir": str(lsp_model_dir)}, "threads": 1}, loopback_cloud.base_url)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(loopback_cloud, base):
    """The module's language server completing through `loopback_cloud`, ready; shut down at the end."""
    async with language_server(cloud_env(loopback_cloud.token)) as client:
        await client.initialize_session(initialize_params(base))
        await client.statuses.wait_for("ready")
        yield client
        assert client.statuses.states.count("starting") == 2  # loading the model, connecting: set up once
        await client.shutdown_session()


def _configured(server: LanguageClient, base: dict, options: dict) -> LanguageClient:
    """`server` with `options` (over `base`) for every request sent after this: in place, the same
    model and cloud (the `server` fixture checks that it set up once)."""
    server.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={**base, **options}))
    return server


@pytest.fixture
def client(server, base):
    return _configured(server, base, {"inline": {"deadlineMs": 0}})  # the rest default


def _inline(uri: str, line: int, character: int) -> types.InlineCompletionParams:
    return inline_params(uri, line, character, types.InlineCompletionTriggerKind.Invoked)


async def _answer(client: LanguageClient, uri: str, line: int, character: int) -> str:
    result = await client.text_document_inline_completion_async(_inline(uri, line, character))
    return result.items[0].insert_text if result.items else ""


async def _stats(client: LanguageClient) -> dict:
    return plain(await client.protocol.send_request_async(STATS_METHOD, None))


def _grown(before: dict, after: dict) -> dict:
    """The counts that grew from `before` to `after`, by how much."""
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


@pytest.mark.parametrize("cursor", [MID_LINE, BLANK_LINE], ids=["mid-line", "blank-line"])
async def test_default_options_complete_the_line_or_the_block_with_the_loop_stop(client: LanguageClient, mono,
                                                                                   cursor):
    uri = f"file:///defaults-{cursor[0]}.py"
    open_document(client, uri, SOURCE)
    at = offset_of(SOURCE, *cursor)
    expected = await mono.result(SOURCE[:at], SOURCE[at:], DEFAULTS, NO_DEADLINE)
    assert await _answer(client, uri, *cursor) == expected.text
    if cursor == MID_LINE:
        assert "\n" not in expected.text
    if cursor == BLANK_LINE:  # a block: what the explicit multi-line mode gives, up to a blank line
        block = await mono.result(SOURCE[:at], SOURCE[at:], CompletionOptions(multiline=True), NO_DEADLINE)
        assert block.text.startswith(expected.text)
        assert expected.stop_reason != "blank_line" or "\n\n" in block.text[len(expected.text):].lstrip(" ")


async def test_a_degenerate_loop_is_cut_after_one_copy(client: LanguageClient, mono):
    uri = "file:///loop.py"
    at = offset_of(SOURCE, *MID_LINE)
    free = await mono.result(SOURCE[:at], SOURCE[at:], DEFAULTS)  # no loop stop: to the 64-token cap
    loops_at = [n for n in range(1, free.generated_tokens + 1) if loop_cut(free.tokens[:n], 12) is not None]
    assert free.stop_reason == "max_tokens" and loops_at  # the tiny random model loops here (")))…")
    expected = await mono.result(SOURCE[:at], SOURCE[at:], DEFAULTS, NO_DEADLINE)
    assert expected.stop_reason == "repetition" and expected.tokens == free.tokens[:loops_at[0]]
    assert free.text.startswith(expected.text) and len(expected.text) < len(free.text)
    before = await _stats(client)
    open_document(client, uri, SOURCE)
    assert await _answer(client, uri, *MID_LINE) == expected.text
    after = await _stats(client)
    assert after["stops"]["repetition"] == before["stops"].get("repetition", 0) + 1


@pytest.fixture
def hurried(server, base):
    """The server with decodes that stop 1 ms after a request arrives, whatever their text holds
    (no grace), and 300-token block completions."""
    return _configured(server, base, {
        "completion": {"maxTokens": 300, "multiline": True},
        "inline": {"deadlineMs": 1, "deadlineGraceMs": 0, "repetitionTokens": 0}})


async def test_the_deadline_answers_with_the_text_so_far(hurried: LanguageClient, mono):
    uri = "file:///hurried.py"
    open_document(hurried, uri, SOURCE)
    at = offset_of(SOURCE, *MID_LINE)
    full = await mono.result(SOURCE[:at], SOURCE[at:], CompletionOptions(max_tokens=300, multiline=True))
    assert full.generated_tokens > 100  # a long decode without the deadline
    before = await _stats(hurried)
    t0 = time.perf_counter()
    answer = await _answer(hurried, uri, *MID_LINE)
    took = time.perf_counter() - t0
    after = await _stats(hurried)
    assert _grown(before["stops"], after["stops"]) == {"deadline": 1}
    assert after["completions"]["ok"] == before["completions"]["ok"] + 1
    assert full.text.startswith(answer) and len(answer) < len(full.text)
    assert took < full.decode_seconds  # well short of the whole decode


@pytest.fixture
def patient(server, base):
    """The server with a deadline 1 ms after a request arrives and ten minutes of grace to reach a
    whole word (the default options otherwise, without the loop stop)."""
    return _configured(server, base, {
        "inline": {"deadlineMs": 1, "deadlineGraceMs": 600_000, "repetitionTokens": 0}})


def _first_shown(mono: Monolithic, prefix: str, suffix: str, inline: InlineOptions,
                 full: CompletionResult) -> tuple[int, str]:
    """(n, text): the fewest of the whole decode's tokens whose text, cut where a deadline cuts
    (stops.unfinished_cut, then post-processing), is not empty, and that text."""
    tok = mono.model.tokenizer
    config = inline.engine_config(DEFAULTS.engine_config())
    heal = build_prompt(tok, mono.model.fim, prefix, suffix, config.prompt).heal
    for n in range(1, full.generated_tokens + 1):
        text = tok.decode(list(full.tokens[:n]))[len(heal):].rstrip("\ufffd")
        shown = postprocess(text[:unfinished_cut(text)], suffix)
        if shown:
            return n, shown
    raise AssertionError("no whole word in the whole decode")


@pytest.mark.parametrize("cursor", [MID_LINE, BLANK_LINE], ids=["mid-line", "blank-line"])
async def test_past_the_deadline_the_decode_goes_on_to_the_first_whole_word(patient: LanguageClient, mono, cursor):
    uri = f"file:///patient-{cursor[0]}.py"
    open_document(patient, uri, SOURCE)
    at = offset_of(SOURCE, *cursor)
    exact = InlineOptions(deadline_ms=0, repetition_tokens=0)
    full = await mono.result(SOURCE[:at], SOURCE[at:], DEFAULTS, exact)
    n, expected = _first_shown(mono, SOURCE[:at], SOURCE[at:], exact, full)
    assert n > 1 and n < full.generated_tokens  # the first token alone shows nothing; the decode goes on
    before = await _stats(patient)
    result = await patient.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(*cursor)))
    item = (result.items if isinstance(result, types.CompletionList) else result)[0]
    assert item.data["stopReason"] == "deadline" and item.data["generatedTokens"] == n
    assert item.text_edit.new_text.endswith(expected) and full.text.startswith(expected)
    after = await _stats(patient)
    assert after["stops"]["deadline"] == before["stops"].get("deadline", 0) + 1
    assert await _answer(patient, uri, *cursor) == expected  # inline: the same text
