"""tests/no_server_errors.py, the suite's "any 5xx fails" check, run on an inner test session: a
real cloud (local_cloud_thread) made to answer a real 500 (its token file broken under it) fails
the test that caused it — unless the test is marked server_errors_expected — and a test whose
cloud answered only 4xx passes.

One inner session runs every scenario, each in a module of its own, with and without the mark
(one Python, torch and tiny model for all of them instead of one per scenario): its JUnit report
says, test by test, whose own assertions held and which test the plugin failed, and with what."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent
_MARKED = "@pytest.mark.server_errors_expected"
_CONFTEST = '''
import pytest
from tiny_models import build_tiny_model

@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    build_tiny_model("qwen2-tied", d)
    return d
'''
_INNER = '''
import httpx, pytest
from server.launch import local_cloud_thread

@pytest.fixture(scope="module")
def cloud(tiny, tmp_path_factory):
    with local_cloud_thread(tiny, settings={"torch_threads": 1}) as c:
        yield c

def _call(cloud, break_tokens):
    if break_tokens:
        (cloud.workdir / "tokens.json").write_text("not json")  # the service cannot read its tokens: 500
    r = httpx.post(cloud.base_url + "/v1/sessions", json={}, headers={"Authorization": f"Bearer {cloud.token}"})
    return r.status_code

def test_a_4xx_only(cloud):
    assert httpx.post(cloud.base_url + "/v1/sessions", json={}).status_code == 401

MARK

def test_a_500(cloud):
    assert _call(cloud, True) == 500
'''

_CHILD = '''
import sys, httpx
from server.launch import local_cloud_sync
with local_cloud_sync(sys.argv[1], settings={"torch_threads": 1}) as c:
    print("ready", flush=True)
    for _ in sys.stdin:  # each line: answer one real 500 (its token file broken for one call)
        tokens = c.workdir / "tokens.json"
        good = tokens.read_text()
        tokens.write_text("not json")
        r = httpx.post(c.base_url + "/v1/sessions", json={}, headers={"Authorization": f"Bearer {c.token}"})
        tokens.write_text(good)
        print(r.status_code, flush=True)
'''
_INNER_CHILD = '''
import subprocess, sys
import pytest

CHILD = """''' + _CHILD + '''"""

@pytest.fixture(scope="module")
def child(tiny):
    """A process of its own (as `umbra serve` or the language server) running a cloud."""
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(tiny)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    yield p
    if p.poll() is None:
        p.stdin.close()
        p.wait(60)

def _500(child):
    child.stdin.write("go\\n")
    child.stdin.flush()
    return child.stdout.readline().strip()

MARK
def test_a_500_while_it_runs(child):
    assert _500(child) == "500"

def test_nothing_new(child):
    pass

MARK
def test_a_500_then_it_stops(child):
    assert _500(child) == "500"
    child.stdin.close()
    assert child.wait(60) == 0
'''

_INNER_WATCHED = '''
import httpx, pytest
from lsp_helpers import cloud_on_port, free_port
from server.auth import TokenStore

MARK
def test_a_500_of_a_cloud_on_a_port(tiny, tmp_path):
    tokens = tmp_path / "tokens.json"
    token = TokenStore(tokens).add("t")
    port = free_port()
    with cloud_on_port(tiny, port, tokens):
        good = tokens.read_text()
        tokens.write_text("not json")  # the service cannot read its tokens: 500
        r = httpx.post(f"http://127.0.0.1:{port}/v1/sessions", json={}, headers={"Authorization": f"Bearer {token}"})
        tokens.write_text(good)
        assert r.status_code == 500
'''

# scenario -> (inner module, its tests)
SCENARIOS = {"cloud": (_INNER, ("test_a_4xx_only", "test_a_500")),
             "child": (_INNER_CHILD, ("test_a_500_while_it_runs", "test_nothing_new", "test_a_500_then_it_stops")),
             "watched": (_INNER_WATCHED, ("test_a_500_of_a_cloud_on_a_port",))}


def _module(scenario: str, marked: bool) -> str:
    return f"test_{scenario}_{'marked' if marked else 'unmarked'}"


@pytest.fixture(scope="module")
def inner(tmp_path_factory):
    """One inner session over every scenario, marked and not: (its output, its exit status,
    module -> test -> (its call passed, the teardown error's message or None), and "totals": the
    report's counts)."""
    d = tmp_path_factory.mktemp("inner")
    (d / "conftest.py").write_text(_CONFTEST)
    for scenario, (source, _) in SCENARIOS.items():
        for marked in (False, True):
            (d / f"{_module(scenario, marked)}.py").write_text(source.replace("MARK", _MARKED if marked else ""))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_TESTS.parent), str(_TESTS), str(_TESTS / "lsp")])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                          "-p", "no_server_errors", "--junitxml", str(d / "report.xml"), "."],
                         cwd=d, env=env, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    results: dict[str, dict[str, list]] = {}
    report = ET.parse(d / "report.xml").getroot()
    suite = report if report.tag == "testsuite" else report.find("testsuite")
    results["totals"] = {k: int(suite.get(k)) for k in ("tests", "errors", "failures", "skipped")}
    for case in report.iter("testcase"):
        outcome = results.setdefault(case.get("classname"), {}).setdefault(case.get("name"), [True, None])
        for child in case:
            if child.tag == "error" and "teardown" in (child.get("message") or ""):
                outcome[1] = child.get("message")
            elif child.tag in ("failure", "error", "skipped"):
                outcome[0] = False  # the test's own assertions (or its setup) did not hold
    return out, run.returncode, results


@pytest.mark.slow  # the plugin's one real run: an inner pytest session, every scenario in it
def test_the_inner_session_ran_every_scenario_and_failed_only_on_the_5xx(inner):
    out, returncode, results = inner
    assert returncode == 1, out[-3000:]
    # every test's own assertions held (the cloud really answered 401, then the 500s happened);
    # the unmarked modules' 500s are the only errors: 1 + 2 + 1
    assert "12 passed" in out and "4 errors" in out, out[-3000:]
    assert results["totals"] == {"tests": 12, "errors": 4, "failures": 0, "skipped": 0}, results["totals"]
    assert set(results) - {"totals"} == {_module(s, m) for s in SCENARIOS for m in (False, True)}, results


def _check(inner, scenario: str, fails: bool, failed: set[str], message: str) -> None:
    out, _, results = inner
    tests = results[_module(scenario, not fails)]
    assert set(tests) == set(SCENARIOS[scenario][1]), tests
    assert all(passed for passed, _ in tests.values()), (tests, out[-3000:])  # the 5xx really happened
    errors = {name for name, (_, error) in tests.items() if error is not None}
    assert errors == (failed if fails else set()), (tests, out[-3000:])
    for name in errors:
        assert message in tests[name][1], tests[name][1]


@pytest.mark.parametrize("fails", [True, False], ids=["unmarked", "marked"])
def test_a_5xx_fails_the_test_that_caused_it_unless_declared(inner, fails):
    _check(inner, "cloud", fails, {"test_a_500"}, "a cloud service answered 5xx")


@pytest.mark.parametrize("fails", [True, False], ids=["unmarked", "marked"])
def test_a_5xx_of_a_cloud_that_a_child_process_started_fails_the_test(inner, fails):
    """Clouds that `umbra serve` or the language server start in their own processes: a 500 read
    while the cloud runs, and one it reports as it stops, each fail the test that caused it."""
    _check(inner, "child", fails, {"test_a_500_while_it_runs", "test_a_500_then_it_stops"},
           "started by a child process")


@pytest.mark.parametrize("fails", [True, False], ids=["unmarked", "marked"])
def test_a_5xx_of_a_service_another_process_runs_for_the_test_fails_it(inner, fails):
    """A service in a process of its own that a test starts through tests/lsp/lsp_helpers.py
    (`cloud_on_port` here; `serve_process` reports through the same watch_service): its 500 fails
    the test that caused it."""
    _check(inner, "watched", fails, {"test_a_500_of_a_cloud_on_a_port"}, "(cloud_on_port) (stopped): 1")
