"""Enumerate candidate source files of each language as (language, source, path, text) records.

Paths are namespaced by source so they are unique across the corpus, e.g.
`cpython-3.11/asyncio/tasks.py`, `pypi/flask-3.0.3/src/flask/app.py`, `go-1.19/sort/sort.go`,
`jdk-17/java.base/java/util/List.java`."""

from __future__ import annotations

import os
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from umbra.data import sources


@dataclass(frozen=True)
class SourceFile:
    lang: str  # "python" | "go" | "java"
    source: str  # source id, e.g. "cpython-3.11", "pypi/flask-3.0.3"
    path: str  # unique corpus path, prefixed by the source id
    text: str  # file content (decoded UTF-8, line endings untouched)


# Path components that mark a vendored copy of another project.
VENDORED_DIRS = frozenset({"vendor", "_vendor", "vendored", "_vendored", "third_party", "thirdparty",
                           "externals"})


def is_vendored(rel_path: str, skip_testdata: bool = False) -> bool:
    """True for a file inside a vendored copy (or, with `skip_testdata`, a Go `testdata/` tree)."""
    dirs = rel_path.split("/")[:-1]
    return any(d in VENDORED_DIRS or (skip_testdata and d == "testdata") for d in dirs)


def _decode(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def python_stdlib_files(root: str | None = None) -> Iterator[SourceFile]:
    """Every .py file of the interpreter's stdlib, excluding site-packages."""
    base = Path(root or sources.python_stdlib_root())
    source = f"cpython-{sys.version_info.major}.{sys.version_info.minor}"
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "__pycache__"))
        for name in sorted(filenames):
            if name.endswith(".py"):
                full = Path(dirpath) / name
                text = _decode(full.read_bytes())
                if text is not None:
                    rel = full.relative_to(base).as_posix()
                    yield SourceFile("python", source, f"{source}/{rel}", text)


def sdist_files(archive: Path, package: sources.PyPIPackage) -> Iterator[SourceFile]:
    """Every .py file inside a PyPI source distribution (.tar.gz or .zip)."""
    source = f"pypi/{package.name}-{package.version}"
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            names = sorted(n for n in zf.namelist() if n.endswith(".py"))
            for name in names:
                text = _decode(zf.read(name))
                if text is not None:
                    yield SourceFile("python", source, f"{source}/{_strip_top(name)}", text)
        return
    with tarfile.open(archive, "r:*") as tf:
        members = sorted((m for m in tf.getmembers() if m.isfile() and m.name.endswith(".py")),
                         key=lambda m: m.name)
        for member in members:
            handle = tf.extractfile(member)
            if handle is not None:
                text = _decode(handle.read())
                if text is not None:
                    yield SourceFile("python", source, f"{source}/{_strip_top(member.name)}", text)


def _strip_top(name: str) -> str:
    """Drop the archive's top-level `<name>-<version>/` directory."""
    parts = name.split("/", 1)
    return parts[1] if len(parts) == 2 else parts[0]


def go_files(root: str = sources.GO_SRC_ROOT) -> Iterator[SourceFile]:
    """Every .go file of the Go standard library, skipping testdata trees."""
    base = Path(root)
    source = "go-" + base.parent.name.split("-")[-1] if base.parent.name.startswith("go-") else "go"
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "testdata")
        for name in sorted(filenames):
            if name.endswith(".go"):
                full = Path(dirpath) / name
                text = _decode(full.read_bytes())
                if text is not None:
                    rel = full.relative_to(base).as_posix()
                    yield SourceFile("go", source, f"{source}/{rel}", text)


def java_files(src_zip: str = sources.JDK_SRC_ZIP) -> Iterator[SourceFile]:
    """Every .java file of the JDK class library (src.zip)."""
    source = "jdk-17"
    with zipfile.ZipFile(src_zip) as zf:
        for name in sorted(n for n in zf.namelist() if n.endswith(".java")):
            text = _decode(zf.read(name))
            if text is not None:
                yield SourceFile("java", source, f"{source}/{name}", text)
