"""The `clientOnly` option (lsp/options.py): `umbra serve` and the language server complete with
the client's blocks alone (umbra/engine/client_only.py). A real cloud configured beside it receives
not one request (its own /metrics counters say so), a configured cloud that does not exist and
has no token is never looked for (the status is "ready", not "error"), and the status, /healthz
and X-Umbra-Privacy say client-only. Also `umbra serve --client-only` as a process."""

from __future__ import annotations

import os
import re

import httpx
import pytest
import pytest_lsp
from http_helpers import DEFAULTS, PREFIX, SUFFIX, TOKEN_ENV, authorized, local_settings
from lsp_helpers import (LSP_COMMAND, SOURCE, StatusLog, free_port, initialize_params, inline_params, offset_of,
                         open_document, serve_process, serving)
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from lsp.options import CompletionOptions, InlineOptions
from lsp.settings import LocalSettings
from umbra.engine import ClientModel
from umbra.engine.client_only import client_only_engine

pytestmark = pytest.mark.asyncio(loop_scope="module")

SUMMARY = "client only · nothing is sent (the client's blocks alone)"


@pytest.fixture(scope="module")
def alone(lsp_model_dir):
    """Expected completions: the client-only engine in this process."""
    model = ClientModel.load(lsp_model_dir)

    async def complete(prefix: str, suffix: str, options: CompletionOptions, inline: InlineOptions | None = None):
        config = options.engine_config()
        config = config if inline is None else inline.engine_config(config)
        return (await client_only_engine(model, config).complete(prefix, suffix)).text
    return complete


def _counters(cloud) -> dict[str, float]:
    text = httpx.get(f"{cloud.base_url}/metrics", headers={"Authorization": f"Bearer {cloud.token}"}).text
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r"^(umbra_cloud_(?:sessions_opened|bytes_in|tokens_processed)_total) ([0-9.e+-]+)$", text, re.M)}


async def test_serve_client_only_sends_nothing_to_the_configured_cloud(lsp_model_dir, alone, secret_service,
                                                                      loopback_cloud):
    cloud = loopback_cloud  # the real service on loopback, in a thread of this process
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(TOKEN_ENV, cloud.token)
        before = _counters(cloud)
        with serving(local_settings(lsp_model_dir, cloud.base_url, client_only=True)) as url:
            async with authorized(url) as http:
                r = await http.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX, "session": "a"})
                again = await http.post("/v1/infill", json={"prefix": PREFIX + "t", "suffix": SUFFIX, "session": "a"})
                health = (await http.get("/healthz")).json()
                anon = httpx.get(f"{url}/healthz").json()
        after = _counters(cloud)
    assert r.status_code == 200 and again.status_code == 200, r.text
    assert r.json()["completion"] == await alone(PREFIX, SUFFIX, DEFAULTS) != ""
    assert r.json()["roundTrips"] == 0 and again.json()["reusedTokens"] > 0
    assert r.headers["x-umbra-privacy"] == SUMMARY.replace(" · ", "; ")
    assert anon == {"state": "ready", "mode": "client-only"} and health["mode"] == "client-only"
    assert health["privacyDetails"]["key"] == "client-only" and health["privacyDetails"]["defended"]
    assert before["umbra_cloud_sessions_opened_total"] == after["umbra_cloud_sessions_opened_total"]
    assert after == before  # not a byte, not a position, not a session


async def test_client_only_is_a_setting_from_the_environment(monkeypatch):
    monkeypatch.setenv("UMBRA_LOCAL_CLIENT_ONLY", "true")
    assert LocalSettings().options().client_only
    monkeypatch.delenv("UMBRA_LOCAL_CLIENT_ONLY")
    assert not LocalSettings().options().client_only


async def test_umbra_serve_client_only_as_a_process(lsp_model_dir, alone, tmp_path):
    """`umbra serve --client-only` with a configured cloud that does not exist and has no token."""
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("UMBRA_LOCAL_") and k != TOKEN_ENV}
    with serve_process(lsp_model_dir, "--no-auth", "--client-only", "--cloud", f"http://127.0.0.1:{free_port()}",
                       "--token-env", TOKEN_ENV, log=log, env=env) as (_, url):
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            r = await http.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX})
            health = (await http.get("/healthz")).json()
        assert r.status_code == 200, (r.text, log.read_text())  # no token asked for
        assert "no API token (--no-auth)" in log.read_text()
        assert r.json()["completion"] == await alone(PREFIX, SUFFIX, CompletionOptions())
        assert health["state"] == "ready" and health["mode"] == "client-only"


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=LSP_COMMAND))
async def client(lsp_client: LanguageClient, lsp_model_dir):
    lsp_client.statuses = StatusLog(lsp_client)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there, and no token is configured for it
    await lsp_client.initialize_session(initialize_params({
        "model": {"dir": str(lsp_model_dir)}, "threads": 1, "clientOnly": True, "inline": {"deadlineMs": 0},
        "cloud": {"url": url, "tokenEnv": "UMBRA_TEST_NO_SUCH_TOKEN"}}))
    yield
    await lsp_client.shutdown_session()


async def test_the_language_server_completes_client_only(client: LanguageClient, alone):
    status = await client.statuses.wait_for("ready")
    assert status["mode"] == "client-only" and status["privacy"] == SUMMARY
    assert "error" not in client.statuses.states and "unreachable" not in client.statuses.states
    uri = "file:///client-only.py"
    open_document(client, uri, SOURCE)
    line, character = 11, 17
    at = offset_of(SOURCE, line, character)
    result = await client.text_document_inline_completion_async(
        inline_params(uri, line, character, types.InlineCompletionTriggerKind.Invoked))
    expected = await alone(SOURCE[:at], SOURCE[at:], CompletionOptions(), InlineOptions(deadline_ms=0))
    assert (result.items[0].insert_text if result.items else "") == expected
