"""ContextProvider: which other open files lend snippets (imports, language, similarity,
recency, the budget), that the choice stays put while typing, the exclusions, and that
thousands of documents or odd ones give less context, never an error."""

from __future__ import annotations

import pytest

from umbra.engine.context import (ContextConfig, ContextProvider, OpenFile, best_window, imported_modules,
                                  query_lines, render_comments)
from umbra.engine.context_exclusions import ContextExclusions
from umbra.errors import ConfigError

ROOT = "/ws"
GEOMETRY = "def circle_area(radius):\n    return PI * radius * radius\n\n\ndef square_area(side):\n    return side * side\n"
UNRELATED = "def parse_header(line):\n    key, value = line.split(':', 1)\n    return key.strip(), value\n"
CURRENT = "from shapes.geometry import circle_area\n\n\ndef total(radii):\n    return sum(circle_area(r) for r in radii)\n\n"


def provider(**kw) -> ContextProvider:
    kw.setdefault("scan_ms", 600_000.0)  # every candidate scanned at once (scan_ms has its own test)
    return ContextProvider(ContextConfig(enabled=True, **kw), ContextExclusions((), root=ROOT, secrets=True))


def current(text=CURRENT, path="/ws/app/main.py", language="python") -> OpenFile:
    return OpenFile(path, text, language, used=10)


def test_imported_modules_per_language():
    assert imported_modules("import os.path, json\nfrom .util import helper\nfrom ..core import x\n", "python") == (
        "os/path", "json", "./util", "./util/helper", "../core", "../core/x")
    assert imported_modules('import (\n\t"fmt"\n\tm "github.com/acme/app/models"\n)\nimport "strings"\n', "go") == (
        "fmt", "github.com/acme/app/models", "strings")
    assert imported_modules("import com.acme.model.User;\nimport static com.acme.util.Strings.pad;\n"
                            "import com.acme.io.*;\n", "java") == (
        "com/acme/model/User", "com/acme/util/Strings/pad", "com/acme/io")


def test_imported_files_come_first_then_same_language_then_similarity():
    others = [OpenFile("/ws/shapes/geometry.py", GEOMETRY, "python", used=1),  # imported, oldest
              OpenFile("/ws/net/http.py", UNRELATED, "python", used=5),
              OpenFile("/ws/net/Area.java", "class Area { double circle_area(double radius) {} }\n", "java", used=9)]
    ctx = provider().select(current(), CURRENT, others)
    assert ctx.path == "app/main.py"
    assert ctx.files[-1] == "shapes/geometry.py"  # most relevant last, next to the current file
    assert ctx.files == ("net/Area.java", "net/http.py", "shapes/geometry.py")


def test_go_and_java_imports_match_open_files():
    go = 'package main\n\nimport "github.com/acme/app/models"\n\nfunc main() {\n'
    others = [OpenFile("/ws/models/user.go", "package models\n\ntype User struct{}\n", "go", 1),
              OpenFile("/ws/other/x.go", "package other\n\nfunc main() {\n}\n", "go", 2)]
    assert provider(max_files=1).select(current(go, "/ws/cmd/main.go", "go"), go, others).files == ("models/user.go",)
    java = "import com.acme.model.User;\n\nclass App {\n"
    others = [OpenFile("/ws/src/com/acme/model/User.java", "class User {}\n", "java", 1),
              OpenFile("/ws/src/com/acme/App2.java", "class App {\n}\n", "java", 2)]
    assert provider(max_files=1).select(current(java, "/ws/src/App.java", "java"), java, others).files == (
        "src/com/acme/model/User.java",)


def test_budget_and_file_count_bound_the_context():
    others = [OpenFile(f"/ws/m{i}.py", GEOMETRY * 3, "python", used=i) for i in range(10)]
    assert len(provider(max_files=3).select(current(), CURRENT, others).snippets) == 3
    small = provider(tokens=130).select(current(), CURRENT, others)  # 390 characters: one snippet
    assert sum(len(s.text) + len(s.path) for s in small.snippets) <= 390 and len(small.snippets) == 1
    for s in provider().select(current(), CURRENT, others).snippets:
        assert s.text.endswith("\n") and s.text.count("\n") <= 20


def test_the_selection_stays_put_while_typing_in_the_cursor_band():
    p = provider(window_lines=4)
    others = [OpenFile("/ws/a.py", GEOMETRY, "python", 1), OpenFile("/ws/b.py", UNRELATED, "python", 2)]
    text = "import os\n" * 3 + "x = 1\n"
    first = p.select(current(text), text + "de", others)
    assert p.select(current(text + "def circ"), text + "def circ", others) is first  # same line
    assert query_lines(text + "def f():\n    ret", 4) == query_lines(text + "de", 4)  # a new line in the band
    changed = [OpenFile("/ws/a.py", GEOMETRY + "\n# edited\n", "python", 3), others[1]]
    assert p.select(current(text), text + "de", changed) is not first


def test_excluded_ignored_and_secret_files_are_never_used(tmp_path):
    (tmp_path / ".gitignore").write_text("dist/\n")
    root = str(tmp_path)
    p = ContextProvider(ContextConfig(enabled=True), ContextExclusions(("**/*.pem", "private/**"), root=root))
    others = [OpenFile(f"{root}/cert.pem", GEOMETRY, "python", 1),
              OpenFile(f"{root}/private/notes.py", GEOMETRY, "python", 2),
              OpenFile(f"{root}/dist/bundle.py", GEOMETRY, "python", 3),
              OpenFile(f"{root}/config.py", GEOMETRY + 'GITHUB_TOKEN = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"\n',
                       "python", 4),
              OpenFile(f"{root}/ok.py", GEOMETRY, "python", 5)]
    ctx = p.select(current(path=f"{root}/main.py"), CURRENT, others)
    assert ctx.files == ("ok.py",)


def test_thousands_of_documents_and_odd_ones_give_less_context_never_an_error():
    odd = [OpenFile("/ws/blob.bin", "\x00\x01" * 100, None, 1e9), OpenFile("/ws/huge.py", "x = 1\n" * 100_000, "python", 1e9),
           OpenFile("/ws/empty.py", "", "python", 1e9), OpenFile("/ws/latin.py", "caf\ufffd = 1\n", "python", 1e9)]
    many = [OpenFile(f"/ws/f{i}.py", f"def f{i}(radius):\n    return radius\n", "python", i) for i in range(3000)]
    ctx = provider(max_candidates=64).select(current(), CURRENT, odd + many)
    assert 0 < len(ctx.snippets) <= 5
    assert "blob.bin" not in ctx.files and "huge.py" not in ctx.files and "empty.py" not in ctx.files
    assert provider().select(current(), CURRENT, []).snippets == ()


def test_documents_not_seen_before_are_scanned_a_few_per_selection_until_all_are():
    p = provider(scan_ms=0.0)  # one new document per selection
    others = [OpenFile(f"/ws/g{i}.py", GEOMETRY + f"# {i}\n", "python", i) for i in range(3)]
    sizes = [len(p.select(current(), CURRENT, others).snippets) for _ in range(4)]
    assert sizes == [1, 2, 3, 3]
    assert p.select(current(), CURRENT, others) is p.select(current(), CURRENT, others)  # all seen: memoised


def test_best_window_and_comment_rendering():
    text = "\n".join(f"line_{i} = {i}" for i in range(50)) + "\n"
    score, chunk = best_window(text, frozenset({"line_30", "line_31"}), 10)
    assert score > 0 and "line_30" in chunk and chunk.count("\n") == 10
    ctx = provider().select(current(), CURRENT, [OpenFile("/ws/g.py", GEOMETRY, "python", 1)])
    rendered = render_comments(ctx.snippets[0], "python")
    assert rendered.startswith("# Path: g.py\n# def circle_area(radius):\n") and rendered.endswith("\n")
    assert render_comments(ctx.snippets[0], "go").startswith("// Path: g.py\n")


def test_bad_config_is_refused():
    with pytest.raises(ConfigError):
        ContextConfig(window_lines=1).validate()
    with pytest.raises(ConfigError):
        ContextConfig(tokens=0).validate()
    with pytest.raises(ConfigError):
        ContextConfig(scan_ms=-1).validate()
