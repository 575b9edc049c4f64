"""tests/no_server_errors.py, the suite's "any 5xx fails" check, run on an inner test session: a
real cloud (local_cloud_thread) made to answer a real 500 (its token file broken under it) fails
the test that caused it — unless the test is marked server_errors_expected — and a test whose
cloud answered only 4xx passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent
_INNER = '''
import httpx, pytest
from server.launch import local_cloud_thread
from tiny_models import build_tiny_model

@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    build_tiny_model("qwen2-tied", d)
    with local_cloud_thread(d, settings={"torch_threads": 1}) as c:
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


def inner(tmp_path: Path, mark: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_inner.py").write_text(_INNER.replace("MARK", mark))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_TESTS.parent), str(_TESTS)])}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                           "-p", "no_server_errors", "test_inner.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("mark, fails", [("", True), ("@pytest.mark.server_errors_expected", False)])
def test_a_5xx_fails_the_test_that_caused_it_unless_declared(tmp_path, mark, fails):
    run = inner(tmp_path, mark)
    out = run.stdout + run.stderr
    assert "2 passed" in out, out[-3000:]  # both tests' own assertions held: the cloud really answered 401, then 500
    if fails:
        assert run.returncode == 1 and "1 error" in out and "a cloud service answered 5xx" in out, out[-3000:]
        assert "test_a_500" in out.split("short test summary")[-1] and "test_a_4xx_only" not in out.split("short test summary")[-1], out[-3000:]
    else:
        assert run.returncode == 0, out[-3000:]


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
from tiny_models import build_tiny_model

CHILD = """''' + _CHILD + '''"""

@pytest.fixture(scope="module")
def child(tmp_path_factory):
    """A process of its own (as `umbra serve` or the language server) running a cloud."""
    d = tmp_path_factory.mktemp("tiny")
    build_tiny_model("qwen2-tied", d)
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(d)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
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


@pytest.mark.parametrize("mark, fails", [("", True), ("@pytest.mark.server_errors_expected", False)])
def test_a_5xx_of_a_cloud_that_a_child_process_started_fails_the_test(tmp_path, mark, fails):
    """Clouds that `umbra serve` or the language server start in their own processes: a 500 read
    while the cloud runs, and one it reports as it stops, each fail the test that caused it."""
    (tmp_path / "test_inner.py").write_text(_INNER_CHILD.replace("MARK", mark))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_TESTS.parent), str(_TESTS)])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                          "-p", "no_server_errors", "test_inner.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert "3 passed" in out, out[-3000:]  # the 500s really happened
    if fails:
        summary = out.split("short test summary")[-1]
        assert run.returncode == 1 and "2 errors" in out and "started by a child process" in out, out[-3000:]
        assert "test_a_500_while_it_runs" in summary and "test_a_500_then_it_stops" in summary, out[-3000:]
        assert "test_nothing_new" not in summary, out[-3000:]
    else:
        assert run.returncode == 0, out[-3000:]


_INNER_WATCHED = '''
import httpx, pytest
from lsp_helpers import cloud_on_port, free_port
from server.auth import TokenStore
from tiny_models import build_tiny_model

MARK
def test_a_500_of_a_cloud_on_a_port(tmp_path):
    d = tmp_path / "tiny"
    build_tiny_model("qwen2-tied", d)
    tokens = tmp_path / "tokens.json"
    token = TokenStore(tokens).add("t")
    port = free_port()
    with cloud_on_port(d, port, tokens):
        good = tokens.read_text()
        tokens.write_text("not json")  # the service cannot read its tokens: 500
        r = httpx.post(f"http://127.0.0.1:{port}/v1/sessions", json={}, headers={"Authorization": f"Bearer {token}"})
        tokens.write_text(good)
        assert r.status_code == 500
'''


@pytest.mark.parametrize("mark, fails", [("", True), ("@pytest.mark.server_errors_expected", False)])
def test_a_5xx_of_a_service_another_process_runs_for_the_test_fails_it(tmp_path, mark, fails):
    """A service in a process of its own that a test starts through tests/lsp/lsp_helpers.py
    (`cloud_on_port` here; `serve_process` reports through the same watch_service): its 500 fails
    the test that caused it."""
    (tmp_path / "test_inner.py").write_text(_INNER_WATCHED.replace("MARK", mark))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_TESTS.parent), str(_TESTS), str(_TESTS / "lsp")])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                          "-p", "no_server_errors", "test_inner.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert "1 passed" in out, out[-3000:]  # the 500 really happened
    if fails:
        assert run.returncode == 1 and "1 error" in out and "(cloud_on_port) (stopped): 1" in out, out[-3000:]
    else:
        assert run.returncode == 0, out[-3000:]
