"""`workspace/didChangeConfiguration` (lsp/reconfiguration.py) through the real language server
over stdio and the real cloud on loopback: one server for the module, its options changed
under it — bad settings are refused with a message naming the option and change nothing;
completion options apply in place from the next request (also under an "umbra" key); a change of
`clientOnly` sets the model and the cloud up again in the same process, with the statuses to say
so and the counters carried over, and back; a shutdown in the middle of such a change ends the
server cleanly. (test_lsp_inline runs its option sets this way too.)"""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from lsp_helpers import (SOURCE, Monolithic, cloud_env, initialize_params, language_server, offset_of, open_document,
                         plain, through_cloud)
from lsprotocol import types
from pytest_lsp import LanguageClient

from lsp.options import CompletionOptions, InitializationOptions, InlineOptions
from lsp.reconfiguration import IN_PLACE, changed_sections, settings_object
from lsp.server import STATS_METHOD
from umbra.engine import ClientModel
from umbra.engine.client_only import client_only_engine

pytestmark = [pytest.mark.asyncio(loop_scope="module"),
              pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")]

MID_LINE = (11, 17)  # after "        self.y = "
EXACT = InlineOptions(deadline_ms=0, repetition_tokens=0)
URI = "file:///reconfigured.py"


@pytest.fixture(scope="module")
def base(loopback_cloud, lsp_model_dir) -> dict:
    return through_cloud({"model": {"dir": str(lsp_model_dir)}, "threads": 1,
                          "inline": {"deadlineMs": 0, "repetitionTokens": 0}}, loopback_cloud.base_url)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(loopback_cloud, base):
    async with language_server(cloud_env(loopback_cloud.token)) as client:
        await client.initialize_session(initialize_params(base))
        await client.statuses.wait_for("ready")
        open_document(client, URI, SOURCE)
        yield client
        if client._server.returncode is None:
            await client.shutdown_session()


def _change(server: LanguageClient, settings) -> None:
    server.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=settings))


async def _complete(server: LanguageClient) -> types.CompletionItem:
    result = await server.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(*MID_LINE)))
    return (result.items if isinstance(result, types.CompletionList) else result)[0]


async def _stats(server: LanguageClient) -> dict:
    return plain(await server.protocol.send_request_async(STATS_METHOD, None))


async def _expected(lsp_model_dir, options: CompletionOptions, client_only: bool = False) -> str:
    at = offset_of(SOURCE, *MID_LINE)
    if client_only:
        config = EXACT.engine_config(options.engine_config())
        return (await client_only_engine(ClientModel.load(lsp_model_dir), config).complete(SOURCE[:at], SOURCE[at:])).text
    return await Monolithic(lsp_model_dir).complete(SOURCE[:at], SOURCE[at:], options, EXACT)


async def test_the_sections_that_change_in_place_and_the_umbra_key():
    before = InitializationOptions.from_json({})
    assert changed_sections(before, InitializationOptions.from_json({"completion": {"maxTokens": 3},
                                                                     "languages": {"aliases": {"x": "go"}}})) \
        == {"completion", "languages"} <= IN_PLACE
    assert not changed_sections(before, InitializationOptions.from_json({"completion": {"maxTokens": 64}}))
    assert changed_sections(before, InitializationOptions.from_json({"clientOnly": True})) == {"client_only"}
    assert not {"model", "cloud", "threads", "client_only", "allow_undefended_remote_cloud"} & IN_PLACE
    assert settings_object({"umbra": {"threads": 1}}) == {"threads": 1}
    assert settings_object({"umbra": {"threads": 1}, "pylsp": {}}) == {"threads": 1}
    assert settings_object({"completion": {"max_tokens": 3}}) == {"completion": {"max_tokens": 3}}
    for not_ours in (None, {}, [], "x", {"pylsp": {"plugins": {}}}, {"umbra": {}}):  # e.g. Neovim's empty table
        assert settings_object(not_ours) is None, not_ours


async def test_bad_settings_are_refused_with_a_message_and_change_nothing(server, base, lsp_model_dir):
    _change(server, {})  # not Umbra's settings (what some clients send after every start): not the defaults
    _change(server, {**base, "completion": {"maxTokens": 0}})
    item = await _complete(server)  # read after the notification: the options in force are the old ones
    assert item.text_edit.new_text == await _expected(lsp_model_dir, CompletionOptions())
    messages = [m.message for m in server.messages if m.type == types.MessageType.Error]
    assert any("not applied" in m and "completion.maxTokens" in m for m in messages), messages
    assert server.statuses.states.count("starting") == 2  # set up once: nothing was replaced


async def test_completion_options_apply_in_place_from_the_next_request(server, base, lsp_model_dir):
    before = await _stats(server)
    starts = server.statuses.states.count("starting")
    _change(server, {"umbra": {**base, "completion": {"maxTokens": 2}}})
    item = await _complete(server)
    assert item.data["generatedTokens"] <= 2
    assert item.text_edit.new_text == await _expected(lsp_model_dir, CompletionOptions(max_tokens=2))
    _change(server, base)
    item = await _complete(server)
    assert item.text_edit.new_text == await _expected(lsp_model_dir, CompletionOptions())
    assert item.data["reusedTokens"] > 0  # the document's warm session served both: nothing was set up again
    assert server.statuses.states.count("starting") == starts
    assert (await _stats(server))["completions"]["ok"] == before["completions"]["ok"] + 2


async def test_client_only_and_back_set_up_again_in_the_same_process(server, base, lsp_model_dir):
    pid, ok = server._server.pid, (await _stats(server))["completions"]["ok"]
    seen = len(server.statuses.items)
    _change(server, {**base, "clientOnly": True})
    item = await _complete(server)  # waits for the new set-up
    assert item.text_edit.new_text == await _expected(lsp_model_dir, CompletionOptions(), client_only=True)
    ready = await server.statuses.wait_for("ready", after=seen)
    assert "client only" in ready["message"] and server.statuses.items[seen]["state"] == "starting"
    assert [s["state"] for s in server.statuses.items[seen:]].count("ready") == 1  # no stale status of the old one
    seen = len(server.statuses.items)
    _change(server, base)
    item = await _complete(server)
    assert item.text_edit.new_text == await _expected(lsp_model_dir, CompletionOptions())
    assert "split inference" in (await server.statuses.wait_for("ready", after=seen))["message"]
    assert (await _stats(server))["completions"]["ok"] == ok + 2  # the counters carried over
    assert server._server.pid == pid and server._server.returncode is None


async def test_a_shutdown_while_the_model_is_set_up_again_ends_cleanly(server, base):
    _change(server, {**base, "threads": 2})  # a new backend: the old one closes, the new one starts
    await server.shutdown_session()  # at once: shutdown closes both, exit ends the process
    assert await asyncio.wait_for(server._server.wait(), 60) == 0
