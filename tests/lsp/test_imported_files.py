"""ImportedFiles (lsp/imported_files.py): the workspace files a document imports, found on disk
where Python, Go and Java put them; never outside the workspace (symlinks and `..` included),
never an excluded or .gitignored one; huge, binary, non-UTF-8 files and thousands of imports give
less, never an error."""

from __future__ import annotations

import os

from lsp.imported_files import ImportedFiles, ImportLimits
from umbra.engine.context_exclusions import ContextExclusions


def write(root, rel: str, text: str | bytes) -> str:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return str(path)


def found(root, current: str, text: str, language: str, globs=(), limits=ImportLimits()) -> list[str]:
    files = ImportedFiles(str(root), ContextExclusions(tuple(globs), str(root)), limits)
    return [os.path.relpath(p, root) for p, _ in files.find(str(root / current), text, language)]


def test_python_modules_packages_and_relative_imports(tmp_path):
    write(tmp_path, "geo.py", "def area(r):\n    return r * r\n")
    write(tmp_path, "shapes/__init__.py", "from .circle import Circle\n")
    write(tmp_path, "shapes/circle.py", "class Circle:\n    pass\n")
    write(tmp_path, "app/util.py", "def helper():\n    pass\n")
    write(tmp_path, "src/lib/core.py", "VALUE = 1\n")
    text = "import os\nimport geo\nfrom shapes import circle\nfrom .util import helper\nfrom lib.core import VALUE\n"
    write(tmp_path, "app/main.py", text)
    assert found(tmp_path, "app/main.py", text, "python") == [
        "geo.py", "shapes/__init__.py", "shapes/circle.py", "app/util.py", "src/lib/core.py"]
    texts = dict(ImportedFiles(str(tmp_path), ContextExclusions((), str(tmp_path))).find(
        str(tmp_path / "app/main.py"), text, "python"))
    assert texts[str(tmp_path / "geo.py")] == "def area(r):\n    return r * r\n"


def test_go_packages_of_the_module_but_not_their_tests(tmp_path):
    write(tmp_path, "go.mod", "module example.com/app\n\ngo 1.22\n")
    write(tmp_path, "shapes/area.go", "package shapes\n\nfunc Area(r float64) float64 { return r * r }\n")
    write(tmp_path, "shapes/area_test.go", "package shapes\n")
    text = 'package main\n\nimport (\n\t"fmt"\n\t"example.com/app/shapes"\n)\n'
    write(tmp_path, "cmd/main.go", text)
    assert found(tmp_path, "cmd/main.go", text, "go") == ["shapes/area.go"]


def test_java_classes_and_packages_under_the_source_root(tmp_path):
    write(tmp_path, "src/main/java/com/acme/geo/Circle.java", "package com.acme.geo;\npublic class Circle {}\n")
    write(tmp_path, "src/main/java/com/acme/util/Strings.java", "package com.acme.util;\npublic class Strings {}\n")
    text = "package com.acme.app;\n\nimport com.acme.geo.Circle;\nimport com.acme.util.*;\nimport java.util.List;\n"
    write(tmp_path, "src/main/java/com/acme/app/Main.java", text)
    assert found(tmp_path, "src/main/java/com/acme/app/Main.java", text, "java") == [
        "src/main/java/com/acme/geo/Circle.java", "src/main/java/com/acme/util/Strings.java"]


def test_never_outside_the_workspace(tmp_path):
    root, outside = tmp_path / "ws", tmp_path / "outside"
    write(outside, "secret_mod.py", "X = 1\n")
    write(outside, "near.py", "Y = 2\n")
    root.mkdir()
    os.symlink(outside / "secret_mod.py", root / "linked.py")  # a symlink out of the workspace
    os.symlink(outside, root / "pkg")  # a folder symlinked out
    text = "import linked\nimport pkg.near\nfrom ..outside import near\n"
    write(root, "main.py", text)
    assert found(root, "main.py", text, "python") == []
    write(outside, "elsewhere.py", "import near\n")  # the current file outside: nothing read
    assert found(root, "../outside/elsewhere.py", "import near\n", "python") == []
    files = ImportedFiles(None, ContextExclusions())  # no workspace: nothing read
    assert files.find(str(outside / "elsewhere.py"), "import near\n", "python") == []
    assert ImportedFiles(str(root), ContextExclusions()).find("untitled:Untitled-1", "import main\n", "python") == []


def test_excluded_and_gitignored_files_are_never_read(tmp_path):
    write(tmp_path, ".gitignore", "build/\n")
    for rel in ("vendor/geo.py", "build/shapes.py", "secrets/keys.py", "ok.py"):
        write(tmp_path, rel, "A = 1\n")
    text = "import vendor.geo\nimport build.shapes\nimport secrets.keys\nimport ok\n"
    write(tmp_path, "main.py", text)
    assert found(tmp_path, "main.py", text, "python", globs=("vendor/**", "**/secrets/**")) == ["ok.py"]


def test_odd_files_and_thousands_of_imports_give_less_never_an_error(tmp_path):
    write(tmp_path, "huge.py", "x = 1\n" * 50_000)
    write(tmp_path, "blob.py", b"\x00\x01binary")
    write(tmp_path, "latin.py", "caf\xe9 = 1\n".encode("latin-1"))
    write(tmp_path, "fine.py", "A = 1\n")
    text = "import huge\nimport blob\nimport latin\nimport fine\n"
    assert found(tmp_path, "main.py", text, "python") == ["fine.py"]
    for i in range(40):
        write(tmp_path, f"m{i}.py", f"V{i} = {i}\n")
    many = "".join(f"import m{i}\n" for i in range(3000))
    got = found(tmp_path, "main.py", many, "python", limits=ImportLimits(max_files=8, max_probes=64))
    assert 0 < len(got) <= 8
    assert found(tmp_path, "main.py", "import (\n", "go") == [] and found(tmp_path, "main.py", "\udcff", "python") == []
