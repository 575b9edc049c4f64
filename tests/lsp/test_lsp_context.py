"""Context from open documents through the real language server (`python -m lsp` over stdio, the
module's cloud on loopback, `loopback_cloud`): with `context.enabled` an editor completion takes snippets of the other open
documents of the workspace, never from one the exclusion globs match, the workspace's .gitignore
ignores or that holds a secret; a document closed lends nothing. The item's `data.contextFiles`
counts the files in the prompt."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio
from lsp_helpers import EXACT_INLINE, cloud_env, initialize_params, language_server, open_document, through_cloud
from lsprotocol import types
from pytest_lsp import LanguageClient

pytestmark = [pytest.mark.asyncio(loop_scope="module"),
              pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")]

GEO = "def circle_area(radius):\n    return 3.14159 * radius * radius\n"
MAIN = "from geo import circle_area\n\n\ndef total(radii):\n    return sum(circle_area(r) for r in radii)\n"
WORKSPACE: dict[str, Path] = {}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(lsp_model_dir, tmp_path_factory, loopback_cloud):
    root = WORKSPACE["root"] = tmp_path_factory.mktemp("workspace")
    (root / ".gitignore").write_text("build/\n")
    options = {"model": {"dir": str(lsp_model_dir)}, "completion": {"maxTokens": 8, "multiline": False},
               "inline": EXACT_INLINE, "threads": 1,
               "context": {"enabled": True, "exclude": ["**/*.pem", "vendor/**"]}}
    async with language_server(cloud_env(loopback_cloud.token)) as lsp_client:
        await lsp_client.initialize_session(initialize_params(through_cloud(options, loopback_cloud.base_url), root))
        await lsp_client.statuses.wait_for("ready")
        yield lsp_client
        await lsp_client.shutdown_session()


def _completion(uri: str, line: int, character: int) -> types.CompletionParams:
    return types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri),
                                  position=types.Position(line=line, character=character))


async def test_only_allowed_open_documents_lend_context(client: LanguageClient):
    root = WORKSPACE["root"].as_uri()
    for name, text in (("cert.pem", GEO), ("vendor/geo.py", GEO), ("build/geo.py", GEO),
                       ("keys.py", GEO + 'GITHUB_TOKEN = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"\n')):
        open_document(client, f"{root}/{name}", text)
    open_document(client, f"{root}/main.py", MAIN)
    result = await client.text_document_completion_async(_completion(f"{root}/main.py", 4, 11))
    assert result.items == [] or result.items[0].data["contextFiles"] == 0  # nothing allowed is open
    _close(client, f"{root}/main.py")
    open_document(client, f"{root}/geo.py", GEO)
    open_document(client, f"{root}/main2.py", MAIN)
    with_geo = (await client.text_document_completion_async(_completion(f"{root}/main2.py", 4, 11))).items[0]
    assert with_geo.data["contextFiles"] == 1  # geo.py alone
    _close(client, f"{root}/geo.py")
    _close(client, f"{root}/main2.py")
    open_document(client, f"{root}/main3.py", MAIN)
    closed = (await client.text_document_completion_async(_completion(f"{root}/main3.py", 4, 11))).items
    assert closed == [] or closed[0].data["contextFiles"] == 0
    assert closed == [] or closed[0].data["promptTokens"] < with_geo.data["promptTokens"]


def _close(client: LanguageClient, uri: str) -> None:
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))


async def test_files_the_document_imports_lend_context_from_disk(client: LanguageClient):
    """Files on disk that the document imports, never opened, lend context too; the globs the
    extension forwards (its umbra.exclude as `context.exclude`, the fixture's options) and the
    workspace's .gitignore apply to them as to open documents."""
    root = WORKSPACE["root"]
    (root / "vendor").mkdir(exist_ok=True)
    (root / "build").mkdir(exist_ok=True)
    (root / "shapes.py").write_text("def square_area(side):\n    return side * side\n")
    (root / "vendor" / "tri.py").write_text("def tri_area(b, h):\n    return b * h / 2\n")
    (root / "build" / "poly.py").write_text("def poly_area(n):\n    return n\n")
    text = "import vendor.tri\nimport build.poly\nfrom shapes import square_area\n\n\ndef total(sides):\n    return sum(\n"
    counts = []
    for name, source in (("calc.py", text), ("calc2.py", text.replace("from shapes import", "from nowhere import"))):
        uri = f"{root.as_uri()}/{name}"
        open_document(client, uri, source)
        try:
            items = (await client.text_document_completion_async(_completion(uri, 6, 15))).items
            assert items, name
            counts.append(items[0].data["contextFiles"])
        finally:
            _close(client, uri)
    # shapes.py, only where it is imported (any other documents still open count in both);
    # vendor/tri.py (excluded) and build/poly.py (.gitignored) in neither
    assert counts[0] == counts[1] + 1, counts
