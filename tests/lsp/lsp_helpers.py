"""Helpers of the lsp tests: client capabilities, the `umbra/status` log, expected completions
from the monolithic baseline, free/closed ports and a cloud restarted on the same port.

The raw-frame client is in raw_lsp_client.py. (tests/lsp has no __init__.py on purpose, like
tests/server and tests/keys: as a package named `lsp` under the rootdir it would shadow the real
`lsp` package.)"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from http_probe import refuses_connections  # noqa: F401 (re-exported for the lsp tests)
from no_server_errors import count_server_errors, watch_service
import httpx
import uvicorn
from lsprotocol import types
from pytest_lsp import ClientServerConfig

from lsp.api_auth import ApiAuth
from lsp.http_app import uvicorn_config
from lsp.options import CompletionOptions, InlineOptions
from lsp.settings import LocalSettings
from umbra.listen import listen_socket
from umbra.engine import ClientModel, CompletionEngine, CompletionResult
from server.launch import LocalCloud
from server.auth import TokenStore
from umbra.paths import repo_root

LSP_COMMAND = [sys.executable, "-m", "lsp"]
STATUS = "umbra/status"
CLOUD_TOKEN_ENV = "UMBRA_TEST_CLOUD_TOKEN"  # where a language server of the lsp tests reads its cloud token

CAPABILITIES = types.ClientCapabilities(
    general=types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf16]),
    text_document=types.TextDocumentClientCapabilities(
        synchronization=types.TextDocumentSyncClientCapabilities(dynamic_registration=False),
        completion=types.CompletionClientCapabilities(
            completion_item=types.ClientCompletionItemOptions(snippet_support=False)),
        inline_completion=types.InlineCompletionClientCapabilities(dynamic_registration=False),
    ),
)

SOURCE = ("import os\n\n\ndef add(a, b):\n    total = a + b\n    return total\n\n\n"
          "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = \n\n"
          "print(add(1, 2))\n")


class StatusLog:
    """Every `umbra/status` notification the client receives, in order."""

    def __init__(self, client):
        self.items: list[dict] = []
        self._changed = asyncio.Event()

        @client.feature(STATUS)
        def on_status(ls, params):
            self.items.append(plain(params))
            self._changed.set()

    @property
    def states(self) -> list[str]:
        return [s["state"] for s in self.items]

    async def wait_for(self, state: str, after: int = 0, timeout: float = 240.0) -> dict:
        """The first status with `state` at index >= `after`."""
        deadline = time.monotonic() + timeout
        while True:
            for item in self.items[after:]:
                if item["state"] == state:
                    return item
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no {state!r} status within {timeout}s; got {self.items}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass


def plain(value):
    """pygls hands custom notifications' params (and custom requests' results) over as namedtuples:
    back to plain JSON values."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


# The `inline` options that keep an editor's completion the engine's own, bit for bit: no latency
# deadline (it makes the text depend on time) and no loop stop. The tests of those set them.
EXACT_INLINE = {"deadlineMs": 0, "repetitionTokens": 0}


@contextlib.asynccontextmanager
async def language_server(env: dict[str, str] | None = None, command: list[str] = LSP_COMMAND):
    """The real language server over stdio (pytest-lsp's client, its `umbra/status` log as
    `client.statuses`), started with `env` (None: this process's); ended by end of input if it
    still runs (a server that shut down or was signalled has exited already)."""
    client = await ClientServerConfig(server_command=command, server_env=env).start()
    client.statuses = StatusLog(client)
    try:
        yield client
    finally:
        if client._server.returncode is None:
            client._server.stdin.close()
        await asyncio.wait_for(client.stop(), 60)


def cloud_env(token: str | None = None) -> dict[str, str]:
    """This process's environment with the cloud token in CLOUD_TOKEN_ENV (None: not set at all)."""
    env = {k: v for k, v in os.environ.items() if k not in ("UMBRA_CLOUD_TOKEN", CLOUD_TOKEN_ENV)}
    return env if token is None else {**env, CLOUD_TOKEN_ENV: token}


def through_cloud(options: dict, url: str) -> dict:
    """`options` (initializationOptions) with `cloud.url` set: the server completes through the
    cloud at `url`, its token from CLOUD_TOKEN_ENV (and, unless `options` name one, a keyring
    service nobody stores into)."""
    model = {"keyringService": f"umbra-test-{secrets.token_hex(6)}", **options.get("model", {})}
    return {**options, "model": model, "cloud": {**options.get("cloud", {}), "url": url, "tokenEnv": CLOUD_TOKEN_ENV}}


def initialize_params(options: dict, root: Path | None = None) -> types.InitializeParams:
    return types.InitializeParams(capabilities=CAPABILITIES, initialization_options=options,
                                  root_uri=None if root is None else root.as_uri())


def open_document(client, uri: str, text: str, version: int = 1) -> None:
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))


def insert(client, uri: str, version: int, line: int, character: int, text: str) -> None:
    """An incremental didChange inserting `text` at (line, character)."""
    pos = types.Position(line=line, character=character)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text=text)]))


def offset_of(text: str, line: int, character: int) -> int:
    """String offset of an LSP position in `text` (ASCII-only lines, "\\n" breaks)."""
    lines = text.split("\n")
    return sum(len(x) + 1 for x in lines[:line]) + character


class Monolithic:
    """Expected completions: the same model run whole in this process (nothing leaves it)."""

    def __init__(self, model_dir: Path):
        self.model = ClientModel.load(model_dir)
        self._engines: dict = {}

    async def complete(self, prefix: str, suffix: str, options: CompletionOptions,
                       inline: InlineOptions | None = None) -> str:
        """The completion with `options`, and the `inline` options' stop rules (an editor's request)."""
        return (await self.result(prefix, suffix, options, inline)).text

    async def result(self, prefix: str, suffix: str, options: CompletionOptions,
                     inline: InlineOptions | None = None) -> CompletionResult:
        key = (options, inline)
        if key not in self._engines:
            config = options.engine_config()
            self._engines[key] = CompletionEngine.monolithic(
                self.model, config if inline is None else inline.engine_config(config))
        return await self._engines[key].complete(prefix, suffix)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(0.1)


@contextmanager
def cloud_on_port(model_dir: Path, port: int, token_file: Path, timeout: float = 120.0):
    """The real cloud service (`python -m server`) on a given loopback port with an existing token
    file: a cloud that comes back after an outage at the same URL. The suite fails the test on any
    5xx it answers (its /metrics, read with a token issued into `token_file`)."""
    log = token_file.parent / "restarted-cloud.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "server", "--model-dir", str(model_dir), "--host", "127.0.0.1",
                                 "--port", str(port), "--token-file", str(token_file), "--torch-threads", "1"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=repo_root())
    url = f"http://127.0.0.1:{port}"
    watched = watch_service(f"{url} (cloud_on_port)", _cloud_5xx(url, token_file))
    try:
        wait_until(lambda: proc.poll() is None and not refuses_connections(url) or proc.poll() is not None,
                   timeout, "restarted cloud listening")
        if proc.poll() is not None:
            raise AssertionError(f"restarted cloud exited: {log.read_text()[-2000:]}")
        yield proc
    finally:
        if proc.poll() is None:
            watched.stop()
        else:
            watched.stopped = True  # exited by itself: its count is unknown
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _cloud_5xx(url: str, token_file: Path):
    """Reads the 5xx a cloud at `url` answered (its /metrics) with a token issued into its token
    file at the first read (None: it cannot tell)."""
    cloud = LocalCloud(url, "", None, token_file.parent, token_file=token_file)

    def read() -> int | None:
        if not cloud.token:
            try:
                cloud.token = TokenStore(token_file).add("suite-check")
            except (OSError, ValueError):
                return None
        return cloud.read_server_errors()
    return read


def _serve_5xx(url: str, log: Path):
    """Reads the 5xx `umbra serve` at `url` answered (GET /healthz's `errors`, with the API token
    of the file its log names; None: it cannot tell)."""
    def read() -> int | None:
        found = re.search(r"\(API token in (.+)\)$", log.read_text(errors="replace"), re.M)
        try:
            headers = {"Authorization": f"Bearer {Path(found.group(1)).read_text().strip()}"} if found else {}
            transport = httpx.HTTPTransport(local_address="127.0.0.9")  # its own slots at the edge
            with httpx.Client(timeout=10, transport=transport) as http:
                errors = http.get(url + "/healthz", headers=headers).json().get("errors")
        except (httpx.HTTPError, OSError, ValueError):
            return None
        if errors is None:  # not authorized to see them
            return None
        return sum(n for status, n in errors.items() if status.startswith("5"))
    return read


@contextmanager
def serve_process(model_dir: Path, *flags: str, log: Path, env: dict[str, str]):
    """`umbra serve` as a real process on a free loopback port (its output in `log`): yields
    (process, base URL) once it listens; stopped with SIGTERM (killed if it hangs). The suite fails
    the test on any 5xx it answers (GET /healthz's `errors`, tests/no_server_errors.py)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "umbra.cli.main", "serve", "--port", "0", "--model",
                                 str(model_dir), "--threads", "1", *flags],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=repo_root(), env=env)
    try:
        wait_until(lambda: "listening on" in log.read_text() or proc.poll() is not None, 120, "umbra serve listening")
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text())
        if found is None:
            raise AssertionError(f"umbra serve exited: {log.read_text()[-2000:]}")
        watched = watch_service(f"umbra serve at {found.group(1)}", _serve_5xx(found.group(1), log))
        try:
            yield proc, found.group(1)
        finally:
            if proc.poll() is None:
                watched.stop()  # its last count, while it answers
            else:
                watched.stopped = True  # exited by itself: its count is unknown
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


API_TOKEN = secrets.token_urlsafe(32)


@contextmanager
def serving(settings: LocalSettings, token: str | None = API_TOKEN, apps: list | None = None):
    """The app under uvicorn in a thread of this process, on a real loopback socket (`apps`
    receives the FastAPI app, whose state holds the backend)."""
    sock = listen_socket("127.0.0.1", 0)
    config = uvicorn_config(settings, auth=ApiAuth(token, loopback_only=True))
    if apps is not None:
        apps.append(config.app)
    config.app = count_server_errors(config.app)  # the suite fails on its 5xx (tests/no_server_errors.py)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), 180, "the HTTP server started")
        assert server.started, "the app's lifespan failed (see the log)"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()


def inline_params(uri: str, line: int, character: int,
                  trigger: types.InlineCompletionTriggerKind = types.InlineCompletionTriggerKind.Automatic,
                  ) -> types.InlineCompletionParams:
    """An inline-completion request at (line, character) of `uri`, as an editor sends it."""
    return types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character),
        context=types.InlineCompletionContext(trigger_kind=trigger))
