"""Client aborts of `umbra serve` (lsp/api_aborts.py), against the real CLI process completing
through a configured cloud (the module's loopback_cloud: --cloud, --token-env, --service; its API
token in --token-file, gone once it stops; the self-started cloud is test_serve_cmd.py's): a client that leaves mid-body, mid-stream or once its request is sent is a
counted client abort (GET /healthz's `clientAborts`, by route template and reason), one warning
line in the server's log, never a traceback or a 5xx."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import time

import httpx
import pytest
from http_helpers import PREFIX, SUFFIX, TOKEN_ENV, authorized
from lsp_helpers import serve_process, wait_until


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def serve(lsp_model_dir, tmp_path_factory, loopback_cloud):
    """(URL, API token, log path) of `umbra serve` through the configured cloud, ready."""
    tmp = tmp_path_factory.mktemp("api-aborts")
    log, token_file = tmp / "serve.log", tmp / "t" / "api.token"
    env = {k: v for k, v in os.environ.items() if not k.startswith("UMBRA_LOCAL_")} | {TOKEN_ENV: loopback_cloud.token}
    with serve_process(lsp_model_dir, "--token-file", str(token_file), "--cloud", loopback_cloud.base_url,
                       "--token-env", TOKEN_ENV, "--service", f"umbra-test-{secrets.token_hex(6)}",
                       log=log, env=env) as (proc, url):
        assert f"API token in {token_file}" in log.read_text()  # where --token-file asked
        token = token_file.read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        wait_until(lambda: proc.poll() is not None or httpx.get(url + "/healthz", headers=headers).status_code == 200,
                   240, "umbra serve ready")
        assert proc.poll() is None, log.read_text()
        message = httpx.get(url + "/healthz", headers=headers).json()["message"]
        assert loopback_cloud.base_url in message and "self-started" not in message, message
        yield url, token, log
    assert not token_file.exists()  # stopped (SIGTERM): the token died with the server


async def _aborts(http: httpx.AsyncClient) -> dict:
    return (await http.get("/healthz")).json()["clientAborts"]


async def _counted(http: httpx.AsyncClient, route: str, before: dict) -> dict[str, int]:
    """The new aborts of `route` by reason, once there are any (the server notices in its own time)."""
    deadline = time.monotonic() + 60
    while True:
        now = (await _aborts(http)).get(route, {})
        new = {k: v - before.get(route, {}).get(k, 0) for k, v in now.items() if v > before.get(route, {}).get(k, 0)}
        if new or time.monotonic() > deadline:
            return new
        await asyncio.sleep(0.05)


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _head(path: str, token: str, length: int) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\n"
            f"content-type: application/json\r\ncontent-length: {length}\r\n\r\n").encode()


def _check_log(log, line: str) -> None:
    text = log.read_text(errors="replace")
    assert line in text, text[-3000:]
    assert "Traceback" not in text and " 500 " not in text, text[-3000:]


async def test_a_client_gone_mid_body_is_a_client_abort(serve):
    url, token, log = serve
    await asyncio.sleep(1.1)  # the log says at most one abort line a second
    async with authorized(url, token=token) as http:
        before = await _aborts(http)
        with _connect(url) as s:
            s.sendall(_head("/v1/infill", token, 5000) + b'{"prefix": "' + b"x" * 200)
            await asyncio.sleep(0.3)  # the server is reading the body
        assert await _counted(http, "POST /v1/infill", before) == {"disconnect mid-body": 1}
    _check_log(log, "client abort: POST /v1/infill (disconnect mid-body)")


async def test_a_client_gone_mid_stream_is_a_client_abort(serve, lsp_model_dir):
    url, token, log = serve
    await asyncio.sleep(1.1)
    body = json.dumps({"model": lsp_model_dir.name, "prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 300,
                       "stream": True}).encode()
    async with authorized(url, token=token) as http:
        before = await _aborts(http)
        with _connect(url) as s:
            s.sendall(_head("/v1/completions", token, len(body)) + body)
            seen = b""
            while b"data: " not in seen:  # the stream has begun
                chunk = s.recv(4096)
                assert chunk, seen
                seen += chunk
            assert seen.startswith(b"HTTP/1.1 200"), seen
        assert await _counted(http, "POST /v1/completions", before) == {"disconnect mid-stream": 1}
    _check_log(log, "client abort: POST /v1/completions (disconnect mid-stream)")


async def test_a_client_gone_once_its_request_is_sent_is_a_client_abort(serve):
    """Sent whole and dropped at once: the server finds it gone while it reads the body or
    while the completion runs (its 499 goes to nobody); either is one abort, not an error."""
    url, token, log = serve
    await asyncio.sleep(1.1)
    body = json.dumps({"prefix": PREFIX, "suffix": SUFFIX, "maxTokens": 300, "session": "abort-sent"}).encode()
    async with authorized(url, token=token) as http:
        before = await _aborts(http)
        with _connect(url) as s:
            s.sendall(_head("/v1/infill", token, len(body)) + body)
        new = await _counted(http, "POST /v1/infill", before)
        assert sum(new.values()) == 1 and set(new) <= {"disconnect", "disconnect mid-body"}, new
        r = await http.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX, "session": "abort-sent"})
        assert r.status_code == 200, r.text  # the session serves the next request
    _check_log(log, f"client abort: POST /v1/infill ({next(iter(new))})")


async def test_errors_answered_on_purpose_are_counted_by_status_without_a_traceback(serve):
    """No token 401, a bad body 422 (400 on the OpenAI route), an oversized body 413: each counted
    by status in /healthz's `errors`; none is a client abort, none leaves a traceback."""
    url, token, log = serve
    async with authorized(url, token=token) as http:
        before = (await http.get("/healthz")).json()
        async with httpx.AsyncClient(base_url=url, timeout=60) as anonymous:
            assert (await anonymous.post("/v1/infill", json={"prefix": "", "suffix": ""})).status_code == 401
        assert (await http.post("/v1/infill", json={"prefix": "", "suffix": "", "maxTokens": 0})).status_code == 422
        assert (await http.post("/v1/completions", json={"model": "x", "prompt": 3})).status_code == 400
        with _connect(url) as s:  # a declared body over max_body_bytes (8 MiB): 413 before a byte of it
            s.sendall(_head("/v1/infill", token, 9 * 2**20))
            assert s.recv(4096).startswith(b"HTTP/1.1 413")
        after = (await http.get("/healthz")).json()
    new = {k: v - before["errors"].get(k, 0) for k, v in after["errors"].items() if v > before["errors"].get(k, 0)}
    assert new == {"401": 1, "422": 1, "400": 1, "413": 1}, new
    assert after["clientAborts"] == before["clientAborts"]
    assert "Traceback" not in log.read_text(errors="replace")
