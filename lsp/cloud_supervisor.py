"""CloudSupervisor: the model, the cloud and the split engine over it, kept working for the
backend (lsp/backend.py) — set-up, "unreachable" and recovery, restarts of a self-started cloud.

    cloud = CloudSupervisor(options, board, pool)   # board: lsp/status.py; pool: lsp/sessions.py
    await cloud.start()                  # never raises: failures become a Status ("error")
    engine = await cloud.engine()        # connecting first if not done yet
    cloud.unreachable(exc); cloud.recovered()      # what a completion found out
    await cloud.aclose(); cloud.stop_cloud()

Set-up loads the client model (a bundle's key from the OS keyring), starts the real cloud on
loopback or finds the configured one, and connects. "unreachable" when a cloud call fails
(CloudUnavailable) — the request fails and nothing is sent any other way (invariant 2; there is
no local or monolithic path here at all) — and back to "ready" when a completion succeeds again
or a /healthz probe (every `probe_interval` seconds while unreachable) answers; "error" when
set-up fails (model, bundle key, cloud token, a self-started cloud that does not start). A
self-started cloud that dies is started again (sessions dropped, "starting" → "ready"), up to
MAX_RESTARTS times in RESTART_WINDOW_S; past that the state is "error". The privacy mode in
force is the loaded model's, then the link's (which says when the user's opt-in sends it
undefended to a cloud not on this machine; without the opt-in such a cloud is an "error":
umbra/privacy/cloud_policy.py).

With the `clientOnly` option there is no cloud at all: set-up loads the model and builds the
client-only engine (umbra/engine/client_only.py, the middle skipped); no link is made, nothing is
started, looked up or sent, the status's mode is "client-only" and the privacy mode NOTHING_SENT."""

from __future__ import annotations

import asyncio
import logging
import time

import torch

from lsp.cloud import cloud_config
from lsp.options import InitializationOptions, ModelOptions
from lsp.sessions import SessionPool
from lsp.status import StatusBoard
from umbra.connect import CloudLink, open_middle
from umbra.engine import ClientModel, CompletionEngine, EngineConfig
from umbra.engine.client_only import MODE as CLIENT_ONLY
from umbra.engine.client_only import client_only_engine
from umbra.errors import CloudUnavailable, UmbraError
from umbra.paths import default_model_dir
from umbra.privacy.mode import PrivacyMode, mode_of

MAX_RESTARTS = 3  # restarts of a self-started cloud allowed within RESTART_WINDOW_S
RESTART_WINDOW_S = 600.0

log = logging.getLogger("umbra.lsp")


class NothingSent(PrivacyMode):
    """The privacy mode of client-only completion: nothing leaves the machine, so no attack applies."""

    @property
    def defended(self) -> bool:
        return True

    @property
    def offered(self) -> bool:
        return True

    @property
    def summary(self) -> str:
        return self.label


NOTHING_SENT = NothingSent(CLIENT_ONLY, "client only · nothing is sent (the client's blocks alone)")


def load_model(options: ModelOptions) -> ClientModel:
    """The client model in `options.dtype`: a bundle (key from the OS keyring) or a plain model
    directory (blocking)."""
    from umbra.model.device import resolve_dtype

    dtype = resolve_dtype(options.dtype)
    if options.bundle:
        from keys.store import KeyStore

        return ClientModel.from_bundle(options.bundle, options.dir, store=KeyStore(options.keyring_service),
                                       dtype=dtype)
    return ClientModel.load(options.dir or default_model_dir(), dtype=dtype)


def in_dtype(message: str, options: ModelOptions) -> str:
    """A ready message, naming the dtype when it is not the default fp32."""
    return message if options.dtype == "fp32" else f"{message} ({options.dtype})"


class CloudSupervisor:
    def __init__(self, options: InitializationOptions, board: StatusBoard, pool: SessionPool, config: EngineConfig,
                 probe_interval: float = 2.0):
        self.options = options
        self.board = board
        self.pool = pool  # the warm sessions, dropped when a self-started cloud is restarted
        self.config = config  # the engine's default config
        self.probe_interval = probe_interval  # seconds between /healthz probes while unreachable
        self.setup_error: BaseException | None = None
        self.model: ClientModel | None = None
        self.privacy: PrivacyMode | None = None  # the mode in force (status.privacy is its summary)
        self.link: CloudLink | None = None  # the cloud and the Middle to it (umbra/connect.py), audit tap included
        self.current: CompletionEngine | None = None  # the engine, once connected
        self.restarts: list[float] = []  # monotonic times of self-started cloud restarts
        self.closed = False
        self.started = asyncio.Event()  # set once start() has ended, well or not
        self._connecting = asyncio.Lock()
        self._watcher: asyncio.Task | None = None

    # -- set-up ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the model, start or find the cloud, connect. Never raises (see `setup_error`)."""
        self.board.report("starting", "loading the model")
        try:
            if self.options.threads is not None:
                torch.set_num_threads(self.options.threads)
            self.model = await asyncio.to_thread(load_model, self.options.model)
            if self.options.client_only:  # no cloud at all: nothing to start, find or connect to
                self._in_force(NOTHING_SENT)
                self.board.mode(CLIENT_ONLY)
                self.current = client_only_engine(self.model, self.config)
                self.board.report("ready", in_dtype("client only: the client's blocks alone; nothing is sent anywhere",
                                                    self.options.model))
                return
            self._in_force(mode_of(self.model))
            self.board.report("starting", "starting the cloud" if self.options.cloud.url is None
                              else "connecting to the cloud")
            self.link = open_middle(self.model, cloud_config(self.options))
            try:
                await self.link.start()  # the RemoteMiddle, and the audit tap over it while `umbra audit on`
            finally:  # the mode in force, an opt-in said, even when a later step (the token) fails
                self._in_force(self.link.privacy)
            if self.closed:  # shut down while the cloud was starting: stop it again
                await self.link.aclose()
                return
            await self.engine()
            self.board.report("ready", in_dtype(f"split inference through {self.link.describe()}", self.options.model))
        except CloudUnavailable as exc:
            if self.link is None or self.link.remote is None:  # a self-started cloud that did not come up
                self.fail(exc)
            else:
                self.unreachable(exc)
        except Exception as exc:  # noqa: BLE001 — every failure becomes a status, never a crash
            self.fail(exc)
        finally:
            self.started.set()

    def reconfigure(self, options: InitializationOptions, config: EngineConfig) -> None:
        """Options whose model, cloud, threads and mode are those in force; `config` the engine's new default."""
        self.options, self.config = options, config
        if self.current is not None:
            self.current.config = config

    def _in_force(self, mode: PrivacyMode) -> None:
        self.privacy = mode
        self.board.privacy(mode)

    def fail(self, exc: BaseException) -> None:
        """Set-up failed for good: "error", and every request is refused (NotReady)."""
        self.setup_error = exc
        message = str(exc) if isinstance(exc, UmbraError) else f"internal error ({type(exc).__name__})"
        if not isinstance(exc, UmbraError):
            log.error("set-up failed: %s: %s", type(exc).__name__, exc)
        self.board.report("error", f"Umbra could not start: {message}")

    async def engine(self) -> CompletionEngine:
        """The split engine, connecting to the cloud first if not done yet."""
        if self.current is None:
            async with self._connecting:
                if self.current is None:
                    await self._connect_engine()
        return self.current

    async def _connect_engine(self) -> None:
        """Connect the link (checks the cloud runs our middle blocks) and build the engine on its
        Middle — the audit tap when auditing. The caller holds `_connecting`."""
        await self.link.connect()
        self.current = CompletionEngine.split(self.model, self.link.middle, self.config,
                                              context_length=self.link.max_seq_len)

    # -- what completions find out -------------------------------------------------------------
    def unreachable(self, exc: CloudUnavailable) -> None:
        """A cloud call failed: "unreachable", and probe until it answers again."""
        if self.board.status.state == "unreachable":
            return
        code = self.link.exit_status() if self.link else None
        why = f"the self-started cloud exited (status {code}); restarting it" if code is not None else str(exc)
        self.board.report("unreachable", f"cloud unreachable: {why}. Completions are paused; Umbra never sends "
                                         f"your code any other way.")
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.ensure_future(self._watch())

    def recovered(self) -> None:
        """A cloud call worked: leave "unreachable" (or a refused-token "error") for "ready"."""
        if self.board.status.state in ("unreachable", "error") and self.setup_error is None:
            self.board.report("ready", f"split inference through {self.link.describe()} (working again)")

    async def _watch(self) -> None:
        """While unreachable: probe /healthz; once it answers (and we can connect), report ready."""
        while not self.closed and self.board.status.state == "unreachable":
            await asyncio.sleep(self.probe_interval)
            if self.link.exit_status() is not None:  # our own cloud died: start it again
                try:
                    await self._restart_local()
                except Exception as exc:  # noqa: BLE001 — a failed restart is a status, never a crash
                    self.fail(exc)
                return
            if not await self.link.reachable():
                continue
            try:
                await self.engine()
            except CloudUnavailable:
                continue
            except UmbraError as exc:
                self.fail(exc)
                return
            self.recovered()

    async def _restart_local(self) -> None:
        """Replace a dead self-started cloud by a fresh one (new port and token); the warm
        sessions lived in the dead one, so they are dropped and rebuilt on their next request."""
        now = time.monotonic()
        self.restarts = [t for t in self.restarts if now - t < RESTART_WINDOW_S]
        code = self.link.exit_status()
        if len(self.restarts) >= MAX_RESTARTS:
            raise CloudUnavailable(f"the self-started cloud keeps exiting (status {code}; {MAX_RESTARTS} restarts "
                                   f"in {RESTART_WINDOW_S / 60:.0f} min); see its log and restart the server")
        self.restarts.append(now)
        self.board.report("starting", f"the self-started cloud exited (status {code}); restarting it")
        async with self._connecting:  # completions wait here for the new engine
            self.current = None
            await self.pool.close_all()
            self.link = await self.link.restart()  # the dead one closed (audit saved, files removed)
            if self.closed:
                await self.link.aclose()
                return
            await self._connect_engine()
        self.board.report("ready", f"split inference through {self.link.describe()} (restarted after it exited)")

    # -- teardown ----------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Stop probing; close every session, the connection to the cloud and a self-started cloud."""
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
