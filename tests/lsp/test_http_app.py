"""The local completion HTTP server under uvicorn on a free 127.0.0.1 port, driven with httpx
through Umbra's own API (POST /v1/infill; the OpenAI-compatible one is test_openai_api.py),
completing through the real cloud service: results equal the monolithic baseline, sessions reuse
the prefix, bad input is 422, a newer request on a session makes the older 409, a client that
disconnects cancels its completion; no or a wrong API token is 401 and a foreign Host header 421;
every completion response names the privacy mode. What happens when the cloud fails is
test_cloud_supervisor.py; the `umbra serve` command, test_serve_cmd.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time

import httpx
import pytest
import pytest_asyncio
from http_helpers import DEFAULTS, PREFIX, SUFFIX, TOKEN_ENV, authorized, local_settings
from lsp_helpers import API_TOKEN, Monolithic, serving

from lsp.options import CompletionOptions

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def mono(lsp_model_dir) -> Monolithic:
    return Monolithic(lsp_model_dir)


@pytest.fixture(scope="module")
def base_url(lsp_model_dir, secret_service, loopback_cloud):
    with pytest.MonkeyPatch.context() as mp:  # the cloud: the real service in a thread, on loopback
        mp.setenv(TOKEN_ENV, loopback_cloud.token)
        with serving(local_settings(lsp_model_dir, loopback_cloud.base_url)) as url:
            yield url


@pytest_asyncio.fixture(loop_scope="module")
async def http(base_url):
    async with authorized(base_url) as client:
        yield client


async def test_no_or_a_wrong_token_is_401_and_healthz_tells_only_readiness_without_it(base_url):
    port = base_url.rsplit(":", 1)[1]
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as anon:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {API_TOKEN}"},
                        {"Authorization": API_TOKEN}):
            r = await anon.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX}, headers=headers)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", r.text
            assert "API token" in r.json()["detail"] and API_TOKEN not in r.text
            assert (await anon.delete("/v1/sessions/x", headers=headers)).status_code == 401
        anon_health = await anon.get("/healthz")  # no token: ready or not, and nothing about usage
        assert anon_health.status_code == 200 and anon_health.json() == {"state": "ready", "mode": "split"}
        wrong = await anon.get("/healthz", headers={"Authorization": "Bearer wrong"})
        assert wrong.json() == anon_health.json()
        full = (await anon.get("/healthz", headers={"Authorization": f"Bearer {API_TOKEN}"})).json()
        assert {"message", "sessions", "completions"} <= set(full) and full["state"] == "ready"
        for host in (f"localhost:{port}", f"[::1]:{port}", f"127.0.0.1:{port}"):
            r = await anon.get("/healthz", headers={"Host": host})
            assert r.status_code == 200, host
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.nip.io:{port}"):  # DNS rebinding
            for path in ("/healthz", "/v1/infill"):
                r = await anon.request("GET" if path == "/healthz" else "POST", path, headers={
                    "Host": host, "Authorization": f"Bearer {API_TOKEN}"}, json={"prefix": "", "suffix": ""})
                assert r.status_code == 421, (host, path, r.text)
        assert (await anon.get("/openapi.json")).status_code == 404  # no schema endpoint either


async def test_completion_equals_the_monolithic_result_and_sessions_reuse_the_prefix(http, mono):
    first = await http.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX, "session": "s-reuse"})
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["completion"] == await mono.complete(PREFIX, SUFFIX, DEFAULTS) != ""
    assert body["session"] == "s-reuse" and body["reusedTokens"] == 0
    assert body["recomputedTokens"] == body["promptTokens"] > 5 and body["generatedTokens"] > 0
    assert not {"tokens", "ids", "token_ids"} & set(body)
    # the cloud's round trips: the session's open and the prompt at least, one per token at most
    assert 2 <= body["roundTrips"] <= 4 + body["generatedTokens"]

    typed = PREFIX + "t"  # one keystroke
    second = (await http.post("/v1/infill", json={"prefix": typed, "suffix": SUFFIX, "session": "s-reuse",
                                                  "maxTokens": 8, "multiline": False})).json()
    assert second["completion"] == await mono.complete(typed, SUFFIX, CompletionOptions(max_tokens=8))
    assert second["reusedTokens"] > second["promptTokens"] // 2
    assert 0 < second["recomputedTokens"] < second["promptTokens"] // 2
    assert 1 <= second["roundTrips"] <= 3 + second["generatedTokens"]  # a warm session: no open

    health = await http.get("/healthz")
    assert health.status_code == 200
    assert health.json()["state"] == "ready" and health.json()["mode"] == "split"
    assert health.json()["sessions"] >= 1 and health.json()["completions"]["ok"] >= 2


async def test_without_a_session_each_request_starts_fresh(http):
    bodies = [(await http.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX})).json() for _ in range(2)]
    assert bodies[0]["completion"] == bodies[1]["completion"]
    assert bodies[1]["reusedTokens"] == 0 and bodies[1]["session"] is None


@pytest.mark.parametrize("body, where", [
    ({"suffix": ""}, "prefix"),
    ({"prefix": 5, "suffix": ""}, "prefix"),
    ({"prefix": "x", "suffix": "", "maxTokens": 0}, "maxTokens must be >= 1, got 0"),
    ({"prefix": "x", "suffix": "", "max_tokens": 0}, "maxTokens must be >= 1, got 0"),  # the camelCase path
    ({"prefix": "x", "suffix": "", "maxTokens": 4.0}, "maxTokens must be an integer, got a number"),
    ({"prefix": "x", "suffix": "", "topP": 2}, "topP must be <= 1, got 2"),
    ({"prefix": "x", "suffix": "", "temperature": -1}, "temperature must be >= 0, got -1"),
    ({"prefix": "x", "suffix": "", "multiline": "yes"}, 'multiline must be true, false or "auto", got a string'),
    ({"prefix": "x", "suffix": "", "languages": ["go"]}, "languages is a server setting"),
    ({"prefix": "x", "suffix": "", "session": "a b"}, "session"),
    ({"prefix": "x", "suffix": "", "language": ""}, "language"),
    ({"prefix": "x", "suffix": "", "maxTokens": 600}, "leaves no room"),  # the engine's own check
])
async def test_bad_input_is_422_with_a_clear_message(http, body, where):
    r = await http.post("/v1/infill", json=body)
    assert r.status_code == 422 and where in r.json()["detail"], r.text


async def test_overrides_take_snake_case_too_and_unknown_keys_are_a_warning(http, mono, caplog):
    with caplog.at_level(logging.WARNING, logger="umbra.lsp"):
        r = await http.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX, "language": "python",
                                                "max_tokens": 8, "multiline": False, "beamWidth": 4})
    assert r.status_code == 200, r.text
    assert r.json()["completion"] == await mono.complete(PREFIX, SUFFIX, CompletionOptions(max_tokens=8))
    assert any("beamWidth" in record.getMessage() for record in caplog.records if record.name == "umbra.lsp")


@pytest.mark.parametrize("value", [b"1e39", b"Infinity", b"-Infinity", b"NaN", b"1e-300", b"101"])
async def test_a_temperature_out_of_range_is_4xx_on_both_apis(http, lsp_model_dir, value):
    model = lsp_model_dir.name.encode()
    for path, body in (("/v1/infill", b'{"prefix": "x = ", "suffix": "", "temperature": %s}'),
                       ("/v1/completions", b'{"model": "%s", "prompt": "x = ", "max_tokens": 4, "temperature": %%s}'
                        % model)):
        r = await http.post(path, content=body % value, headers={"content-type": "application/json"})
        assert r.status_code in (400, 422) and "temperature" in r.text, (path, value, r.status_code, r.text)


async def test_bodies_are_bounded_before_the_token_is_looked_at(base_url):
    port = int(base_url.rsplit(":", 1)[1])
    head = (b"POST /v1/infill HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (port, 300 * 1024 * 1024))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:  # no token, 300 MB declared
        sock.sendall(head + b"{" * 4096)  # answered before the body is sent
        assert sock.recv(4096).startswith(b"HTTP/1.1 413 ")
    chunked = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nTransfer-Encoding: chunked\r\n\r\n" % port)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:  # no length: cut at the limit
        sock.sendall(chunked)
        chunk = b"%x\r\n%s\r\n" % (1024 * 1024, b" " * 1024 * 1024)
        with contextlib.suppress(OSError):  # the server may close while we are still sending
            for _ in range(12):  # 12 MiB, past the 8 MiB limit
                sock.sendall(chunk)
        assert sock.recv(4096).startswith(b"HTTP/1.1 413 ")


async def test_a_host_that_only_starts_like_loopback_is_421(base_url):
    port = base_url.rsplit(":", 1)[1]
    async with authorized(base_url) as client:
        for host in ("[::1].evil.example", f"[::1].evil.example:{port}", "[::1]evil", "localhost.evil.example"):
            r = await client.post("/v1/infill", headers={"Host": host}, json={"prefix": "", "suffix": ""})
            assert r.status_code == 421, (host, r.text)
        for host in (f"[::1]:{port}", f"localhost:{port}"):
            assert (await client.get("/v1/models", headers={"Host": host})).status_code == 200, host


async def test_a_body_that_is_not_json_is_422(http):
    r = await http.post("/v1/infill", content=b"prefix=x", headers={"content-type": "text/plain"})
    assert r.status_code == 422


async def test_a_newer_request_on_a_session_makes_the_older_409(http, mono):
    older = asyncio.ensure_future(http.post("/v1/infill", json={
        "prefix": PREFIX, "suffix": SUFFIX, "session": "s-race", "maxTokens": 300}))
    await asyncio.sleep(0.2)  # the older one is decoding (300 tokens take well over a second here)
    newer = await http.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX, "session": "s-race"})
    assert (await older).status_code == 409 and "newer request" in (await older).json()["detail"]
    assert newer.status_code == 200 and newer.json()["completion"] == await mono.complete(PREFIX, SUFFIX, DEFAULTS)


async def test_a_client_that_disconnects_cancels_its_completion(http, base_url, mono):
    before = (await http.get("/healthz")).json()["completions"].get("cancelled", 0)
    async with authorized(base_url, timeout=0.3) as impatient:
        with pytest.raises(httpx.ReadTimeout):
            await impatient.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX, "session": "s-gone",
                                                     "maxTokens": 300})
    deadline = time.monotonic() + 30
    while (await http.get("/healthz")).json()["completions"].get("cancelled", 0) == before:
        assert time.monotonic() < deadline, "the server did not cancel the abandoned completion"
        await asyncio.sleep(0.1)
    after = (await http.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX, "session": "s-gone"})).json()
    assert after["completion"] == await mono.complete(PREFIX, SUFFIX, DEFAULTS)  # caches still consistent


async def test_deleting_a_session(http):
    assert (await http.post("/v1/infill", json={"prefix": "x = ", "suffix": "", "session": "s-del"})).status_code == 200
    assert (await http.delete("/v1/sessions/s-del")).status_code == 204
    gone = await http.delete("/v1/sessions/s-del")
    assert gone.status_code == 404 and gone.json()["detail"] == "no such session"


async def test_every_completion_response_carries_the_privacy_mode(http):
    """X-Umbra-Privacy on both completion APIs (answers and errors alike), ASCII; GET /healthz has the
    figures behind it (with the token)."""
    expected = "none; cloud reads ~99.9 % of tokens"  # a plain model: what the attack tables say of it
    ok = await http.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX, "maxTokens": 4})
    bad = await http.post("/v1/infill", json={"prefix": PREFIX})
    model = (await http.get("/v1/models")).json()["data"][0]["id"]
    openai = await http.post("/v1/completions", json={"model": model, "prompt": PREFIX, "suffix": SUFFIX,
                                                      "max_tokens": 4})
    streamed = await http.post("/v1/completions", json={"model": model, "prompt": PREFIX, "max_tokens": 4,
                                                        "stream": True})
    for r in (ok, bad, openai, streamed):
        assert r.headers["x-umbra-privacy"] == expected, (r.status_code, r.headers)
    assert (ok.status_code, bad.status_code, openai.status_code, streamed.status_code) == (200, 422, 200, 200)
    assert "x-umbra-privacy" not in (await http.get("/v1/models")).headers  # not a completion
    health = (await http.get("/healthz")).json()
    assert health["privacy"] == "none · cloud reads ~99.9 % of tokens"
    assert health["privacyDetails"]["key"] == "none" and health["privacyDetails"]["defended"] is False
