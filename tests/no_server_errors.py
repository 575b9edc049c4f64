"""The suite fails on any 5xx: a pytest plugin (registered by tests/conftest.py) that, after each
test's teardown, reads the 5xx count of every cloud service started through server/launch.py's
helpers (local_cloud, local_cloud_sync, local_cloud_thread) — those still running and those
stopped since — and of every `umbra serve` app served through tests/lsp/lsp_helpers.py's
`serving` (wrapped in `count_server_errors`), and fails the test if any answered a 5xx it did
not declare:

    @pytest.mark.server_errors_expected   # this test provokes a 5xx on purpose

A 5xx is a bug (issue 60): a client's fault is a 4xx or a counted client abort. A count the
plugin cannot read (a service the test killed) is not checked."""

from __future__ import annotations

import itertools

import pytest

from server import launch

MARKER = "server_errors_expected"
_seen: dict[int, int] = {}  # service serial -> 5xx already accounted to an earlier test
_reports = 0  # launch.SHUTDOWN_REPORTS consumed so far
_serial = itertools.count(-1, -1)  # the serials of served apps (negative: never a launch serial)
_served: dict[int, "ServerErrors"] = {}  # serial -> every app wrapped by count_server_errors


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


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: the test provokes a 5xx from a cloud service on purpose")
    launch.WATCH = True


def new_server_errors() -> list[str]:
    """'URL: N' for each service that answered N new 5xx since the last call."""
    global _reports
    found = []
    for serial, cloud in list(launch.LIVE.items()):
        count = cloud.server_errors()
        if count is not None and count > _seen.get(serial, 0):
            found.append(f"{cloud.base_url}: {count - _seen.get(serial, 0)}")
            _seen[serial] = count
    for serial, app in list(_served.items()):
        if app.count > _seen.get(serial, 0):
            found.append(f"{app.name}: {app.count - _seen.get(serial, 0)}")
            _seen[serial] = app.count
    stopped, _reports = launch.SHUTDOWN_REPORTS[_reports:], len(launch.SHUTDOWN_REPORTS)
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
