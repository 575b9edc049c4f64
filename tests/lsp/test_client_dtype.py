"""The `model.dtype` option (lsp/options.py; `umbra serve --dtype`): the client's compute dtype and
the wire's, as `umbra complete --dtype`. `umbra serve --dtype bf16` as a process and the language
server with `model.dtype: "bf16"`, each through the real cloud it starts (which then computes the
middle in bf16 too), say so when ready and complete as the bf16 model run whole in this process
(at a prompt where split and whole agree: bf16 rounds the split's states at other points than the
whole model's, so at another prompt they may part after a few tokens)."""

from __future__ import annotations

import os

import httpx
import pytest
import pytest_lsp
import torch
from cli_helpers import umbra_in_process
from http_helpers import PREFIX, SUFFIX
from lsp_helpers import LSP_COMMAND, StatusLog, initialize_params, inline_params, open_document, serve_process
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from lsp.options import CompletionOptions, InlineOptions
from lsp.settings import LocalSettings
from umbra.engine import ClientModel, CompletionEngine

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def whole_bf16(lsp_model_dir):
    """Expected completions: the bf16 model run whole in this process."""
    model = ClientModel.load(lsp_model_dir, dtype=torch.bfloat16)

    async def complete(prefix: str, suffix: str, options: CompletionOptions, inline: InlineOptions | None = None):
        config = options.engine_config()
        config = config if inline is None else inline.engine_config(config)
        return (await CompletionEngine.monolithic(model, config).complete(prefix, suffix)).text
    return complete


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("UMBRA_LOCAL_")}


async def test_umbra_serve_dtype_bf16_as_a_process(lsp_model_dir, whole_bf16, tmp_path):
    with serve_process(lsp_model_dir, "--no-auth", "--dtype", "bf16", log=tmp_path / "serve.log", env=_env()) as (_, url):
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            r = await http.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX})
            health = (await http.get("/healthz")).json()
        assert r.status_code == 200, (r.text, (tmp_path / "serve.log").read_text())
        assert r.json()["completion"] == await whole_bf16(PREFIX, SUFFIX, CompletionOptions()) != ""
        assert r.json()["roundTrips"] > 0  # through the cloud it started
        assert health["state"] == "ready" and health["message"].endswith("(bf16)"), health


async def test_a_dtype_serve_does_not_run_is_a_usage_error():
    # the entry point in-process (tests/cli_helpers.py): `umbra serve` runs as a real process above
    bad = umbra_in_process("serve", "--dtype", "fp16", env={k: None for k in os.environ if k.startswith("UMBRA_LOCAL_")})
    assert bad.returncode == 2 and "--dtype" in bad.stderr and bad.stdout == ""


async def test_the_dtype_is_a_setting_from_the_environment(monkeypatch):
    for name in [k for k in os.environ if k.startswith("UMBRA_LOCAL_")]:
        monkeypatch.delenv(name)
    assert LocalSettings().options().model.dtype == "fp32"
    monkeypatch.setenv("UMBRA_LOCAL_MODEL__DTYPE", "bf16")
    assert LocalSettings().options().model.dtype == "bf16"
    assert LocalSettings(dtype="fp32").options().model.dtype == "fp32"  # a flag wins over the environment


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=LSP_COMMAND))
async def client(lsp_client: LanguageClient, lsp_model_dir):
    lsp_client.statuses = StatusLog(lsp_client)
    await lsp_client.initialize_session(initialize_params({
        "model": {"dir": str(lsp_model_dir), "dtype": "bf16"}, "threads": 1, "inline": {"deadlineMs": 0}}))
    yield
    await lsp_client.shutdown_session()


async def test_the_language_server_completes_in_bf16(client: LanguageClient, whole_bf16):
    status = await client.statuses.wait_for("ready")
    assert status["message"].startswith("split inference through a self-started cloud")
    assert status["message"].endswith("(bf16)")
    uri = "file:///dtype.py"
    open_document(client, uri, PREFIX + SUFFIX)  # where bf16 split and whole agree token for token (a
    # prompt elsewhere may part after a few tokens: bf16's rounding, split or whole, is not the same bits)
    line, character = PREFIX.count("\n"), len(PREFIX.rsplit("\n", 1)[-1])
    result = await client.text_document_inline_completion_async(
        inline_params(uri, line, character, types.InlineCompletionTriggerKind.Invoked))
    expected = await whole_bf16(PREFIX, SUFFIX, CompletionOptions(), InlineOptions(deadline_ms=0))
    assert (result.items[0].insert_text if result.items else "") == expected != ""
