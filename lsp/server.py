"""The Umbra language server (pygls, stdio): inline completions through split inference.

Lifecycle
  initialize     initializationOptions → InitializationOptions, converted once (lsp/options.py);
                 bad values → InvalidParams naming the option's JSON path; unknown keys are
                 ignored with a warning (logged, and a `window/logMessage` to the editor)
  initialized    set-up in the background (model, cloud, connection) with `umbra/status`
                 notifications: "starting" → "ready" | "unreachable" | "error" (lsp/backend.py),
                 each with the privacy mode in force (`privacy`, `privacyDetails`)
  workspace/didChangeConfiguration   new options (`settings`: the initializationOptions
                 object) in the same process: completion, inline, context and languages in place,
                 the rest by setting the model and the cloud up again (lsp/reconfiguration.py)
  shutdown       close every session, the connection and a self-started cloud
Features
  textDocument/didOpen|didChange|didClose   incremental sync into our own documents
                 (lsp/documents.py); didClose also closes the document's completion session
  textDocument/inlineCompletion   (LSP 3.18) one item: the completion, inserted at the cursor
                 (after the editor's selected suggestion, if it passes one)
  textDocument/completion         for editors without inline completion: one item whose edit
                 replaces the identifier before the cursor with itself + the completion;
                 `data` carries the request's token statistics (never token ids)
  umbra/stats                     (custom request, no params) the server's counters, counts only:
                 {"decodes": {"running", "started", "maxPerDocument"}, "completions": {"ok",
                 "cancelled", "typeahead", "skipped", "failed", "unreachable"}, "stops": {stop
                 reason: decoded completions}, "sessions", "typeaheadEntries"}
Both completion requests complete with the `completion` options plus the `inline` ones (the
loop stop; past `inline.deadlineMs` after the request was read the decode ends at the first token
whose text shows a whole line or word, within `inline.deadlineGraceMs` more, with the text so far
trimmed to a whole line or word). Each document has one warm CompletionSession (prefix reuse
across keystrokes); `$/cancelRequest` and a newer request on the same document cancel the
running one, and only the newest request of a document runs (lsp/sessions.py): rapid typing
never queues stale decodes. A request is completed on the document as it was when the request
was read; one whose document already has a newer request, or a newer edit, when its handler
starts is answered RequestCancelled / ContentModified without a decode (lsp/arrivals.py;
counted as "skipped"). A cancelled request is answered RequestCancelled. Typing the first
characters of the completion just shown is answered with its rest, without a decode
(lsp/typeahead.py).
Malformed messages, requests after `shutdown` and a second `initialize` are answered with
LSP errors (lsp/protocol.py); the server keeps serving. Errors go through one table (lsp/errors.py). A cloud that cannot be reached yields an empty
result: the `umbra/status` notification says so once, and nothing is sent any other way."""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from importlib.metadata import PackageNotFoundError, version

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcRequestCancelled
from pygls.lsp.server import LanguageServer

from lsp.arrivals import Arrival, Arrivals
from lsp.backend import Backend
from lsp.documents import Document, Documents, identifier_before
from lsp.open_context import OpenContext
from lsp.errors import NotReady, fault_for
from lsp.options import InitializationOptions
from lsp.protocol import UmbraProtocol, strict_converter
from lsp.reconfiguration import Reconfigurer
from lsp.status import Status
from umbra.engine import CompletionResult
from umbra.errors import CloudUnavailable, UmbraError, ValidationError

STATUS_METHOD = "umbra/status"
STATS_METHOD = "umbra/stats"
COMPLETION_METHODS = (types.TEXT_DOCUMENT_INLINE_COMPLETION, types.TEXT_DOCUMENT_COMPLETION)
CONTENT_MODIFIED = -32801  # LSP: the document changed under the request
EDITOR_DECODES = 1  # editor completions decoding at once (the rest wait their turn, first come first served)
log = logging.getLogger("umbra.lsp")


def lsp_error(exc: BaseException) -> JsonRpcException:
    """The response error for `exc` (the one place the language server maps errors)."""
    fault = fault_for(exc)
    if not isinstance(exc, UmbraError):  # a bug: type and frames for the log (no message: it could
        # quote data), "internal error" for the editor
        log.error("request failed: %s\n%s", type(exc).__name__, "".join(traceback.format_tb(exc.__traceback__)))
    return JsonRpcException(message=fault.message, code=fault.lsp_code, data={"error": type(exc).__name__})


def _version() -> str:
    try:
        return version("umbra")
    except PackageNotFoundError:
        return "0"


class UmbraLanguageServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("umbra", _version(), text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
                         protocol_cls=UmbraProtocol, converter_factory=strict_converter)
        self.documents = Documents()
        self.arrivals = Arrivals()
        self.options: InitializationOptions | None = None
        self.backend: Backend | None = None
        self.context: OpenContext | None = None  # context from the other open documents (options.context)
        self._starting: asyncio.Task | None = None
        self._decodes = asyncio.Semaphore(EDITOR_DECODES)
        self._latest: dict[str, object] = {}  # uri -> the newest completion request on it not yet decoding

    @property
    def initialized(self) -> bool:
        """`initialize` has succeeded (a second one is refused: lsp/protocol.py)."""
        return self.options is not None

    def send_status(self, status: Status) -> None:
        self.protocol.notify(STATUS_METHOD, status.to_json())

    def warn_editor(self, message: str) -> None:
        """A warning in the editor's log of this server (allowed before `initialize` answers)."""
        self.window_log_message(types.LogMessageParams(type=types.MessageType.Warning, message=f"Umbra: {message}"))

    def request_arrived(self, message) -> None:
        """A request was read (lsp/protocol.py): note a completion's document as it is now."""
        if message.method in COMPLETION_METHODS:
            uri = message.params.text_document.uri
            self.arrivals.arrived(message.params, uri, self.documents.find(uri))

    def arrival(self, params) -> tuple[Document, float, Arrival | None]:
        """The request's document as it was when the request was read, and when that was."""
        arrival = self.arrivals.take(params)
        document = arrival.document if arrival is not None else None
        if document is None:  # not open then: the current one, or the error saying it is not open
            document = self.documents.get(params.text_document.uri)
        return document, arrival.at if arrival is not None else time.monotonic(), arrival

    def stale(self, arrival: Arrival | None) -> JsonRpcException | None:
        """The answer to a request that a newer request or edit of its document made stale, or None."""
        if arrival is None or arrival.document is None or self.backend is None:
            return None
        if self.arrivals.superseded(arrival):
            self.backend.counts["skipped"] += 1
            return JsonRpcRequestCancelled("a newer request on the document replaced this one")
        try:
            current = self.documents.get(arrival.uri)
        except UmbraError as exc:  # closed since
            return lsp_error(exc)
        if current.version != arrival.document.version:
            self.backend.counts["skipped"] += 1
            return JsonRpcException(code=CONTENT_MODIFIED, message="the document changed since this request")
        return None

    async def complete(self, uri: str, prefix: str, suffix: str, language: str, arrived_at: float,
                       doc: Document | None = None) -> CompletionResult | None:
        """The completion in the document's session, with the expert of its `languageId` and the
        `inline` options (the deadline counted from `arrived_at`); None when the cloud is
        unreachable, `completion.languages` leaves the language out, or the deadline passed while
        other documents' completions ran (EDITOR_DECODES at once, first come first served: under
        many concurrent requests the first ones finish instead of all of them being cut empty).
        Every empty answer says why in the editor's log and ours (`empty completion: <reason>`).
        With `options.context.enabled`, snippets of the other open documents go into the prompt
        (lsp/open_context.py; `doc` is the document completed)."""
        if self.backend is None:
            raise lsp_error(NotReady("the server is not initialized"))
        if not self.backend.serves(language or None):
            return self._empty("the document's language is not in completion.languages")
        budget = self.options.inline.deadline_s
        deadline = None if budget is None else arrived_at + budget
        mine = self._latest[uri] = object()  # this request replaces the document's older ones:
        self.backend.pool.supersede(uri)  # a running decode of one stops now instead of finishing first
        try:
            waiting = self._decodes.locked()
            if deadline is None or not waiting:  # a free slot is taken, however late the request is
                await self._decodes.acquire()
            else:  # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that comes as the
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):  # slot is handed over
                    await self._decodes.acquire()
        except TimeoutError:
            return self._empty(f"the editor's deadline ({budget * 1e3:.0f} ms) passed while other "
                               f"documents' completions ran ({EDITOR_DECODES} at a time)")
        finally:
            if self._latest.get(uri) is mine:
                del self._latest[uri]
        if self._latest.get(uri) is not None:  # a newer request on the document came while this one waited
            self._decodes.release()
            self.backend.counts["skipped"] += 1
            raise JsonRpcRequestCancelled("a newer request on the document replaced this one")
        try:
            context = None
            if self.context is not None and doc is not None:
                context = self.context.select(uri, doc, prefix, self.documents)
            result = await self.backend.complete(uri, prefix, suffix, self.backend.inline_config,
                                                 language=language or None, typeahead=True, deadline=deadline,
                                                 context=context)
            log.debug("completion: %s", _stats(result))  # counts only, never text or ids
            if not result.text:
                self._empty(f"stop reason {result.stop_reason} after {result.generated_tokens} tokens"
                            + (f" (the editor's deadline of {budget * 1e3:.0f} ms and its grace, {'after waiting' if waiting else 'no wait'})"
                               if result.stop_reason == "deadline" else ""))
            return result
        except CloudUnavailable:
            return None  # the status notification said so; an error per keystroke would be noise
        except Exception as exc:  # noqa: BLE001 — mapped in one place
            raise lsp_error(exc) from None
        finally:
            self._decodes.release()

    def _empty(self, reason: str) -> None:
        """Say why a completion is empty (counts and reasons only, never text)."""
        log.info("empty completion: %s", reason)
        self.window_log_message(types.LogMessageParams(type=types.MessageType.Log,
                                                       message=f"Umbra: empty completion: {reason}"))
        return None


def create_server(allow_undefended_remote_cloud: bool = False) -> UmbraLanguageServer:
    """The server; `allow_undefended_remote_cloud` (`umbra lsp --allow-undefended-remote-cloud`)
    opts in whatever the editor's `allowUndefendedRemoteCloud` says (umbra/privacy/cloud_policy.py)."""
    ls = UmbraLanguageServer()

    def forced(options: InitializationOptions) -> InitializationOptions:
        """What the process's flags impose on any options the editor sends."""
        if allow_undefended_remote_cloud:
            return options.model_copy(update={"allow_undefended_remote_cloud": True})
        return options

    reconfigurer = Reconfigurer(ls, forced)

    @ls.feature(types.INITIALIZE)
    def initialize(ls: UmbraLanguageServer, params: types.InitializeParams) -> None:
        try:
            ls.options = InitializationOptions.from_json(params.initialization_options, warn=ls.warn_editor)
        except UmbraError as exc:
            raise lsp_error(exc) from None
        ls.options = forced(ls.options)
        encoding = ls.workspace.position_encoding or types.PositionEncodingKind.Utf16
        ls.documents.encoding = str(getattr(encoding, "value", encoding))
        ls.backend = Backend(ls.options, on_status=ls.send_status)
        folders = params.workspace_folders or []
        root = folders[0].uri if folders else params.root_uri
        ls.context = OpenContext(ls.options.context, root, ls.options.languages.canonical)

    @ls.feature(types.INITIALIZED)
    def initialized(ls: UmbraLanguageServer, params: types.InitializedParams) -> None:
        if ls.backend is not None and ls._starting is None:
            ls._starting = asyncio.ensure_future(ls.backend.start())

    @ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: UmbraLanguageServer, params: types.DidChangeConfigurationParams) -> None:
        reconfigurer.notified(params.settings)  # synchronous: the next message read sees the new options

    @ls.feature(types.SHUTDOWN)
    async def shutdown(ls: UmbraLanguageServer, params: None) -> None:
        if ls.backend is not None:
            await reconfigurer.aclose()

    @ls.feature(STATS_METHOD)
    def stats(ls: UmbraLanguageServer, params: object) -> dict:
        if ls.backend is None:
            raise lsp_error(NotReady("the server is not initialized"))
        return ls.backend.stats()

    @ls.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: UmbraLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.documents.open(params.text_document)
        if ls.context is not None:
            ls.context.touch(params.text_document.uri)

    @ls.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: UmbraLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.documents.change(params)
        if ls.context is not None:
            ls.context.touch(params.text_document.uri)

    @ls.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: UmbraLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
        # synchronous: the next message sees the document gone (an async handler runs as a later task)
        ls.documents.close(params.text_document.uri)
        ls.arrivals.forget(params.text_document.uri)
        if ls.context is not None:
            ls.context.forget(params.text_document.uri)
        if ls.backend is not None:
            ls.backend.release(params.text_document.uri)

    @ls.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(ls: UmbraLanguageServer,
                                params: types.InlineCompletionParams) -> types.InlineCompletionList:
        try:
            doc, arrived_at, arrival = ls.arrival(params)
            cursor = doc.offset(params.position)
            start, end, lead = cursor, cursor, ""
            selected = params.context.selected_completion_info if params.context else None
            if selected is not None:  # complete after the suggestion the editor has selected
                start, end = doc.offset(selected.range.start), doc.offset(selected.range.end)
                if not start <= cursor <= end:
                    raise ValidationError("the selected completion's range must contain the cursor")
                lead = selected.text
        except UmbraError as exc:
            raise lsp_error(exc) from None
        if (stale := ls.stale(arrival)) is not None:
            raise stale
        prefix, suffix = doc.text[:start] + lead, doc.text[end:]
        edit = types.Range(start=doc.position(start), end=doc.position(end))
        result = await ls.complete(params.text_document.uri, prefix, suffix, doc.language_id, arrived_at, doc)
        if result is None or not result.text:
            return types.InlineCompletionList(items=[])
        return types.InlineCompletionList(items=[types.InlineCompletionItem(insert_text=lead + result.text, range=edit)])

    @ls.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(resolve_provider=False))
    async def completion(ls: UmbraLanguageServer, params: types.CompletionParams) -> types.CompletionList:
        try:
            doc, arrived_at, arrival = ls.arrival(params)
            cursor = doc.offset(params.position)
        except UmbraError as exc:
            raise lsp_error(exc) from None
        if (stale := ls.stale(arrival)) is not None:
            raise stale
        prefix, suffix = doc.text[:cursor], doc.text[cursor:]
        word = identifier_before(prefix)
        edit = types.Range(start=doc.position(cursor - len(word)), end=doc.position(cursor))
        result = await ls.complete(params.text_document.uri, prefix, suffix, doc.language_id, arrived_at, doc)
        label = (word + result.text).strip().split("\n")[0].strip()[:80] if result is not None else ""
        if not label:
            return types.CompletionList(is_incomplete=True, items=[])
        item = types.CompletionItem(
            label=label,
            kind=types.CompletionItemKind.Text,
            detail="Umbra",
            filter_text=word + result.text,
            sort_text="0",
            insert_text_format=types.InsertTextFormat.PlainText,
            text_edit=types.TextEdit(range=edit, new_text=word + result.text),
            data=_stats(result),
        )
        return types.CompletionList(is_incomplete=True, items=[item])

    return ls


def _stats(result: CompletionResult) -> dict:
    """Token statistics of one completion (counts only: never token ids or text)."""
    return {"promptTokens": result.prompt_tokens, "reusedTokens": result.reused_tokens,
            "recomputedTokens": result.recomputed_tokens, "generatedTokens": result.generated_tokens,
            "stopReason": result.stop_reason, "evicted": result.evicted, "roundTrips": result.round_trips,
            "contextFiles": len(result.context_files)}
