"""`workspace/didChangeConfiguration`: new options for a running language server, in the same
process (the editor need not restart it, and the documents, their warm sessions and the model
stay where they can).

The notification's `settings` are the whole `initializationOptions` object (lsp/options.py), or
that object under an "umbra" key (the shape in which generic LSP clients send a settings table):
what it leaves out is the default, as at `initialize`. Settings that name none of the schema's
top-level options (`{}`, `null`, another server's table — some clients send such after every
start) are not Umbra's: nothing is applied. Otherwise they are converted exactly as `initialize`
converts them, and compared with the options in force:

  * a bad value: the editor gets an error message naming the option; nothing changes;
  * nothing changed: nothing happens;
  * only `completion`, `inline`, `context` or `languages` (IN_PLACE): applied to every request
    read after the notification; the model, the cloud, the connection and every document's warm
    session stay as they are;
  * anything else (`model`, `cloud`, `threads`, `allowUndefendedRemoteCloud`, `clientOnly`): the
    backend is replaced — the new one takes every request read after the notification (each
    waits for it to be ready), the old one's sessions, connection and self-started cloud are
    closed, then the new one sets up as after `initialized`, saying so in `umbra/status`
    ("starting" → "ready" | "unreachable" | "error"). The counters of `umbra/stats` carry over.

Replacements run one after another (a second notification's waits for the first's). The
`--allow-undefended-remote-cloud` flag of the process holds across changes, as at `initialize`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from lsprotocol import types

from lsp.backend import Backend
from lsp.conversion import field_name
from lsp.options import InitializationOptions
from umbra.errors import UmbraError

IN_PLACE = frozenset({"completion", "inline", "context", "languages"})
SETTINGS_SECTION = "umbra"
log = logging.getLogger("umbra.lsp")


def settings_object(settings: object) -> Mapping | None:
    """The options object of a notification's `settings` (unwrapping {"umbra": {...}}); None when
    they name none of the schema's top-level options (not Umbra's settings)."""
    if isinstance(settings, Mapping) and isinstance(settings.get(SETTINGS_SECTION), Mapping):
        settings = settings[SETTINGS_SECTION]
    if not isinstance(settings, Mapping) or not any(field_name(InitializationOptions, key) for key in settings):
        return None
    return settings


def changed_sections(before: InitializationOptions, after: InitializationOptions) -> frozenset[str]:
    """The top-level options (field names) whose values differ."""
    return frozenset(name for name in type(before).model_fields if getattr(before, name) != getattr(after, name))


class Reconfigurer:
    """Applies new options to a server with `options`, `backend`, `context` and `send_status`
    (lsp/server.py's UmbraLanguageServer)."""

    def __init__(self, server, force: Callable[[InitializationOptions], InitializationOptions] = lambda o: o):
        self.server = server
        self.force = force  # what the process's flags impose on any options
        self._last: asyncio.Future | None = None  # the latest replacement's close-and-start

    def notified(self, settings: object) -> None:
        """A `workspace/didChangeConfiguration`'s `settings`: converted and applied, or refused
        with an error message to the editor (nothing changed)."""
        ls = self.server
        settings = settings_object(settings)
        if ls.options is None or settings is None:  # before `initialize`, or not Umbra's settings
            log.info("settings without Umbra's options: nothing applied")
            return
        try:
            options = InitializationOptions.from_json(settings, warn=ls.warn_editor)
            options.inline.engine_config(options.completion.engine_config())  # what applying builds,
            options.context.engine_config()  # checked before anything changes
        except UmbraError as exc:
            log.warning("new settings refused: %s", exc)  # option paths and values' types, never text
            ls.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Error, message=f"Umbra: the new settings were not applied: {exc}"))
            return
        self.apply(options)

    def apply(self, options: InitializationOptions) -> frozenset[str]:
        """Put `options` in force (synchronously: the next message read sees them); the sections
        that changed. A replaced backend's close and its successor's set-up run as a task."""
        ls = self.server
        options = self.force(options)
        changed = changed_sections(ls.options, options)
        if not changed:
            return changed
        ls.options = options
        if changed & {"context", "languages"}:  # else its provider keeps what it has scanned
            ls.context.reconfigure(options.context, options.languages.canonical)
        if changed <= IN_PLACE:
            ls.backend.reconfigure(options)
            log.info("options changed in place: %s", ", ".join(sorted(changed)))
            return changed
        old, new = ls.backend, Backend(options, on_status=ls.send_status)
        new.counts, new.stops = old.counts, old.stops
        ls.backend = new
        old.board.silence()  # its late reports would be stale
        new.board.report("starting", "new settings: setting up the model and the cloud again")
        log.info("options changed (%s): the model and the cloud set up again", ", ".join(sorted(changed)))
        self._last = asyncio.ensure_future(self._replace(self._last, old, new))
        return changed

    async def _replace(self, before: asyncio.Future | None, old: Backend, new: Backend) -> None:
        if before is not None:
            await asyncio.shield(before)
        try:
            await old.aclose()
        except Exception as exc:  # noqa: BLE001 — the new backend starts all the same
            log.warning("closing the replaced backend failed (%s)", type(exc).__name__)
        if self.server._starting is not None and not new.closed:  # else `initialized` starts it
            await new.start()  # never raises: a failure is its status

    async def aclose(self) -> None:
        """Shutdown: close the backend in force, then wait for a replacement in progress to end
        (a closed backend sets nothing up: CloudSupervisor.start stops what it started)."""
        await self.server.backend.aclose()
        if self._last is not None:
            await asyncio.shield(self._last)
