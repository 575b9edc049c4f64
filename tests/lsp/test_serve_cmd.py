"""`umbra serve` (umbra/cli/serve_cmd.py over lsp/http_app.py's `run`) as a process: with a
self-started cloud it completes and stops the cloud and removes its token file on SIGTERM, and a
set-up failure is a clear error and not a traceback. Its other flags are checked on the serve
processes of other tests: --no-auth (test_client_only.py, test_client_dtype.py), --token-file and
--cloud / --token-env / --service, the token file gone after SIGTERM (test_api_aborts.py).

`umbra serve` runs as the real console program where a process is what the test checks (its
signals, token file and children); the set-up failure calls the entry point in-process
(tests/cli_helpers.py: the same exit status and stderr, without a Python start-up and a torch
import)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest
from cli_helpers import umbra_in_process
from http_helpers import PREFIX, SUFFIX, authorized
from lsp_helpers import Monolithic, refuses_connections, wait_until

from lsp.options import CompletionOptions
from umbra.paths import repo_root

ASYNC = pytest.mark.asyncio(loop_scope="module")  # the tests that talk HTTP (the set-up failure test is plain)


@pytest.fixture(scope="module")
def mono(lsp_model_dir) -> Monolithic:
    return Monolithic(lsp_model_dir)


@ASYNC
async def test_umbra_serve_with_a_self_started_cloud_stops_it_on_sigterm(lsp_model_dir, mono, tmp_path):
    log = tmp_path / "serve.log"
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("UMBRA_LOCAL_")} | {"XDG_RUNTIME_DIR": str(runtime)}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "umbra.cli.main", "serve", "--port", "0", "--model",
                                 str(lsp_model_dir), "--threads", "1"], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=repo_root(), env=env)
    try:
        wait_until(lambda: "listening on" in log.read_text() or proc.poll() is not None, 120, "umbra serve listening")
        found = re.search(r"listening on (http://127\.0\.0\.1:(\d+)) \(API token in (\S+)\)", log.read_text())
        url, port, token_file = found.group(1), found.group(2), found.group(3)
        assert token_file == str(runtime / "umbra" / f"serve-{port}.token")
        assert os.stat(token_file).st_mode & 0o777 == 0o600 and os.stat(runtime / "umbra").st_mode & 0o777 == 0o700
        token = open(token_file).read().strip()
        assert len(token) >= 40 and token not in log.read_text()
        async with authorized(url, token=token) as http:
            deadline = time.monotonic() + 240
            while not await _healthy(http):
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                await asyncio.sleep(0.2)
            message = (await http.get("/healthz")).json()["message"]
            cloud_url = re.search(r"self-started cloud at (http://127\.0\.0\.1:\d+)", message).group(1)
            r = await http.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX})
            assert r.json()["completion"] == await mono.complete(PREFIX, SUFFIX, CompletionOptions())
        assert not refuses_connections(cloud_url)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == -signal.SIGTERM  # uvicorn shuts down gracefully, then re-raises it
        assert refuses_connections(cloud_url) and refuses_connections(url)
        assert not os.path.exists(token_file)  # the token dies with the server
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_umbra_serve_set_up_failure_is_a_clear_error_not_a_traceback(tmp_path):
    # a plain test: the command runs its own event loop and signal handlers in the main thread
    r = umbra_in_process("serve", "--port", "0", "--model", tmp_path / "absent")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "listening" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (f"umbra: error: model directory {tmp_path / 'absent'} does not exist "
                                                 f"(pass --model DIR)")


async def _healthy(http: httpx.AsyncClient) -> bool:
    try:
        return (await http.get("/healthz")).status_code == 200
    except httpx.TransportError:
        return False
