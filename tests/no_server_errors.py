"""The suite fails on any 5xx: a pytest plugin (registered by tests/conftest.py) that, after each
test's teardown, reads the 5xx count of every cloud service started through server/launch.py's
helpers (local_cloud, local_cloud_sync, local_cloud_thread) — those still running and those
stopped since — and of every `umbra serve` app served through tests/lsp/lsp_helpers.py's
`serving` (wrapped in `count_server_errors`) — and of every service another process runs for a
test (lsp_helpers' `serve_process`, `umbra serve` read at its /healthz `errors`, and
`cloud_on_port`, a cloud read at its /metrics: `watch_service`) — and of every cloud that a
child process of the suite started through those helpers (`umbra serve`, the language server:
their self-started clouds announce themselves in the directory of server/service_reports.py's
REPORTS_ENV, set here for every process the suite starts, one per pytest-xdist worker) — and
fails the test if any answered a 5xx it did not declare:

    @pytest.mark.server_errors_expected   # this test provokes a 5xx on purpose

A 5xx is a bug (issue 60): a client's fault is a 4xx or a counted client abort. A count the
plugin cannot read (a service the test killed) is not checked."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from server import launch, service_reports
from server.auth import TokenStore
from umbra.errors import UmbraError

MARKER = "server_errors_expected"
_seen: dict[int, int] = {}  # service serial -> 5xx already accounted to an earlier test
_reports = 0  # service_reports.SHUTDOWN_REPORTS consumed so far
_serial = itertools.count(-1, -1)  # the serials of served apps (negative: never a launch serial)
_served: dict[int, "ServerErrors"] = {}  # serial -> every app wrapped by count_server_errors
_child_seen: dict[str, int] = {}  # report key -> 5xx of a child process's cloud already accounted
_child_tokens: dict[str, str] = {}  # report key -> the token issued to read that cloud's /metrics
_watched: dict[int, "WatchedService"] = {}  # serial -> every service of another process a test watches


class ServerErrors:
    """ASGI wrapper counting the 5xx an app answers (an exception out of it is uvicorn's 500)."""

    def __init__(self, app, name: str):
        self.app, self.name, self.count = app, name, 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def counting(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                self.count += message["status"] >= 500
            await send(message)

        try:
            await self.app(scope, receive, counting)
        except Exception:
            self.count += not started
            raise


def count_server_errors(app, name: str = "umbra serve"):
    """`app` wrapped so that the suite checks its 5xx like a cloud's."""
    wrapped = ServerErrors(app, name)
    _served[next(_serial)] = wrapped
    return wrapped


class WatchedService:
    """A service that another process runs for a test, its 5xx read by `read()` (None: it cannot
    tell); `stop()` takes the last count before the process is stopped."""

    def __init__(self, name: str, read):
        self.name, self.read, self.stopped, self.final = name, read, False, None

    def stop(self) -> None:
        self.final, self.stopped = self.read(), True

    def count(self) -> int | None:
        return self.final if self.stopped else self.read()


def watch_service(name: str, read) -> WatchedService:
    """Watch the 5xx of a service in another process (`read() -> int | None`); call `stop()` on the
    result while it still answers, just before stopping it."""
    service = WatchedService(name, read)
    _watched[next(_serial)] = service
    return service


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: the test provokes a 5xx from a cloud service on purpose")
    service_reports.WATCH = True
    os.environ[service_reports.REPORTS_ENV] = tempfile.mkdtemp(prefix="umbra-service-reports-")  # 0700


def pytest_unconfigure(config) -> None:
    directory = os.environ.pop(service_reports.REPORTS_ENV, None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def read_reports(directory: Path, tokens: dict[str, str]) -> list[tuple[str, str, int | None, bool]]:
    """(key, URL, 5xx answered or None when unknown, stopped) of each service that child processes
    of the suite started (service_reports.REPORTS_ENV); a stopped one's file is removed once read.
    A running one's count is read from its /metrics with a token issued into its token file (kept
    in `tokens`, by key, in this process only)."""
    found = []
    for path in sorted(directory.glob("*.json")):
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        key = path.stem
        if info["stopped"]:
            path.unlink(missing_ok=True)
            found.append((key, info["base_url"], info["count"], True))
            continue
        try:
            os.kill(info["pid"], 0)
        except OSError:  # killed without a report: its count is unknown
            path.unlink(missing_ok=True)
            found.append((key, info["base_url"], None, True))
            continue
        try:
            if key not in tokens:
                tokens[key] = TokenStore(info["token_file"]).add("suite-check")
        except (OSError, UmbraError, ValueError):
            found.append((key, info["base_url"], None, False))
            continue
        cloud = launch.LocalCloud(info["base_url"], tokens[key], None, Path(info["token_file"]).parent,
                                  Path(info["verify"]) if info["verify"] else None)
        found.append((key, info["base_url"], cloud.read_server_errors(), False))
    return found


def new_server_errors() -> list[str]:
    """'URL: N' for each service that answered N new 5xx since the last call."""
    global _reports
    found = []
    directory = os.environ.get(service_reports.REPORTS_ENV)
    for key, url, count, stopped in read_reports(Path(directory), _child_tokens) if directory else []:
        if count is not None and count > _child_seen.get(key, 0):
            found.append(f"{url} (started by a child process{', stopped' if stopped else ''}): "
                         f"{count - _child_seen.get(key, 0)}")
            _child_seen[key] = count
        if stopped:
            _child_seen.pop(key, None)
            _child_tokens.pop(key, None)
    for serial, cloud in list(service_reports.LIVE.items()):
        count = cloud.server_errors()
        if count is not None and count > _seen.get(serial, 0):
            found.append(f"{cloud.base_url}: {count - _seen.get(serial, 0)}")
            _seen[serial] = count
    for serial, app in list(_served.items()):
        if app.count > _seen.get(serial, 0):
            found.append(f"{app.name}: {app.count - _seen.get(serial, 0)}")
            _seen[serial] = app.count
    for serial, service in list(_watched.items()):
        count = service.count()
        if count is not None and count > _seen.get(serial, 0):
            found.append(f"{service.name}{' (stopped)' if service.stopped else ''}: {count - _seen.get(serial, 0)}")
            _seen[serial] = count
        if service.stopped:
            _watched.pop(serial)
            _seen.pop(serial, None)
    stopped, _reports = service_reports.SHUTDOWN_REPORTS[_reports:], len(service_reports.SHUTDOWN_REPORTS)
    for serial, url, count in stopped:
        if count > _seen.get(serial, 0):
            found.append(f"{url} (stopped): {count - _seen.get(serial, 0)}")
        _seen.pop(serial, None)
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    found = new_server_errors()
    if found and item.get_closest_marker(MARKER) is None:
        pytest.fail("a cloud service answered 5xx (a bug; mark the test @pytest.mark.server_errors_expected "
                    "if it provokes them on purpose): " + "; ".join(found), pytrace=False)
    return result
