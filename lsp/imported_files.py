"""The files on disk that the document being completed imports, as context beside the open
documents (lsp/open_context.py): resolved inside the workspace only, bounded, read once per version.

    files = ImportedFiles(root, exclusions)                 # root: the workspace folder (None: none)
    files.find("/ws/app/main.py", text, "python")           # [(path, text)] of what it imports

What `text` imports is umbra/engine/context.py's `imported_modules` (Python `import a.b`,
`from . import c`, Go import paths, Java imports); each is looked for where the language puts it:

* Python: `a/b.py` or `a/b/__init__.py` next to the current file, at the workspace root or under
  `src/`; a relative import from the current file's folder.
* Go: the folder of an import path under the module that the root's `go.mod` names (its `.go`
  files but tests).
* Java: `a/b/C.java` (or the `.java` files of a package, for `a.b.*`) under the source root the
  current file's `package` line gives, the workspace root, `src/main/java` or `src`.

Never outside the workspace: a candidate whose real path (symlinks followed) leaves the root is
not read, nor is the current file outside it or a workspace-less server's. Never an excluded or
.gitignored file (checked by path before reading; the provider checks secrets and the rest again).
Bounds: at most `max_files` files, each at most `max_bytes`, at most `max_probes` paths looked at
per completion; a file that is not UTF-8, binary or unreadable is skipped. Nothing here raises:
an odd workspace gives less context, never an error."""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass

from umbra.engine.context import imported_modules
from umbra.engine.context_exclusions import ContextExclusions

_GO_MODULE = re.compile(r"^\s*module\s+(\S+)", re.M)
_JAVA_PACKAGE = re.compile(r"^\s*package\s+([\w.]+)\s*;", re.M)


@dataclass(frozen=True)
class ImportLimits:
    max_files: int = 8  # imported files read per completion
    max_bytes: int = 200_000  # a larger file is not read (the exclusions' max_chars)
    max_probes: int = 64  # paths looked at (stat) per completion
    max_package_files: int = 8  # files of one Go or Java package folder


class ImportedFiles:
    def __init__(self, root: str | None, exclusions: ContextExclusions, limits: ImportLimits = ImportLimits()):
        self.real_root = os.path.realpath(root) if root else None  # what "inside" means
        self.root = exclusions.root if exclusions.root else (os.path.abspath(root) if root else None)  # paths' form
        self.exclusions = exclusions
        self.limits = limits
        self._texts: dict[str, tuple[tuple[int, int], str | None]] = {}  # path -> ((mtime, size), text)
        self._go_module: tuple[tuple[int, int], str | None] | None = None

    def find(self, path: str, text: str, language: str | None) -> list[tuple[str, str]]:
        """[(path, text)] of the workspace files `text` (the file at `path`) imports."""
        if self.root is None or not posixpath.isabs(path) or not self._inside(os.path.realpath(path)):
            return []
        try:
            modules = imported_modules(text, language)
        except Exception:  # noqa: BLE001 — a regex on odd text: no imports
            return []
        out: list[tuple[str, str]] = []
        probes = [0]
        for candidate in self._candidates(path, text, modules, language, probes):
            if len(out) >= self.limits.max_files:
                break
            if candidate == path or any(candidate == p for p, _ in out):
                continue
            read = self._read(candidate)
            if read is not None:
                out.append((candidate, read))
        return out

    # -- where each language puts an import ------------------------------------------------------

    def _candidates(self, path: str, text: str, modules: tuple[str, ...], language: str | None, probes: list[int]):
        here = posixpath.dirname(path)
        for mod in modules:
            if language == "python":
                if mod.startswith("."):
                    bases = [posixpath.normpath(posixpath.join(here, mod))]
                else:
                    bases = [posixpath.join(d, mod) for d in dict.fromkeys((here, self.root, posixpath.join(self.root, "src")))]
                for base in bases:
                    yield from self._files(probes, base + ".py", posixpath.join(base, "__init__.py"))
            elif language == "go":
                module = self._module()
                if module and (mod == module or mod.startswith(module + "/")):
                    yield from self._package(probes, posixpath.join(self.root, mod[len(module):].lstrip("/")), ".go")
            elif language == "java":
                for src in self._java_roots(here, text):
                    yield from self._files(probes, posixpath.join(src, mod) + ".java")
                    yield from self._package(probes, posixpath.join(src, mod), ".java")

    def _java_roots(self, here: str, text: str) -> list[str]:
        roots = []
        package = _JAVA_PACKAGE.search(text)
        if package:
            tail = "/" + package.group(1).replace(".", "/")
            if here.endswith(tail):
                roots.append(here[:-len(tail)])
        roots += [self.root, posixpath.join(self.root, "src", "main", "java"), posixpath.join(self.root, "src")]
        return list(dict.fromkeys(roots))

    def _files(self, probes: list[int], *paths: str):
        for p in paths:
            if probes[0] >= self.limits.max_probes:
                return
            probes[0] += 1
            if os.path.isfile(p):
                yield p

    def _package(self, probes: list[int], folder: str, ext: str):
        if probes[0] >= self.limits.max_probes or not os.path.isdir(folder):
            return
        probes[0] += 1
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(ext) and not n.endswith("_test.go"))
        except OSError:
            return
        yield from self._files(probes, *(posixpath.join(folder, n) for n in names[:self.limits.max_package_files]))

    def _module(self) -> str | None:
        """The module path the root's go.mod names (re-read when it changes)."""
        gomod = posixpath.join(self.root, "go.mod")
        try:
            st = os.stat(gomod)
        except OSError:
            return None
        stamp = (st.st_mtime_ns, st.st_size)
        if self._go_module is None or self._go_module[0] != stamp:
            text = self._read(gomod) or ""
            found = _GO_MODULE.search(text)
            self._go_module = (stamp, found.group(1) if found else None)
        return self._go_module[1]

    # -- reading, inside the workspace only ------------------------------------------------------

    def _inside(self, real: str) -> bool:
        return real == self.real_root or real.startswith(self.real_root.rstrip("/") + "/")

    def _read(self, path: str) -> str | None:
        """The file's text, or None: outside the workspace (its real path), excluded, ignored,
        too large, not UTF-8, binary or unreadable."""
        try:
            real = os.path.realpath(path)
            if not self._inside(real) or self.exclusions.excluded(path) or self.exclusions.excluded(real):
                return None
            if self.exclusions.ignored(path) or self.exclusions.ignored(real):
                return None
            st = os.stat(real)
            stamp = (st.st_mtime_ns, st.st_size)
            cached = self._texts.get(real)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            text = None
            if st.st_size <= self.limits.max_bytes:
                with open(real, "rb") as f:
                    data = f.read(self.limits.max_bytes + 1)
                try:
                    decoded = data.decode("utf-8")
                    text = decoded if len(data) <= self.limits.max_bytes and "\x00" not in decoded else None
                except UnicodeDecodeError:
                    text = None
            if len(self._texts) >= 256:
                del self._texts[next(iter(self._texts))]
            self._texts[real] = (stamp, text)
            return text
        except (OSError, ValueError):
            return None
