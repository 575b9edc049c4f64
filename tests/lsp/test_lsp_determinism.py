"""Determinism at the cursor (issue 63, point 2), through the real language server over stdio and
the real cloud on loopback (`loopback_cloud`): the same document and cursor show the same greedy completion whatever
happened before — after any seeded sequence of edits with completions in between (the session's
prefix cache warm, reused and truncated), in a document opened afresh (cold), again (warm), and
all documents at once (the cloud serving them side by side) — and it is the completion of the
whole model run in this process."""

from __future__ import annotations

import asyncio
import random

import pytest
import pytest_asyncio
from lsp_helpers import (SOURCE, Monolithic, cloud_env, initialize_params, inline_params, language_server, open_document,
                         through_cloud)
from lsprotocol import types
from pytest_lsp import LanguageClient

from lsp.options import CompletionOptions, InlineOptions

pytestmark = [pytest.mark.asyncio(loop_scope="module"),
              pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")]

OPTIONS = CompletionOptions(max_tokens=12)
NO_DEADLINE = InlineOptions(deadline_ms=0)  # answers are whole decodes, never cut by time
SEEDS = range(6)
SNIPPETS = ("x", " = 1", "\n", "    ", "def f(a):\n    return a\n", "self.", "(", ")", "# note\n", "for i in range(3):\n")


@pytest.fixture(scope="module")
def mono(lsp_model_dir) -> Monolithic:
    return Monolithic(lsp_model_dir)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(lsp_model_dir, loopback_cloud):
    options = {"model": {"dir": str(lsp_model_dir)}, "threads": 1, "inline": {"deadlineMs": 0},
               "completion": {"maxTokens": OPTIONS.max_tokens}}
    async with language_server(cloud_env(loopback_cloud.token)) as lsp_client:
        await lsp_client.initialize_session(initialize_params(through_cloud(options, loopback_cloud.base_url)))
        await lsp_client.statuses.wait_for("ready")
        yield lsp_client
        await lsp_client.shutdown_session()


def _position(text: str, offset: int) -> types.Position:
    before = text[:offset]
    return types.Position(line=before.count("\n"), character=offset - (before.rfind("\n") + 1))


def _edit(rng: random.Random, text: str) -> tuple[str, types.TextDocumentContentChangePartial]:
    """A random insertion or deletion (ASCII only: offsets are UTF-16 units too)."""
    a = rng.randrange(len(text) + 1)
    b = a if rng.random() < 0.6 or a == len(text) else min(len(text), a + rng.randrange(1, 12))
    new = rng.choice(SNIPPETS) if a == b or rng.random() < 0.5 else ""
    change = types.TextDocumentContentChangePartial(range=types.Range(start=_position(text, a), end=_position(text, b)),
                                                    text=new)
    return text[:a] + new + text[b:], change


async def _complete(client: LanguageClient, uri: str, text: str, offset: int) -> str:
    pos = _position(text, offset)
    result = await client.text_document_inline_completion_async(
        inline_params(uri, pos.line, pos.character, types.InlineCompletionTriggerKind.Invoked))
    return result.items[0].insert_text if result.items else ""


async def _edited(client: LanguageClient, seed: int) -> tuple[str, str, int]:
    """A document taken through a seeded run of edits, completed at random cursors between them;
    its uri, final text and a final cursor."""
    rng, uri, text = random.Random(seed), f"file:///edited-{seed}.py", SOURCE
    open_document(client, uri, text)
    for version in range(2, 12):
        text, change = _edit(rng, text)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version), content_changes=[change]))
        if rng.random() < 0.5:
            await _complete(client, uri, text, rng.randrange(len(text) + 1))
    return uri, text, rng.randrange(len(text) + 1)


async def test_the_same_document_and_cursor_complete_the_same_after_any_edits(client: LanguageClient, mono):
    finals = []
    for seed in SEEDS:
        uri, text, at = await _edited(client, seed)
        warm = await _complete(client, uri, text, at)
        fresh = f"file:///fresh-{seed}.py"  # the same text opened afresh: nothing cached for it
        open_document(client, fresh, text)
        cold = await _complete(client, fresh, text, at)
        expected = await mono.complete(text[:at], text[at:], OPTIONS, NO_DEADLINE)
        assert warm == cold == expected, f"seed {seed}: warm {warm!r}, cold {cold!r}, whole model {expected!r}"
        assert await _complete(client, uri, text, at) == expected, f"seed {seed}: asked again"
        finals.append((fresh, text, at, expected))
    assert sum(bool(e) for *_, e in finals) >= len(finals) // 2  # completions, not empty answers agreeing
    # every document at once: the server and its cloud serve them side by side
    together = await asyncio.gather(*(_complete(client, uri, text, at) for uri, text, at, _ in finals))
    assert together == [expected for *_, expected in finals]
