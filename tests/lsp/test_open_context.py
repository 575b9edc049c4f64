"""OpenContext (lsp/open_context.py): the language server's open documents as context, most
recently used first, the exclusions applied to their file paths, off by default, and thousands of
documents or odd ones giving less context, never an error."""

from __future__ import annotations

from lsprotocol import types

from lsp.documents import Documents
from lsp.open_context import OpenContext, uri_path
from lsp.options import ContextOptions

GEO = "def circle_area(radius):\n    return 3.14159 * radius * radius\n"
MAIN = "from geo import circle_area\n\n\ndef total(radii):\n    return sum(circle_area(r) for r in radii)\n"


def opened(docs: Documents, ctx: OpenContext, uri: str, text: str, language: str = "python") -> None:
    docs.open(types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text))
    ctx.touch(uri)


def test_uri_paths():
    assert uri_path("file:///home/me/a%20b.py") == "/home/me/a b.py"
    assert uri_path("untitled:Untitled-1") == "untitled:Untitled-1"


def test_off_by_default_and_on_it_uses_the_other_open_files(tmp_path):
    docs = Documents()
    root = tmp_path.as_uri()
    off = OpenContext(ContextOptions(), root)
    opened(docs, off, f"{root}/geo.py", GEO)
    opened(docs, off, f"{root}/main.py", MAIN)
    assert off.select(f"{root}/main.py", docs.get(f"{root}/main.py"), MAIN, docs) is None
    on = OpenContext(ContextOptions(enabled=True), root)
    for uri in (f"{root}/geo.py", f"{root}/main.py"):
        on.touch(uri)
    ctx = on.select(f"{root}/main.py", docs.get(f"{root}/main.py"), MAIN, docs)
    assert ctx.path == "main.py" and ctx.files == ("geo.py",)
    on.forget(f"{root}/geo.py")  # closed
    assert on.select(f"{root}/main.py", docs.get(f"{root}/main.py"), MAIN, docs) is None


def test_excluded_gitignored_and_secret_documents_are_never_used(tmp_path):
    (tmp_path / ".gitignore").write_text("build/\n")
    root = tmp_path.as_uri()
    docs, ctx = Documents(), OpenContext(ContextOptions(enabled=True, exclude=("**/*.pem", "vendor/**")), root)
    for name, text in (("cert.pem", GEO), ("vendor/geo.py", GEO), ("build/geo.py", GEO),
                       ("keys.py", GEO + 'STRIPE_KEY = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"\n'), ("geo.py", GEO)):
        opened(docs, ctx, f"{root}/{name}", text)
    opened(docs, ctx, f"{root}/main.py", MAIN)
    assert ctx.select(f"{root}/main.py", docs.get(f"{root}/main.py"), MAIN, docs).files == ("geo.py",)


def test_thousands_of_open_documents_read_only_the_most_recent(tmp_path):
    root = tmp_path.as_uri()
    docs, ctx = Documents(), OpenContext(ContextOptions(enabled=True), root)
    opened(docs, ctx, f"{root}/blob.py", "\x00" * 10)
    for i in range(3000):
        opened(docs, ctx, f"{root}/f{i}.py", f"def f{i}(radius):\n    return radius\n")
    opened(docs, ctx, f"{root}/main.py", MAIN)
    result = ctx.select(f"{root}/main.py", docs.get(f"{root}/main.py"), MAIN, docs)
    assert 0 < len(result.files) <= 5 and "blob.py" not in result.files
    assert all(int(name[1:-3]) >= 3000 - 64 for name in result.files)  # among the 64 most recently used
    # (at least one new document is scanned per selection, the most recent: f2999 here)


def test_lone_surrogates_in_another_document_become_replacement_characters(tmp_path):
    root = tmp_path.as_uri()
    docs, ctx = Documents(), OpenContext(ContextOptions(enabled=True), root)
    opened(docs, ctx, f"{root}/odd.py", "def circle_area(radius):\n    name = '\ud800'\n")
    opened(docs, ctx, f"{root}/main.py", MAIN)
    result = ctx.select(f"{root}/main.py", docs.get(f"{root}/main.py"), MAIN, docs)
    assert result.files == ("odd.py",) and "\ufffd" in result.snippets[0].text
    result.snippets[0].text.encode("utf-8")  # what a tokenizer needs


def test_imported_files_on_disk_lend_context_the_open_version_first(tmp_path):
    """main.py imports geo (on disk, not open): its snippet is in the context; once geo.py is open
    with other text, that text is used, not the file's."""
    (tmp_path / "geo.py").write_text(GEO)
    root = tmp_path.as_uri()
    docs, ctx = Documents(), OpenContext(ContextOptions(enabled=True), root)
    opened(docs, ctx, f"{root}/main.py", MAIN)
    result = ctx.select(f"{root}/main.py", docs.get(f"{root}/main.py"), MAIN, docs)
    assert result.files == ("geo.py",) and result.snippets[0].text == GEO
    edited = GEO.replace("3.14159", "math.pi")
    opened(docs, ctx, f"{root}/geo.py", edited)
    result = ctx.select(f"{root}/main.py", docs.get(f"{root}/main.py"), MAIN, docs)
    assert result.files == ("geo.py",) and result.snippets[0].text == edited


def test_imported_files_excluded_ignored_secret_or_outside_are_never_used(tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    for folder in ("vendor", "build", "lib"):
        (ws / folder).mkdir(parents=True)
    outside.mkdir()
    (ws / ".gitignore").write_text("build/\n")
    (ws / "vendor" / "geo.py").write_text(GEO)
    (ws / "build" / "geo.py").write_text(GEO)
    (ws / "lib" / "keys.py").write_text(GEO + 'STRIPE_KEY = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"\n')
    (outside / "far.py").write_text(GEO)
    (ws / "far.py").symlink_to(outside / "far.py")
    text = "import vendor.geo\nimport build.geo\nimport lib.keys\nimport far\n" + MAIN
    root = ws.as_uri()
    docs, ctx = Documents(), OpenContext(ContextOptions(enabled=True, exclude=("vendor/**",)), root)
    opened(docs, ctx, f"{root}/main.py", text)
    assert ctx.select(f"{root}/main.py", docs.get(f"{root}/main.py"), text, docs) is None
