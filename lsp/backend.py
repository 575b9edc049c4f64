"""Backend: what the language server and the local HTTP server share — the client model, the
cloud (self-started or configured), the split engine, the warm sessions and the status.

    backend = Backend(options, on_status=send)    # on_status(Status) on every state change
    await backend.start()                         # never raises: failures become a Status
    backend.setup_error                           # the set-up failure, if any (HTTP: fatal)
    result = await backend.complete(key, prefix, suffix, config)   # key None = throw-away session
    result = await backend.complete(uri, prefix, suffix, typeahead=True)  # the editor's: typed-ahead text served
    results = await backend.complete_all(key, [Infill(prefix, suffix, config), ...], on_text=...)  # n choices, streamed
    backend.stats()                               # counters for `umbra/stats` (no text)
    await backend.forget(key); await backend.aclose()

States: "starting" → "ready"; "unreachable" when a cloud call fails (CloudUnavailable) — the
request fails and nothing is sent any other way (invariant 2; there is no local or monolithic
path here at all) — and back to "ready" when a completion succeeds again or a /healthz probe
(every `probe_interval` seconds while unreachable) answers; "error" when set-up fails (model,
bundle key, cloud token, a self-started cloud that does not start) or the cloud rejects our
token. A self-started cloud that dies is started again (sessions dropped, "starting" →
"ready"), up to MAX_RESTARTS times in RESTART_WINDOW_S; past that the state is "error". The
mode is always "split". `privacy` is the privacy mode in force (umbra/privacy/mode.py): the
loaded model's, then the link's (which says when the user's opt-in sends it undefended to a cloud
not on this machine; without the opt-in such a cloud is an "error": umbra/privacy/cloud_policy.py),
with the attack tables' figures for it in `privacyDetails`."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from lsp.cloud import cloud_config
from lsp.documents import well_formed
from lsp.errors import NotReady
from lsp.options import InitializationOptions, ModelOptions
from lsp.sessions import SessionPool
from lsp.typeahead import TypeAhead
from umbra.connect import CloudLink, open_middle
from umbra.engine import ClientModel, CompletionEngine, CompletionResult, EngineConfig
from umbra.engine.engine import with_route
from umbra.errors import (
    Cancelled,
    CloudRejected,
    CloudUnavailable,
    UmbraError,
    ValidationError,
)
from umbra.paths import default_model_dir
from umbra.privacy.mode import PrivacyMode, mode_of

MAX_RESTARTS = 3  # restarts of a self-started cloud allowed within RESTART_WINDOW_S
RESTART_WINDOW_S = 600.0

log = logging.getLogger("umbra.lsp")

STATES = ("starting", "ready", "unreachable", "error")


@dataclass(frozen=True)
class Status:
    state: str  # one of STATES
    message: str  # one line for the user (never prompts, completions or tokens)
    mode: str = "split"  # the only mode: the middle blocks always run in the cloud
    expert: str | None = None  # the expert adapter that served the last completion (a name only)
    access: str = "secure"  # SecureGate: "secure" or "revealing: NAME" for the last completion (never a key)
    privacy: str | None = None  # PrivacyMode.summary in force; None before the model is loaded
    privacy_details: dict | None = None  # PrivacyMode.details: the measured figures (JSON `privacyDetails`)

    def to_json(self) -> dict:
        return {"state": self.state, "message": self.message, "mode": self.mode, "expert": self.expert,
                "access": self.access, "privacy": self.privacy, "privacyDetails": self.privacy_details}

    def with_privacy(self, mode: PrivacyMode) -> Status:
        return replace(self, privacy=mode.summary, privacy_details=mode.details)


@dataclass(frozen=True)
class Infill:
    """One completion to make: the text around the cursor, and its engine config (None: the server's)."""

    prefix: str
    suffix: str
    config: EngineConfig | None = None


def load_model(options: ModelOptions) -> ClientModel:
    """The client model: a bundle (key from the OS keyring) or a plain model directory (blocking)."""
    if options.bundle:
        from keys.store import KeyStore

        return ClientModel.from_bundle(options.bundle, options.dir, store=KeyStore(options.keyring_service))
    return ClientModel.load(options.dir or default_model_dir())


class Backend:
    def __init__(self, options: InitializationOptions, on_status: Callable[[Status], None] | None = None, *,
                 max_sessions: int = 16, probe_interval: float = 2.0):
        self.options = options
        self.config: EngineConfig = options.completion.engine_config()
        self.status = Status("starting", "Umbra is starting")
        self.setup_error: BaseException | None = None
        self.model: ClientModel | None = None
        self.privacy: PrivacyMode | None = None  # the mode in force (status.privacy is its summary)
        self.link: CloudLink | None = None  # the cloud and the Middle to it (umbra/connect.py), audit tap included
        self.engine: CompletionEngine | None = None
        self.pool = SessionPool(max_sessions)
        self.typeahead = TypeAhead()
        # completions "ok" / "cancelled" / "unreachable" / "failed" / "typeahead" (served without a decode)
        self.counts: Counter[str] = Counter()
        self.closed = False
        self._on_status = on_status or (lambda status: None)
        self._probe_interval = probe_interval
        self._started = asyncio.Event()
        self._connecting = asyncio.Lock()
        self._watcher: asyncio.Task | None = None
        self._restarts: list[float] = []  # monotonic times of self-started cloud restarts

    # -- status ------------------------------------------------------------------------------
    def _report(self, state: str, message: str) -> None:
        changed = state != self.status.state
        self.status = replace(self.status, state=state, message=message)
        if changed or state == "starting":
            log.log(logging.WARNING if state in ("unreachable", "error") else logging.INFO, "status %s: %s", state, message)
            self._on_status(self.status)

    def _unreachable(self, exc: CloudUnavailable) -> None:
        if self.status.state == "unreachable":
            return
        code = self.link.exit_status() if self.link else None
        why = f"the self-started cloud exited (status {code}); restarting it" if code is not None else str(exc)
        self._report("unreachable", f"cloud unreachable: {why}. Completions are paused; Umbra never sends "
                                    f"your code any other way.")
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.ensure_future(self._watch())

    def _recovered(self) -> None:
        """A cloud call worked: leave "unreachable" (or a refused-token "error") for "ready"."""
        if self.status.state in ("unreachable", "error") and self.setup_error is None:
            self._report("ready", f"split inference through {self.link.describe()} (working again)")

    # -- set-up ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the model, start or find the cloud, connect. Never raises (see `setup_error`)."""
        self._report("starting", "loading the model")
        try:
            if self.options.threads is not None:
                torch.set_num_threads(self.options.threads)
            self.model = await asyncio.to_thread(load_model, self.options.model)
            self.privacy = mode_of(self.model)
            self.status = self.status.with_privacy(self.privacy)
            self._report("starting", "starting the cloud" if self.options.cloud.url is None else "connecting to the cloud")
            self.link = open_middle(self.model, cloud_config(self.options))
            try:
                await self.link.start()  # the RemoteMiddle, and the audit tap over it while `umbra audit on`
            finally:  # the mode in force, an opt-in said, even when a later step (the token) fails
                self.privacy = self.link.privacy
                self.status = self.status.with_privacy(self.privacy)
            if self.closed:  # shut down while the cloud was starting: stop it again
                await self.link.aclose()
                return
            await self._engine()
            self._report("ready", f"split inference through {self.link.describe()}")
        except CloudUnavailable as exc:
            if self.link is None or self.link.remote is None:  # a self-started cloud that did not come up
                self._fail(exc)
            else:
                self._unreachable(exc)
        except Exception as exc:  # noqa: BLE001 — every failure becomes a status, never a crash
            self._fail(exc)
        finally:
            self._started.set()

    def _fail(self, exc: BaseException) -> None:
        self.setup_error = exc
        message = str(exc) if isinstance(exc, UmbraError) else f"internal error ({type(exc).__name__})"
        if not isinstance(exc, UmbraError):
            log.error("set-up failed: %s: %s", type(exc).__name__, exc)
        self._report("error", f"Umbra could not start: {message}")

    async def _engine(self) -> CompletionEngine:
        """The split engine, connecting to the cloud first if not done yet."""
        if self.engine is None:
            async with self._connecting:
                if self.engine is None:
                    await self._connect_engine()
        return self.engine

    async def _connect_engine(self) -> None:
        """Connect the link (checks the cloud runs our middle blocks) and build the engine on its
        Middle — the audit tap when auditing. The caller holds `_connecting`."""
        await self.link.connect()
        self.engine = CompletionEngine.split(self.model, self.link.middle, self.config,
                                             context_length=self.link.max_seq_len)

    async def _watch(self) -> None:
        """While unreachable: probe /healthz; once it answers (and we can connect), report ready."""
        while not self.closed and self.status.state == "unreachable":
            await asyncio.sleep(self._probe_interval)
            if self.link.exit_status() is not None:  # our own cloud died: start it again
                try:
                    await self._restart_local()
                except Exception as exc:  # noqa: BLE001 — a failed restart is a status, never a crash
                    self._fail(exc)
                return
            if not await self.link.reachable():
                continue
            try:
                await self._engine()
            except CloudUnavailable:
                continue
            except UmbraError as exc:
                self._fail(exc)
                return
            self._recovered()

    async def _restart_local(self) -> None:
        """Replace a dead self-started cloud by a fresh one (new port and token); the warm
        sessions lived in the dead one, so they are dropped and rebuilt on their next request."""
        now = time.monotonic()
        self._restarts = [t for t in self._restarts if now - t < RESTART_WINDOW_S]
        code = self.link.exit_status()
        if len(self._restarts) >= MAX_RESTARTS:
            raise CloudUnavailable(f"the self-started cloud keeps exiting (status {code}; {MAX_RESTARTS} restarts "
                                   f"in {RESTART_WINDOW_S / 60:.0f} min); see its log and restart the server")
        self._restarts.append(now)
        self._report("starting", f"the self-started cloud exited (status {code}); restarting it")
        async with self._connecting:  # completions wait here for the new engine
            self.engine = None
            await self.pool.close_all()
            self.link = await self.link.restart()  # the dead one closed (audit saved, files removed)
            if self.closed:
                await self.link.aclose()
                return
            await self._connect_engine()
        self._report("ready", f"split inference through {self.link.describe()} (restarted after it exited)")

    # -- completions -------------------------------------------------------------------------
    def serves(self, language: str | None) -> bool:
        """Whether `completion.languages` lets this server complete `language` (None: unknown, served)."""
        wanted = self.options.completion.languages
        canonical = self.options.languages.canonical(language)
        return wanted is None or canonical is None or canonical in {self.options.languages.canonical(w)
                                                                      for w in wanted}

    async def complete(self, key: str | None, prefix: str, suffix: str, config: EngineConfig | None = None,
                       language: str | None = None, typeahead: bool = False) -> CompletionResult:
        """Complete between `prefix` and `suffix` in the key's warm session (None: a fresh one),
        with the adapters of `language` (the editor's id or an alias; routing.py). With
        `typeahead` (the language server) and a key, text typed into the key's last completions
        is answered with their rest, without a decode (lsp/typeahead.py); the key's running
        request is cancelled all the same, since this one replaces it."""
        prefix, suffix = well_formed(prefix), well_formed(suffix)
        if typeahead and key is not None:
            self._check_ready(language)
            hit = self.typeahead.lookup(key, prefix, suffix, config=config, language=language)
            if hit is not None:
                self.pool.supersede(key)
                self.counts["typeahead"] += 1
                self._served(hit)
                return hit
        (result,) = await self.complete_all(key, [Infill(prefix, suffix, config)], language)
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

    def _served(self, result: CompletionResult) -> None:
        """Name the expert and access that served `result` in the status (names only)."""
        if (result.expert, result.access) != (self.status.expert, self.status.access):
            self.status = replace(self.status, expert=result.expert, access=result.access)
            self._on_status(self.status)

    def stats(self) -> dict:
        """The counters of `umbra/stats` (counts only, never text): requests inside a document's
        session now, decodes started, the most ever at once in one document's session, completions
        by outcome, warm sessions and kept type-ahead completions."""
        pool = self.pool.stats()
        return {"decodes": {"running": pool.running, "started": pool.started, "maxPerDocument": pool.max_per_key},
                "completions": {k: self.counts[k] for k in ("ok", "cancelled", "typeahead", "failed", "unreachable")},
                "sessions": len(self.pool), "typeaheadEntries": len(self.typeahead)}

    async def complete_all(self, key: str | None, infills: Sequence[Infill], language: str | None = None,
                           on_text: Callable[[int, str], None] | None = None,
                           on_result: Callable[[int, CompletionResult], None] | None = None
                           ) -> list[CompletionResult]:
        """The completions of `infills`, one after another in the key's warm session (None: one
        fresh session for them all, so that they share their prompt's cache): one request, which
        a newer one on the key cancels whole. `on_text(i, delta)` streams completion i
        (CompletionSession.complete's `on_text`); `on_result(i, result)` is called as it ends."""
        await self._started.wait()
        self._check_ready(language)
        infills = [Infill(well_formed(i.prefix), well_formed(i.suffix), i.config) for i in infills]
        try:
            engine = await self._engine()
            route, adapters = engine.route(self.options.languages.canonical(language))

            async def run(session) -> list[CompletionResult]:
                results = []
                for i, infill in enumerate(infills):
                    result = with_route(await session.complete(
                        infill.prefix, infill.suffix, infill.config or self.config, adapters=adapters,
                        on_text=None if on_text is None else functools.partial(on_text, i)), route)
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
            self._unreachable(exc)
            raise
        except CloudRejected as exc:
            self.counts["failed"] += 1
            if exc.status in (401, 403):  # the token is wrong or revoked: the user must act
                self._report("error", f"the cloud refused our token: {exc}")
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
        self._recovered()
        self._served(results[-1])
        return results

    async def forget(self, key: str) -> bool:
        """Close the key's session (document closed, HTTP DELETE); False if there was none."""
        self.typeahead.forget(key)
        closed = await self.pool.close(key)
        if self.link is not None:
            self.link.flush_audit()
        return closed

    # -- teardown ----------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close every session, the connection to the cloud and a self-started cloud. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self._watcher is not None:
            self._watcher.cancel()
        await self.pool.close_all()
        if self.link is not None:
            await self.link.aclose()

    def stop_cloud(self) -> None:
        """Synchronous last resort (the event loop is gone): stop a self-started cloud. Idempotent."""
        self.closed = True
        if self.link is not None:
            self.link.stop_cloud()
