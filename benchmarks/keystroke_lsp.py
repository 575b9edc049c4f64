"""The real language server as a typing editor drives it, for benchmarks/keystroke.py: `python
-m lsp` over stdio through pygls's client; open a document, type a character (a `didChange`)
and ask `textDocument/inlineCompletion` at the new cursor, read `umbra/stats`."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from lsp.documents import Document
from lsp.server import STATS_METHOD, STATUS_METHOD
from lsp_helpers import plain  # tests/lsp's helpers (keystroke.py puts them on the path)

ROOT = Path(__file__).resolve().parents[1]
URI = "file:///bench/typed.py"


class Server:
    """The real language server over stdio, through pygls's client."""

    def __init__(self, options: dict, log: Path):
        self.options, self.log = options, log
        self.client = LanguageClient("umbra-keystroke-bench", "1")
        self.state = asyncio.get_running_loop().create_future()
        self.text, self.version = "", 1

        @self.client.feature(STATUS_METHOD)
        def on_status(ls, params):
            state = getattr(params, "state", None)
            if state in ("ready", "error", "unreachable") and not self.state.done():
                self.state.set_result((state, getattr(params, "message", "")))

    async def start(self) -> None:
        await self.client.start_io(sys.executable, "-m", "lsp", cwd=str(ROOT))
        self._drain = asyncio.ensure_future(self._drain_stderr())
        await self.client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(), initialization_options=self.options))
        self.client.initialized(types.InitializedParams())
        state, message = await asyncio.wait_for(self.state, 600)
        if state != "ready":
            raise SystemExit(f"the language server is {state}: {message} (log: {self.log})")

    async def _drain_stderr(self) -> None:
        with open(self.log, "ab") as out:
            while line := await self.client._server.stderr.readline():
                out.write(line)

    def open(self, text: str) -> None:
        self.text = text
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=URI, language_id="python", version=1, text=text)))

    def type(self, at: int, char: str) -> types.InlineCompletionParams:
        """Send the didChange typing `char` at offset `at`; the request to send next."""
        pos = Document(self.text).position(at)
        self.version += 1
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=self.version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text=char)]))
        self.text = self.text[:at] + char + self.text[at:]
        return inline_params(Document(self.text).position(at + 1))

    def send(self, params: types.InlineCompletionParams) -> asyncio.Future:
        """The inline completion request, sent now; its future answers the inserted text."""
        future = asyncio.wrap_future(self.client.protocol.send_request(types.TEXT_DOCUMENT_INLINE_COMPLETION, params))
        return asyncio.ensure_future(_text(future))

    async def complete(self, params: types.InlineCompletionParams) -> str:
        return await self.send(params)

    async def stats(self) -> dict:
        return plain(await self.client.protocol.send_request_async(STATS_METHOD, None))

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 60)
            self.client.exit(None)
            await asyncio.wait_for(self.client.stop(), 60)
        finally:
            self._drain.cancel()


async def _text(future: asyncio.Future) -> str:
    result = await future
    return result.items[0].insert_text if result.items else ""


def inline_params(pos: types.Position) -> types.InlineCompletionParams:
    return types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), position=pos,
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))


def typed_region(text: str, keystrokes: int) -> int:
    """Where the typed characters start: the start of the line nearest the file's middle that
    leaves `keystrokes` characters after it."""
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    fits = [s for s in starts if s + keystrokes <= len(text) and text[s:s + 1].strip()] or [0]
    return min(fits, key=lambda s: abs(s - len(text) // 2))


def typed_region(text: str, keystrokes: int) -> int:
    """Where the typed characters start: the start of the line nearest the file's middle that
    leaves `keystrokes` characters after it."""
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    fits = [s for s in starts if s + keystrokes <= len(text) and text[s:s + 1].strip()] or [0]
    return min(fits, key=lambda s: abs(s - len(text) // 2))
