"""Backend: what the language server and the local HTTP server share — the completions, over one
cloud supervisor (the client model, the cloud, the split engine: lsp/cloud_supervisor.py), warm
sessions (lsp/sessions.py), the type-ahead (lsp/typeahead.py) and the status (lsp/status.py).

    backend = Backend(options, on_status=send)    # on_status(Status) on every state change
    await backend.start()                         # never raises: failures become a Status
    backend.setup_error                           # the set-up failure, if any (HTTP: fatal)
    result = await backend.complete(key, prefix, suffix, config)   # key None = throw-away session
    result = await backend.complete(uri, prefix, suffix, backend.inline_config, typeahead=True,
                                    deadline=arrival + options.inline.deadline_s)   # the editor's
    results = await backend.complete_all(key, [Infill(prefix, suffix, config), ...], on_text=...)  # n choices, streamed
    backend.stats()                               # counters for `umbra/stats` (no text)
    backend.release(key)      # didClose: gone at once, closed in the background
    await backend.forget(key); await backend.aclose()

Two configs: `config`, the `completion` options' (the HTTP APIs' default, overridden per
request), and `inline_config`, which adds the `inline` options' loop stop (the language
server's; with its deadline, a `time.monotonic()` instant counted from the request's arrival).
A failed cloud call fails the request and makes the state "unreachable"; a refused token
(401/403) makes it "error" (the user must act); nothing is ever sent any other way."""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lsp.cloud_supervisor import CloudSupervisor
from lsp.documents import well_formed
from lsp.errors import NotReady
from lsp.options import InitializationOptions
from lsp.sessions import SessionPool
from lsp.status import Status, StatusBoard
from lsp.typeahead import TypeAhead
from umbra.connect import CloudLink
from umbra.engine import ClientModel, CompletionResult, EngineConfig
from umbra.engine.context import RepoContext
from umbra.engine.engine import with_route
from umbra.errors import Cancelled, CloudRejected, CloudUnavailable, ValidationError
from umbra.privacy.mode import PrivacyMode

OUTCOMES = ("ok", "cancelled", "typeahead", "skipped", "failed", "unreachable")


@dataclass(frozen=True)
class Infill:
    """One completion to make: the text around the cursor, and its engine config (None: the server's)."""

    prefix: str
    suffix: str
    config: EngineConfig | None = None


class Backend:
    def __init__(self, options: InitializationOptions, on_status: Callable[[Status], None] | None = None, *,
                 max_sessions: int = 16, probe_interval: float = 2.0):
        self.options = options
        self.config: EngineConfig = options.completion.engine_config()
        self.inline_config: EngineConfig = options.inline.engine_config(self.config)
        self.board = StatusBoard(on_status)
        self.pool = SessionPool(max_sessions)
        self.cloud = CloudSupervisor(options, self.board, self.pool, self.config, probe_interval)
        self.typeahead = TypeAhead()
        # completions by outcome: OUTCOMES ("typeahead": served without a decode; "skipped": a
        # newer request on the document had arrived before its decode began), and more
        self.counts: Counter[str] = Counter()
        self.stops: Counter[str] = Counter()  # decoded completions by stop reason
        self.closed = False

    # -- what the supervisor holds -------------------------------------------------------------
    @property
    def status(self) -> Status:
        return self.board.status

    @property
    def setup_error(self) -> BaseException | None:
        return self.cloud.setup_error

    @property
    def model(self) -> ClientModel | None:
        return self.cloud.model

    @property
    def privacy(self) -> PrivacyMode | None:
        return self.cloud.privacy

    @property
    def link(self) -> CloudLink | None:
        return self.cloud.link

    async def start(self) -> None:
        """Load the model, start or find the cloud, connect. Never raises (see `setup_error`)."""
        await self.cloud.start()

    def reconfigure(self, options: InitializationOptions) -> None:
        """New `completion`, `inline`, `context` or `languages` options, for every request from now
        on (lsp/reconfiguration.py; the rest of `options` must be those in force). The model, the
        cloud and the warm sessions stay; no type-ahead answer made under the old ones is served."""
        self.typeahead.clear()
        self.options = options
        self.config = options.completion.engine_config()
        self.inline_config = options.inline.engine_config(self.config)
        self.cloud.reconfigure(options, self.config)

    # -- completions -------------------------------------------------------------------------
    def serves(self, language: str | None) -> bool:
        """Whether `completion.languages` lets this server complete `language` (None: unknown, served)."""
        wanted = self.options.completion.languages
        canonical = self.options.languages.canonical(language)
        return wanted is None or canonical is None or canonical in {self.options.languages.canonical(w)
                                                                      for w in wanted}

    async def complete(self, key: str | None, prefix: str, suffix: str, config: EngineConfig | None = None,
                       language: str | None = None, typeahead: bool = False,
                       deadline: float | None = None, context: RepoContext | None = None) -> CompletionResult:
        """Complete between `prefix` and `suffix` in the key's warm session (None: a fresh one),
        with the adapters of `language` (the editor's id or an alias; routing.py). With
        `typeahead` (the language server) and a key, text typed into the key's last completions
        is answered with their rest, without a decode (lsp/typeahead.py); the key's running
        request is cancelled all the same, since this one replaces it. `deadline` and `context`
        (snippets of other open files): see CompletionSession.complete."""
        prefix, suffix = well_formed(prefix), well_formed(suffix)
        if typeahead and key is not None:
            self._check_ready(language)
            hit = self.typeahead.lookup(key, prefix, suffix, config=config, language=language)
            if hit is not None:
                self.pool.supersede(key)
                self.counts["typeahead"] += 1
                self.board.served(hit)
                return hit
        (result,) = await self.complete_all(key, [Infill(prefix, suffix, config)], language, deadline=deadline,
                                            context=context)
        if typeahead and key is not None:
            self.typeahead.remember(key, prefix, suffix, result, config=config, language=language)
        return result

    def _check_ready(self, language: str | None) -> None:
        if self.closed:
            raise NotReady("Umbra is shutting down")
        if self.setup_error is not None:
            raise NotReady(self.status.message)
        if not self.serves(language):
            raise ValidationError(f"this server does not complete {language} (completion.languages)")

    def stats(self) -> dict:
        """The counters of `umbra/stats` (counts only, never text): requests inside a document's
        session now, decodes started, the most ever at once in one document's session, completions
        by outcome and by stop reason, warm sessions and kept type-ahead completions."""
        pool = self.pool.stats()
        return {"decodes": {"running": pool.running, "started": pool.started, "maxPerDocument": pool.max_per_key},
                "completions": {k: self.counts[k] for k in OUTCOMES},
                "stops": dict(sorted(self.stops.items())),
                "sessions": len(self.pool), "typeaheadEntries": len(self.typeahead)}

    async def complete_all(self, key: str | None, infills: Sequence[Infill], language: str | None = None,
                           on_text: Callable[[int, str], None] | None = None,
                           on_result: Callable[[int, CompletionResult], None] | None = None,
                           deadline: float | None = None, context: RepoContext | None = None
                           ) -> list[CompletionResult]:
        """The completions of `infills`, one after another in the key's warm session (None: one
        fresh session for them all, so that they share their prompt's cache): one request, which
        a newer one on the key cancels whole. `on_text(i, delta)` streams completion i
        (CompletionSession.complete's `on_text`); `on_result(i, result)` is called as it ends."""
        await self.cloud.started.wait()
        self._check_ready(language)
        infills = [Infill(well_formed(i.prefix), well_formed(i.suffix), i.config) for i in infills]
        try:
            engine = await self.cloud.engine()
            route, adapters = engine.route(self.options.languages.canonical(language))

            async def run(session) -> list[CompletionResult]:
                results = []
                for i, infill in enumerate(infills):
                    result = with_route(await session.complete(
                        infill.prefix, infill.suffix, infill.config or self.config, adapters=adapters,
                        on_text=None if on_text is None else functools.partial(on_text, i), deadline=deadline,
                        context=context), route)
                    self.stops[result.stop_reason] += 1
                    if result.context_files and self.link is not None and self.link.audit is not None:
                        self.link.audit.note_context(result.context_files)  # the files' names, never their text
                    if on_result is not None:
                        on_result(i, result)
                    results.append(result)
                return results

            if key is None:
                async with engine.session() as session:
                    results = await run(session)
            else:
                results = await self.pool.run(key, engine.new_session, run)
        except CloudUnavailable as exc:
            self.counts["unreachable"] += 1
            self.cloud.unreachable(exc)
            raise
        except CloudRejected as exc:
            self.counts["failed"] += 1
            if exc.status in (401, 403):  # the token is wrong or revoked: the user must act
                self.board.report("error", f"the cloud refused our token: {exc}")
            raise
        except (asyncio.CancelledError, Cancelled):
            self.counts["cancelled"] += 1
            raise
        except BaseException:
            self.counts["failed"] += 1
            raise
        finally:
            if self.link is not None:
                self.link.flush_audit()
        self.counts["ok"] += 1
        self.cloud.recovered()
        self.board.served(results[-1])
        return results

    def release(self, key: str) -> asyncio.Future | None:
        """Let the key (a closed document) go now: its type-ahead entries and session are gone
        before the caller's next await; the session's close runs in the background (the closing,
        or None if there was no session)."""
        self.typeahead.forget(key)
        closing = self.pool.release(key)
        if closing is not None and self.link is not None:
            closing.add_done_callback(lambda _: self.link is not None and self.link.flush_audit())
        return closing

    async def forget(self, key: str) -> bool:
        """`release(key)`, waiting for the session's close (HTTP DELETE); False if there was none."""
        closing = self.release(key)
        if closing is not None:
            await closing
        return closing is not None

    # -- teardown ----------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close every session, the connection to the cloud and a self-started cloud. Idempotent."""
        if self.closed:
            return
        self.closed = True
        await self.cloud.aclose()

    def stop_cloud(self) -> None:
        """Synchronous last resort (the event loop is gone): stop a self-started cloud. Idempotent."""
        self.closed = True
        self.cloud.stop_cloud()
