"""SecureGate in the product: a bundle with a Python expert, a secure adapter and a revealing adapter
sealed under an access key, behind the real local HTTP API (uvicorn) and the real language server
(stdio, pytest-lsp), both completing through one real cloud on loopback (`loopback_cloud`).

The expert and the access adapter compose (both active); the HTTP response and `umbra/status` say
"secure" or "revealing: NAME", never a key; a rotation, a stale key, an import and a revocation
done by the real CLI in another process reach the running server without a restart, and each
completion equals the in-process completion of the adapters it names."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from securegate.helpers import SMALL_GATE
from lsp_helpers import (API_TOKEN, CLOUD_TOKEN_ENV, EXACT_INLINE, cloud_env, initialize_params, language_server,
                         serving, through_cloud)
from lsprotocol import types
from pytest_lsp import LanguageClient

from adapter_helpers import perturb
from cli_helpers import umbra_in_process
from keys.access_keys import delete_key, parse, store_key
from lsp.options import CompletionOptions
from lsp.settings import LocalSettings
from umbra.engine import ClientModel, CompletionEngine
from umbra.model.adapters import LoraConfig, build_adapter
from umbra.privacy.bundle import BundleConfig, init_bundle
from umbra.privacy.bundle_adapters import add_adapter
from umbra.securegate.bundle_access import add_revealing_adapter
from umbra.securegate.gate import GateConfig

pytestmark = [pytest.mark.asyncio(loop_scope="module"),
              pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")]

ROOT = Path(__file__).resolve().parents[2]
COMPLETION = CompletionOptions(max_tokens=10, multiline=True)
PREFIX, SUFFIX = "def area(width, height):\n    result = width * height\n    return ", "\n"
# The gate is trained with the SecureGate tests' small settings, in-process and through the CLI's
# --gate-config (the defaults take tens of seconds per retraining on a loaded machine; tests/cli
# trains them once through the CLI and tests/securegate/test_gate.py checks them).
GATE = GateConfig(**SMALL_GATE)


@pytest.fixture(scope="module")
def gate_option(tmp_path_factory) -> list[str]:
    path = tmp_path_factory.mktemp("gate") / "small-gate.json"
    path.write_text(json.dumps(SMALL_GATE))
    return ["--gate-config", str(path)]


@pytest.fixture(scope="module")
def keystore(module_keystore):
    return module_keystore


@pytest.fixture(scope="module")
def bundle(lsp_model_dir, tmp_path_factory, keystore):
    out = tmp_path_factory.mktemp("access") / "bundle"
    init_bundle(lsp_model_dir, BundleConfig(epsilon=float("inf")), out, store=keystore)
    model = ClientModel.from_bundle(out, lsp_model_dir, store=keystore)
    shape = model.plan.shape(model.spec.num_layers)
    build = lambda name, seed: perturb(build_adapter(name, LoraConfig(rank=4), model.spec, shape), seed=seed, std=0.6)  # noqa: E731
    add_adapter(out, build("python", 0), role="expert", language="python")
    add_adapter(out, build("guarded", 1), role="secure")
    add_revealing_adapter(out, build("team", 2), "team-key", keystore, gate_config=GATE)
    return out


@pytest.fixture(scope="module")
def expected(bundle, lsp_model_dir, keystore) -> dict[tuple[str, ...], str]:
    """adapter names -> the completion with exactly those adapters, in-process."""
    model = ClientModel.from_bundle(bundle, lsp_model_dir, store=keystore)
    engine = CompletionEngine.monolithic(model, COMPLETION.engine_config())
    model.unlock()  # decrypts "team" into model.adapters with the key in this keyring

    async def run(names):
        async with engine.session() as session:
            return (await session.complete(PREFIX, SUFFIX, adapters=model.adapter_set(names))).text

    out = {names: asyncio.run(run(names)) for names in [("guarded", "python"), ("python", "team"), ("guarded",)]}
    assert len(set(out.values())) == 3, "the secure and revealing adapters should complete differently"
    return out


def umbra_cli(*args: str, stdin: str | None = None, in_process: bool = False) -> subprocess.CompletedProcess:
    """`umbra ARGS`, exit status 0: the console program in another process, or in_process=True
    the entry point in this one (tests/cli_helpers.py) where the server runs in another process
    anyway or the command changes nothing."""
    if in_process:
        r = umbra_in_process(*args, stdin=stdin)
        assert r.returncode == 0, r.stderr
        return r
    r = subprocess.run([sys.executable, "-m", "umbra.cli.main", *args], input=stdin, capture_output=True, text=True,
                       cwd=ROOT, env=dict(os.environ), timeout=300)
    assert r.returncode == 0, r.stderr
    return r


async def test_http_composes_and_picks_up_rotation_and_revocation(bundle, lsp_model_dir, keystore, expected,
                                                                  gate_option, loopback_cloud, monkeypatch):
    monkeypatch.setenv(CLOUD_TOKEN_ENV, loopback_cloud.token)
    settings = LocalSettings(bundle=bundle, model_dir=lsp_model_dir, keyring_service=keystore.service, threads=1,
                             max_tokens=COMPLETION.max_tokens, multiline=True, cloud_url=loopback_cloud.base_url,
                             cloud_token_env=CLOUD_TOKEN_ENV)
    b = ["--bundle", str(bundle), "--service", keystore.service]
    with serving(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=180,
                                     headers={"Authorization": f"Bearer {API_TOKEN}"}) as http:
            async def ask(language="python") -> dict:
                r = await http.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX, "language": language})
                assert r.status_code == 200, r.text
                return r.json()

            async def until(access: str, timeout: float = 30.0) -> dict:
                deadline = time.monotonic() + timeout  # the keyring is re-read every 2 s
                while True:
                    body = await ask()
                    if body["access"] == access or time.monotonic() > deadline:
                        return body
                    await asyncio.sleep(0.25)

            first = await ask()
            assert (first["access"], first["expert"]) == ("revealing: team", "python")  # both active
            assert first["completion"] == expected[("python", "team")]
            other = await ask("rust")  # no expert: the revealing adapter alone
            assert other["access"] == "revealing: team" and other["expert"] is None

            old = parse(umbra_cli("keys", "access", "export", "team-key", *b, in_process=True).stdout)
            new = parse(umbra_cli("keys", "access", "rotate", "team-key", *b, *gate_option).stdout)
            rotated = await ask()  # the manifest changed: the new key, held here, opens the re-sealed adapter
            assert rotated["access"] == "revealing: team" and rotated["completion"] == expected[("python", "team")]

            delete_key(keystore, new.bundle_id, new.key_id)  # a user who still holds only the old key
            store_key(keystore, old)
            stale = await until("secure")
            assert stale["access"] == "secure" and stale["completion"] == expected[("guarded", "python")]
            assert old.text() not in str(stale) and new.text() not in str(stale)

            umbra_cli("keys", "access", "import", *b, stdin=new.text())  # the new key, distributed
            back = await until("revealing: team")
            assert back["access"] == "revealing: team" and back["completion"] == expected[("python", "team")]

            umbra_cli("keys", "access", "revoke", "team-key", "--drop-adapter", *b, *gate_option)
            revoked = await ask()  # revocation: picked up on the next request, no restart
            assert revoked["access"] == "secure" and revoked["completion"] == expected[("guarded", "python")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory, lsp_model_dir, keystore, loopback_cloud):
    out = tmp_path_factory.mktemp("access-lsp") / "bundle"
    init_bundle(lsp_model_dir, BundleConfig(epsilon=float("inf")), out, store=keystore)
    model = ClientModel.from_bundle(out, lsp_model_dir, store=keystore)
    shape = model.plan.shape(model.spec.num_layers)
    add_revealing_adapter(out, perturb(build_adapter("ops", LoraConfig(rank=4), model.spec, shape), seed=3),
                          "ops-key", keystore, gate_config=GATE)
    options = {"model": {"bundle": str(out), "dir": str(lsp_model_dir), "keyringService": keystore.service},
               "completion": {"maxTokens": COMPLETION.max_tokens, "multiline": True},
               "inline": EXACT_INLINE, "threads": 1}
    async with language_server(cloud_env(loopback_cloud.token)) as lsp_client:
        lsp_client.bundle = out
        await lsp_client.initialize_session(initialize_params(through_cloud(options, loopback_cloud.base_url)))
        await lsp_client.statuses.wait_for("ready")
        yield lsp_client
        await lsp_client.shutdown_session()


async def _inline(client) -> None:
    uri = f"file:///access/{secrets.token_hex(4)}.py"
    client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
        uri=uri, language_id="python", version=1, text=PREFIX + SUFFIX)))
    await client.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=2, character=11),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)))


async def test_lsp_status_names_the_access_state_never_the_key(client: LanguageClient, keystore):
    await _inline(client)
    assert client.statuses.items[-1]["access"] == "revealing: ops"
    b = ["--bundle", str(client.bundle), "--service", keystore.service]
    key = umbra_cli("keys", "access", "export", "ops-key", *b, in_process=True).stdout.strip()
    umbra_cli("keys", "access", "revoke", "ops-key", "--drop-adapter", *b, in_process=True)  # the server: a subprocess
    await _inline(client)
    assert client.statuses.items[-1]["access"] == "secure"
    assert all(key not in str(item) for item in client.statuses.items)
