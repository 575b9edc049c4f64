"""Per-language experts end to end: a bundle with a Python, a Go and a Java expert behind the real
language server (stdio, pytest-lsp, `languageId` routing) and the real local HTTP API (uvicorn,
`language` routing, aliases), both completing through one real cloud on loopback (`loopback_cloud`).
The bundle is shaped as NOESIS makes it: a shared soft prompt (every request, its states on the
wire) beside the experts, so a language without an expert runs with the shared prompt only.
Concurrent completions in the three languages give exactly what the same requests give one at a
time, and what the model gives in-process with the same expert; the HTTP response and
`umbra/status` name the expert that served."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import pytest_asyncio
from lsp_helpers import (API_TOKEN, CLOUD_TOKEN_ENV, EXACT_INLINE, cloud_env, initialize_params, language_server,
                         serving, through_cloud)
from lsprotocol import types
from pytest_lsp import LanguageClient

from adapter_helpers import perturb
from lsp.options import CompletionOptions
from lsp.settings import LocalSettings
from umbra.engine import ClientModel, CompletionEngine
from umbra.engine.routing import AdapterRole, AdapterRouter
from umbra.model.adapters import BottleneckConfig, LoraConfig, SoftPromptConfig, build_adapter
from umbra.privacy.bundle import BundleConfig, init_bundle
from umbra.privacy.bundle_adapters import add_adapter

pytestmark = [pytest.mark.asyncio(loop_scope="module"),
              pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")]

COMPLETION = CompletionOptions(max_tokens=12, multiline=True)
DOCS = {  # language -> (text, cursor line, cursor character)
    "python": ("def area(width, height):\n    result = width * height\n    return \n", 2, 11),
    "go": ("package main\n\nfunc area(w int, h int) int {\n\tr := w * h\n\treturn \n}\n", 4, 8),
    "java": ("class Box {\n    int area(int w, int h) {\n        int r = w * h;\n        return \n    }\n}\n", 3, 15),
}


def _split(text: str, line: int, character: int) -> tuple[str, str]:
    lines = text.split("\n")
    at = sum(len(x) + 1 for x in lines[:line]) + character
    return text[:at], text[at:]


@pytest.fixture(scope="module")
def keystore(module_keystore):
    return module_keystore


@pytest.fixture(scope="module")
def bundle(lsp_model_dir, tmp_path_factory, keystore):
    out = tmp_path_factory.mktemp("experts") / "bundle"
    init_bundle(lsp_model_dir, BundleConfig(epsilon=float("inf")), out, store=keystore)
    model = ClientModel.from_bundle(out, lsp_model_dir, store=keystore)
    shape = model.plan.shape(model.spec.num_layers)
    for seed, lang in enumerate(DOCS):  # a distinct, strong expert per language (as if trained)
        config = LoraConfig(rank=4) if lang != "go" else BottleneckConfig(size=8)
        add_adapter(out, perturb(build_adapter(lang, config, model.spec, shape), seed=seed, std=0.6),
                    role="expert", language=lang, training={"method": "test"})
    prompt = perturb(build_adapter("shared", SoftPromptConfig(length=4), model.spec, shape), seed=7, std=0.5)
    add_adapter(out, prompt, role="shared", training={"method": "test"})
    return out


@pytest.fixture(scope="module")
def expected(bundle, lsp_model_dir, keystore) -> dict[str | None, str]:
    """language -> the completion of its document with its expert, the model run in-process."""
    model = ClientModel.from_bundle(bundle, lsp_model_dir, store=keystore)
    engine = CompletionEngine.monolithic(model, COMPLETION.engine_config())

    async def run():
        out = {lang: (await engine.complete(*_split(*DOCS[lang]), language=lang)).text for lang in DOCS}
        out[None] = (await engine.complete(*_split(*DOCS["python"]))).text  # no expert: the shared prompt only
        return out

    result = asyncio.run(run())
    model.router = AdapterRouter([AdapterRole(lang, "expert", lang) for lang in DOCS])  # the same, unshared
    unshared = asyncio.run(CompletionEngine.monolithic(model, COMPLETION.engine_config()).complete(
        *_split(*DOCS["python"]))).text
    assert unshared != result[None], "the shared prompt should change what an expert-less request completes"
    assert len({result["python"], result[None]}) == 2 or len(set(result.values())) > 2, \
        "the experts should change what the model completes"
    return result


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(bundle, lsp_model_dir, keystore, loopback_cloud):
    options = {"model": {"bundle": str(bundle), "dir": str(lsp_model_dir), "keyringService": keystore.service},
               "completion": {"maxTokens": COMPLETION.max_tokens, "multiline": True},
               "inline": EXACT_INLINE, "threads": 1}
    async with language_server(cloud_env(loopback_cloud.token)) as lsp_client:
        await lsp_client.initialize_session(initialize_params(through_cloud(options, loopback_cloud.base_url)))
        await lsp_client.statuses.wait_for("ready")
        yield lsp_client
        await lsp_client.shutdown_session()


def _open(client, uri: str, lang: str) -> None:
    editor_ids = {"python": "python", "go": "go", "java": "java"}
    client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
        uri=uri, language_id=editor_ids[lang], version=1, text=DOCS[lang][0])))


async def _inline(client, uri: str, lang: str) -> str:
    _, line, character = DOCS[lang]
    result = await client.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)))
    return result.items[0].insert_text if result.items else ""


async def test_lsp_concurrent_languages_equal_one_at_a_time(client: LanguageClient, expected):
    alone = {}
    for lang in DOCS:
        _open(client, f"file:///alone/{lang}", lang)
        alone[lang] = await _inline(client, f"file:///alone/{lang}", lang)
        status = client.statuses.items[-1]
        assert status["expert"] == lang, status  # umbra/status names the expert that served
        assert status["privacy"].startswith("NOIR ε=∞ · "), status  # the bundle's manifest: permuted ids, no noise
        assert status["privacyDetails"]["key"] == "eps=inf" and not status["privacyDetails"]["defended"]
    assert alone == {lang: expected[lang] for lang in DOCS}
    for round_ in range(2):
        uris = {lang: f"file:///together{round_}/{lang}" for lang in DOCS}
        for lang, uri in uris.items():
            _open(client, uri, lang)
        got = await asyncio.gather(*(_inline(client, uris[lang], lang) for lang in DOCS))
        assert dict(zip(DOCS, got)) == alone


async def test_http_concurrent_languages_with_aliases(bundle, lsp_model_dir, keystore, expected, loopback_cloud,
                                                     monkeypatch):
    monkeypatch.setenv(CLOUD_TOKEN_ENV, loopback_cloud.token)
    settings = LocalSettings(bundle=bundle, model_dir=lsp_model_dir, keyring_service=keystore.service, threads=1,
                             max_tokens=COMPLETION.max_tokens, multiline=True, cloud_url=loopback_cloud.base_url,
                             cloud_token_env=CLOUD_TOKEN_ENV)
    aliases = {"python": "py", "go": "golang", "java": "java"}
    with serving(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=180,
                                     headers={"Authorization": f"Bearer {API_TOKEN}"}) as http:
            async def ask(lang: str, session: str | None, alias: bool = False) -> dict:
                prefix, suffix = _split(*DOCS[lang])
                body = {"prefix": prefix, "suffix": suffix, "language": aliases[lang] if alias else lang}
                if session:
                    body["session"] = session
                r = await http.post("/v1/infill", json=body)
                assert r.status_code == 200, r.text
                return r.json()

            alone = {lang: await ask(lang, f"alone-{lang}") for lang in DOCS}
            assert {lang: r["completion"] for lang, r in alone.items()} == {lang: expected[lang] for lang in DOCS}
            assert all(r["expert"] == lang and r["language"] == lang for lang, r in alone.items())
            together = await asyncio.gather(*(ask(lang, f"together-{lang}", alias=True) for lang in DOCS))
            assert [r["completion"] for r in together] == [alone[lang]["completion"] for lang in DOCS]
            assert [r["expert"] for r in together] == list(DOCS)
            mixed = await asyncio.gather(*(ask(lang, None) for lang in DOCS for _ in range(2)))
            assert [r["completion"] for r in mixed] == [alone[lang]["completion"] for lang in DOCS for _ in range(2)]
            prefix, suffix = _split(*DOCS["python"])
            plain = await http.post("/v1/infill", json={"prefix": prefix, "suffix": suffix, "language": "rust"})
            assert plain.status_code == 200 and plain.json()["expert"] is None and plain.json()["language"] == "rust"
            none = await http.post("/v1/infill", json={"prefix": prefix, "suffix": suffix})
            assert none.json()["completion"] == expected[None] and none.json()["expert"] is None
