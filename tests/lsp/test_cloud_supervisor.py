"""The cloud supervisor (lsp/cloud_supervisor.py) behind the local HTTP server: an unreachable
cloud is 503 and never a fallback, a self-started cloud that dies is started again (and, dying
too often, becomes an error), and with `umbra audit on` each session's traffic is recorded.

The local HTTP server runs in a thread of this process (lsp_helpers.serving); the cloud of the
auditing test too (local_cloud_thread: it only serves), the one that is killed is a process."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from http_helpers import DEFAULTS, PREFIX, SUFFIX, TOKEN_ENV, authorized, local_settings
from lsp_helpers import Monolithic, refuses_connections, serving

from server.launch import local_cloud_sync, local_cloud_thread

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def mono(lsp_model_dir) -> Monolithic:
    return Monolithic(lsp_model_dir)


@pytest.mark.server_errors_expected  # umbra serve's 503 for an unreachable cloud, on purpose
async def test_an_unreachable_cloud_is_503_and_never_a_fallback(lsp_model_dir, secret_service):
    with local_cloud_sync(lsp_model_dir, settings={"torch_threads": 1}) as cloud, pytest.MonkeyPatch.context() as mp:
        mp.setenv(TOKEN_ENV, cloud.token)
        with serving(local_settings(lsp_model_dir, cloud.base_url, auth=False), token=None) as url:
            async with httpx.AsyncClient(base_url=url, timeout=120) as http:  # --no-auth: no token needed
                assert (await http.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX})).status_code == 200
                cloud.kill()
                r = await http.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX, "session": "s"})
                assert r.status_code == 503 and "cloud unreachable" in r.json()["detail"]
                assert "completion" not in r.json()
                health = await http.get("/healthz")
                assert health.status_code == 503 and health.json()["state"] == "unreachable"


async def test_with_auditing_on_each_session_is_recorded_when_it_ends(lsp_model_dir, keystore, tmp_path, monkeypatch):
    """`umbra audit on` covers the servers too: a session's traffic is saved (encrypted) when the
    session is deleted, the rest at shutdown — the same recordings `umbra audit` reports on."""
    from umbra.audit.store import AuditStore

    monkeypatch.setenv("UMBRA_AUDIT", "1")
    monkeypatch.setenv("UMBRA_AUDIT_DIR", str(tmp_path / "audit"))
    monkeypatch.setenv("UMBRA_AUDIT_SERVICE", keystore.service)
    store = AuditStore(tmp_path / "audit", keystore)
    with local_cloud_thread(lsp_model_dir, settings={"torch_threads": 1}) as cloud:
        monkeypatch.setenv(TOKEN_ENV, cloud.token)
        with serving(local_settings(lsp_model_dir, cloud.base_url)) as url:
            async with authorized(url) as http:
                for prefix in (PREFIX, PREFIX + "t"):
                    r = await http.post("/v1/infill", json={"prefix": prefix, "suffix": SUFFIX, "session": "a"})
                    assert r.status_code == 200
                assert (await http.post("/v1/infill", json={"prefix": "x = ", "suffix": "", "session": "b"})).status_code == 200
                assert store.paths() == []  # sessions still open
                assert (await http.delete("/v1/sessions/a")).status_code == 204
                (first,) = store.records()
                assert PREFIX.strip() in _decode(lsp_model_dir, first.sequences[0].truth)
                assert first.meta["hidden_size"] > 0 and first.meta["wire_dtype"] == "torch.float32"
        second = store.records()[-1]  # session "b", saved at shutdown
        assert len(store.paths()) == 2 and "x =" in _decode(lsp_model_dir, second.sequences[0].truth)


@pytest.mark.server_errors_expected  # umbra serve's 503 while its cloud is down, on purpose
async def test_a_self_started_cloud_that_dies_is_started_again(lsp_model_dir, mono, secret_service):
    """The server's own cloud is killed: the next completion is 503 (never a fallback), then the
    cloud is started again on a new port and completions give the same results as before."""
    apps: list = []
    with serving(local_settings(lsp_model_dir, None), apps=apps) as url:
        backend = apps[0].state.backend
        backend.cloud.probe_interval = 0.2
        async with authorized(url) as http:
            body = {"prefix": PREFIX, "suffix": SUFFIX, "session": "s"}
            assert (await http.post("/v1/infill", json=body)).json()["completion"] == await mono.complete(
                PREFIX, SUFFIX, DEFAULTS)
            old = backend.link
            old.local.kill()
            r = await http.post("/v1/infill", json=body)
            assert r.status_code == 503 and "completion" not in r.json()
            deadline = time.monotonic() + 180
            while (health := (await http.get("/healthz")).json())["state"] != "ready":
                assert time.monotonic() < deadline and health["state"] != "error", health
                await asyncio.sleep(0.2)
            assert "restarted" in health["message"] and backend.link.url != old.url
            assert refuses_connections(old.url)
            again = await http.post("/v1/infill", json=body)
            assert again.status_code == 200 and again.json()["completion"] == await mono.complete(PREFIX, SUFFIX, DEFAULTS)
            assert again.json()["reusedTokens"] == 0  # the warm session lived in the dead cloud: rebuilt
            assert len(backend.cloud.restarts) == 1

            backend.cloud.restarts = [time.monotonic()] * 3  # as if it had died three times just now
            backend.link.local.kill()
            assert (await http.post("/v1/infill", json=body)).status_code == 503
            deadline = time.monotonic() + 60
            while (health := (await http.get("/healthz")).json())["state"] != "error":
                assert time.monotonic() < deadline, health
                await asyncio.sleep(0.2)
            assert "keeps exiting" in health["message"]
            r = await http.post("/v1/infill", json=body)
            assert r.status_code == 503 and "keeps exiting" in r.json()["detail"]


def _decode(model_dir, ids) -> str:
    from umbra.engine import ClientModel

    return ClientModel.load(model_dir).tokenizer.decode(ids.tolist())
