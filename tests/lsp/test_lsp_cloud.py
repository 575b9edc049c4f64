"""The language server with a configured cloud (the real service from `local_cloud_sync`): the
token from the environment variable named by `cloud.tokenEnv` or from the OS keyring (stored
by `umbra keys cloud-token set`, read from stdin); a killed cloud is reported "unreachable" with
empty results — never a fallback — and "ready" again once it is back; a refused or missing token
is an "error" status; a client bundle completes like its monolithic self.

Each test starts its own language server: the token comes from the server's environment or the
keyring, so each server is configured at its start (the keyring's server also completes with a
client bundle: one server for both). They share one cloud (`cloud`, the real service under
uvicorn in a thread of this process, on a loopback port), except the outage test, which kills
its own cloud process and starts another on the same port."""

from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import urlparse

import pytest
from cli_helpers import umbra_in_process
from lsp_helpers import (
    EXACT_INLINE,
    SOURCE,
    Monolithic,
    cloud_on_port,
    initialize_params,
    language_server,
    offset_of,
    open_document,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp.options import CompletionOptions
from server.launch import local_cloud_sync, local_cloud_thread
from umbra.engine import ClientModel, CompletionEngine
from umbra.paths import repo_root
from umbra.privacy.bundle import BundleConfig, init_bundle

pytestmark = pytest.mark.asyncio(loop_scope="module")

COMPLETION = CompletionOptions(max_tokens=48, multiline=True)
CURSOR = (11, 17)
TOKEN_ENV = "UMBRA_TEST_CLOUD_TOKEN"
REQUEST_FAILED = -32803


@pytest.fixture(scope="module")
def cloud(lsp_model_dir):
    """The cloud the servers of the tests that never stop it connect to (none kills it)."""
    with local_cloud_thread(lsp_model_dir, settings={"torch_threads": 1}) as cloud:
        yield cloud


@pytest.fixture(scope="module")
def mono(lsp_model_dir) -> Monolithic:
    return Monolithic(lsp_model_dir)


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("UMBRA_CLOUD_TOKEN", TOKEN_ENV)}
    return {**env, **extra}


def _options(model_dir, url: str, service: str, **model) -> dict:
    return {"model": {"dir": str(model_dir), "keyringService": service, **model},
            "cloud": {"url": url, "tokenEnv": TOKEN_ENV},
            "completion": {"maxTokens": COMPLETION.max_tokens, "multiline": True}, "inline": EXACT_INLINE,
            "threads": 1}


async def _inline(client, uri: str) -> list[str]:
    result = await client.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=CURSOR[0], character=CURSOR[1]),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)))
    return [item.insert_text for item in result.items]


async def _expected(mono: Monolithic) -> str:
    at = offset_of(SOURCE, *CURSOR)
    text = await mono.complete(SOURCE[:at], SOURCE[at:], COMPLETION)
    assert text
    return text


def _umbra(*args: str, stdin: str = "", in_process: bool = True) -> subprocess.CompletedProcess:
    """`umbra ARGS` with no cloud token in its environment: the entry point in-process
    (tests/cli_helpers.py), or with in_process=False the console program in a subprocess."""
    if in_process:
        return umbra_in_process(*args, stdin=stdin, env={"UMBRA_CLOUD_TOKEN": None, TOKEN_ENV: None})
    return subprocess.run([sys.executable, "-m", "umbra.cli.main", *args], input=stdin, capture_output=True,
                          text=True, timeout=120, cwd=repo_root(), env=_env())


async def test_env_token_then_outage_is_unreachable_never_a_fallback_then_recovery(lsp_model_dir, keystore, mono):
    expected = await _expected(mono)
    with local_cloud_sync(lsp_model_dir, settings={"torch_threads": 1}) as cloud:
        async with language_server(_env(**{TOKEN_ENV: cloud.token})) as client:
            await client.initialize_session(initialize_params(_options(lsp_model_dir, cloud.base_url, keystore.service)))
            ready = await client.statuses.wait_for("ready")
            assert f"the cloud at {cloud.base_url}" in ready["message"]
            open_document(client, "file:///outage.py", SOURCE)
            assert await _inline(client, "file:///outage.py") == [expected]

            seen = len(client.statuses.items)
            cloud.kill()  # SIGKILL: the cloud dies with our session's caches
            assert await _inline(client, "file:///outage.py") == []  # nothing computed any other way
            down = await client.statuses.wait_for("unreachable", after=seen)
            assert "cloud unreachable" in down["message"] and "never sends your code any other way" in down["message"]
            assert down["mode"] == "split"
            assert await _inline(client, "file:///outage.py") == []
            assert client.statuses.states[seen:] == ["unreachable"]  # said once, not per request

            port = urlparse(cloud.base_url).port
            with cloud_on_port(lsp_model_dir, port, cloud.workdir / "tokens.json"):
                back = await client.statuses.wait_for("ready", after=seen)  # found by the /healthz probe
                assert cloud.base_url in back["message"]
                assert await _inline(client, "file:///outage.py") == [expected]  # the session re-prefilled
                await client.shutdown_session()


async def test_a_client_bundle_with_the_token_from_the_keyring_stored_by_the_cli(lsp_model_dir, cloud, keystore,
                                                                                   tmp_path):
    """The token stored by `umbra keys cloud-token set` (the console program, stdin a real pipe) and
    no token in the server's environment at all; a client bundle completes like its monolithic self."""
    name = f"cloud-token:{cloud.base_url}"
    stored = _umbra("keys", "cloud-token", "set", cloud.base_url + "/", "--service", keystore.service,
                    stdin=cloud.token + "\n", in_process=False)
    assert stored.returncode == 0, stored.stderr
    assert cloud.token not in stored.stdout + stored.stderr
    assert keystore.get(name) == cloud.token.encode()

    bundle = tmp_path / "bundle"
    init_bundle(lsp_model_dir, BundleConfig(epsilon=13.0, seed=0), bundle, store=keystore)
    engine = CompletionEngine.monolithic(ClientModel.from_bundle(bundle, store=keystore), COMPLETION.engine_config())
    at = offset_of(SOURCE, *CURSOR)
    expected = (await engine.complete(SOURCE[:at], SOURCE[at:])).text
    async with language_server(_env()) as client:  # no token in the environment
        options = _options(lsp_model_dir, cloud.base_url, keystore.service, bundle=str(bundle))
        options["model"].pop("dir")  # the base model: the one the bundle was made from
        await client.initialize_session(initialize_params(options))
        await client.statuses.wait_for("ready")
        open_document(client, "file:///bundle.py", SOURCE)
        assert await _inline(client, "file:///bundle.py") == ([expected] if expected else [])
        await client.shutdown_session()

    deleted = _umbra("keys", "cloud-token", "delete", cloud.base_url, "--service", keystore.service)
    assert deleted.returncode == 0, deleted.stderr
    assert not keystore.exists(name)
    again = _umbra("keys", "cloud-token", "delete", cloud.base_url, "--service", keystore.service)
    assert again.returncode == 2 and "no key" in again.stderr


@pytest.mark.parametrize("stdin, message", [("", "empty"), ("two words", "whitespace")])
async def test_cli_refuses_an_empty_or_malformed_token_and_a_bad_url(keystore, stdin, message):
    bad = _umbra("keys", "cloud-token", "set", "https://cloud.example", "--service", keystore.service, stdin=stdin)
    assert bad.returncode == 2 and message in bad.stderr and keystore.list() == []
    url = _umbra("keys", "cloud-token", "set", "cloud.example", "--service", keystore.service, stdin="t0ken")
    assert url.returncode == 2 and "http:// or https://" in url.stderr and keystore.list() == []


async def test_a_refused_or_missing_token_is_an_error_status(lsp_model_dir, cloud, keystore):
    for env, needle in ((_env(**{TOKEN_ENV: "not-the-token"}), "HTTP 401"), (_env(), f"${TOKEN_ENV} is not set")):
        async with language_server(env) as client:
            await client.initialize_session(initialize_params(_options(lsp_model_dir, cloud.base_url, keystore.service)))
            status = await client.statuses.wait_for("error")
            assert needle in status["message"] and "not-the-token" not in status["message"]
            open_document(client, "file:///t.py", SOURCE)
            with pytest.raises(JsonRpcException) as err:
                await _inline(client, "file:///t.py")
            assert err.value.code == REQUEST_FAILED and needle in err.value.message
            await client.shutdown_session()
