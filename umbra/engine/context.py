"""Context from open files: snippets of the other documents the developer has open, put in
front of the prompt (the session runs them on the prefix's private path: they are more prefix).

    provider = ContextProvider(ContextConfig(enabled=True), ContextExclusions(root=workspace))
    context = provider.select(OpenFile(path, text, "python"), prefix, others)   # RepoContext
    await session.complete(prefix, suffix, context=context)

Which snippets (`select`): the other documents that `ContextExclusions` allows (never excluded,
.gitignored, secret-bearing, binary or huge: context_exclusions.py), of the `max_candidates`
most recently used; ranked first by whether the current file imports them (Python `import a.b`
/ `from a.b import c` / relative imports, Go import paths, Java imports, matched against the
documents' paths), then same language, then the best identifier Jaccard similarity between a
sliding window of `window_lines` lines of theirs and the lines above the cursor (as
neighbouring-tab systems do), then recency. Each file lends its best window; files are taken in
rank order while the character budget (`tokens` x 3) lasts, at most `max_files`.

Stable across keystrokes: the query is the `window_lines` whole lines above the start of the
cursor's band of `window_lines // 2` lines, so typing inside a band (even a new line within it)
selects the same snippets and the prompt's context tokens stay cached; the selection changes
when another document changes or the cursor leaves its band. `ContextProvider` memoises it.

Layout (`render_*`, chosen by the session from the tokenizer): models trained on repository
sequences (umbra/training/repo_units.py, the deep default model; StarCoder2, Qwen2.5-Coder) read
`<file_sep>path\\ntext` per file, then `<file_sep>current_path\\n` and the FIM prompt of the
current file. A tokenizer without a file separator (the embedded tiny model, trained on single
files) gets the snippets as comments at the top of the prefix (`# Path: a/b.py` and the
commented lines, `//` for C-like languages), as Copilot does for such models."""

from __future__ import annotations

import posixpath
import re
import time
from dataclasses import dataclass

from umbra.engine.context_exclusions import ContextExclusions
from umbra.errors import ConfigError

CHARS_PER_TOKEN = 3  # budget estimate (code, commented); the session fits the context in tokens exactly
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PY_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[\w \t,.*]+)|import[ \t]+([\w. \t,]+))",
                        re.M)
_GO_IMPORT = re.compile(r'"([\w.\-/]+)"')
_GO_BLOCK = re.compile(r"^\s*import\s*(?:\(([^)]*)\)|(?:\w+\s+)?(\"[^\"]+\"))", re.M)
_JAVA_IMPORT = re.compile(r"^\s*import\s+(?:static\s+)?([\w.]+?)(\.\*)?\s*;", re.M)
_HASH_COMMENT = frozenset({"python", "shell", "ruby", "r", "perl", "yaml", "toml", "makefile", "dockerfile"})


@dataclass(frozen=True)
class ContextConfig:
    enabled: bool = False  # off until the line benchmark shows it raises accepted lines (docs/benchmarks.md)
    tokens: int = 384  # most prompt tokens of context (the session also caps it at half the prompt)
    max_files: int = 5  # most files that lend a snippet
    window_lines: int = 20  # lines of a snippet and of the query above the cursor
    max_candidates: int = 64  # only the most recently used documents are considered
    # Milliseconds one selection may spend scanning documents not seen before (the secret scan
    # reads ~5 MB/s); at least one is scanned per selection, the rest wait for the next keystrokes.
    scan_ms: float = 50.0

    def validate(self) -> ContextConfig:
        if self.tokens < 1 or self.max_files < 1 or self.max_candidates < 1 or self.scan_ms < 0:
            raise ConfigError("context tokens, max_files and max_candidates must be >= 1, scan_ms >= 0")
        if self.window_lines < 2:
            raise ConfigError(f"context window_lines must be >= 2, got {self.window_lines}")
        return self


@dataclass(frozen=True)
class OpenFile:
    path: str  # absolute path (or the editor's name of an unsaved buffer)
    text: str
    language: str | None = None  # canonical language name
    used: float = 0.0  # when the developer last used it (larger: more recent)


@dataclass(frozen=True)
class Snippet:
    path: str  # header path: relative to the workspace root when inside it
    text: str  # whole lines, ending with a newline


@dataclass(frozen=True)
class RepoContext:
    path: str  # the current file's header path
    language: str | None  # the current file's language (picks the comment syntax)
    snippets: tuple[Snippet, ...]  # least relevant first: the most relevant sits next to the prefix
    tokens: int  # the context's token budget

    @property
    def files(self) -> tuple[str, ...]:
        """The paths of the files used (what the audit lists; never their text)."""
        return tuple(s.path for s in self.snippets)


def identifiers(text: str) -> frozenset[str]:
    return frozenset(_IDENT.findall(text))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def query_lines(prefix: str, window: int) -> tuple[int, str]:
    """(band, query): the cursor's band of window // 2 lines and the `window` whole lines above it."""
    line = prefix.count("\n")
    band = line // max(1, window // 2)
    start = band * max(1, window // 2)
    lines = prefix.split("\n")[:start]
    return band, "\n".join(lines[-window:])


def windows(text: str, window: int) -> tuple[list[str], list[tuple[int, frozenset[str]]]]:
    """(lines, [(first line, identifiers)] of each window of `window` lines, stride window // 2)."""
    lines = text.split("\n")
    starts = range(0, max(1, len(lines) - window + 1), max(1, window // 2))
    return lines, [(start, identifiers("\n".join(lines[start:start + window]))) for start in starts]


def best_window(text: str, query: frozenset[str], window: int, split=None) -> tuple[float, str]:
    """(similarity, snippet): the window of `window` lines (stride window // 2) most like the
    query; `split`: `windows(text, window)` if already computed."""
    lines, spans = split or windows(text, window)
    best, at = -1.0, 0
    for start, words in spans:
        score = jaccard(words, query)
        if score > best:
            best, at = score, start
    chunk = "\n".join(lines[at:at + window]).rstrip("\n")
    return max(best, 0.0), chunk + "\n" if chunk else ""


def imported_modules(text: str, language: str | None) -> tuple[str, ...]:
    """Path fragments of what `text` imports ('a/b' for Python `a.b`, Go's path, Java's package
    path or class path); relative Python imports start with './' or '../'."""
    found: list[str] = []
    if language == "python":
        for m in _PY_IMPORT.finditer(text):
            if m.group(3):
                found += [n.split()[0].replace(".", "/") for n in m.group(3).split(",") if n.split()]
            else:
                mod, names = m.group(1), m.group(2)
                dots = len(mod) - len(mod.lstrip("."))
                base = mod[dots:].replace(".", "/")
                rel = ("./" if dots == 1 else "../" * (dots - 1)) if dots else ""
                found.append(rel + base if base else rel.rstrip("/"))
                for name in re.findall(r"\w+", names):  # `from a import b` may name module a/b
                    found.append(rel + (base + "/" if base else "") + name)
    elif language == "go":
        for m in _GO_BLOCK.finditer(text):
            found += _GO_IMPORT.findall(m.group(1) or m.group(2) or "")
    elif language == "java":
        found += [m.group(1).replace(".", "/") for m in _JAVA_IMPORT.finditer(text)]
    return tuple(dict.fromkeys(f for f in found if f))


def _imports(candidate: str, current: str, modules: tuple[str, ...], language: str | None) -> bool:
    """Whether `candidate`'s path is one of `modules` imported by the file at `current`."""
    stem, _ = posixpath.splitext(candidate)
    folder = posixpath.dirname(candidate)
    for mod in modules:
        if mod.startswith("."):  # relative to the current file's folder
            mod = posixpath.normpath(posixpath.join(posixpath.dirname(current), mod))
            if stem == mod or (stem.endswith("/__init__") and posixpath.dirname(stem) == mod):
                return True
            continue
        for target in (stem, folder):  # a module or class file, or a package folder (Java *)
            if target == mod or target.endswith("/" + mod):
                return True
        if language == "go" and folder and (mod == folder or mod.endswith("/" + folder)):
            return True  # a Go import path ends with the package's folder inside its module
        if stem.endswith("/__init__") and (posixpath.dirname(stem).endswith("/" + mod)):
            return True
    return False


def relative(path: str, root: str | None) -> str:
    path = path.replace("\\", "/")
    if root and path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1:]
    return path


class ContextProvider:
    """Selects the context of a completion (see the module), memoised per document, band and set
    of other documents."""

    def __init__(self, config: ContextConfig, exclusions: ContextExclusions | None = None):
        self.config = config.validate()
        self.exclusions = exclusions or ContextExclusions()
        self._memo: dict[str, tuple[tuple, RepoContext]] = {}  # current path -> (key, its context)
        self._windows: dict[tuple, tuple] = {}  # (path, len, hash) of a document version -> its windows

    def select(self, current: OpenFile, prefix: str, others: list[OpenFile]) -> RepoContext:
        cfg, root = self.config, self.exclusions.root
        here = relative(current.path, root)
        candidates = sorted((f for f in others if f.path != current.path), key=lambda f: -f.used)
        candidates = candidates[:cfg.max_candidates]
        band, query = query_lines(prefix, cfg.window_lines)
        key = (band, hash(query), current.language, tuple((f.path, len(f.text), hash(f.text)) for f in candidates))
        memo = self._memo.get(current.path)
        if memo is not None and memo[0] == key:
            return memo[1]
        snippets, complete = self._snippets(current, here, query, candidates)
        context = RepoContext(here, current.language, snippets, cfg.tokens)
        if complete:  # else the next selection scans more documents (and may differ)
            if len(self._memo) >= 256:
                del self._memo[next(iter(self._memo))]
            self._memo[current.path] = (key, context)
        return context

    def _split(self, f: OpenFile) -> tuple:
        """The document's windows, computed once per version of its text."""
        key = (f.path, len(f.text), hash(f.text))
        if key not in self._windows:
            if len(self._windows) >= 4 * self.config.max_candidates:
                del self._windows[next(iter(self._windows))]
            self._windows[key] = windows(f.text, self.config.window_lines)
        return self._windows[key]

    def _snippets(self, current: OpenFile, here: str, query: str, candidates: list[OpenFile]
                  ) -> tuple[tuple[Snippet, ...], bool]:
        """(snippets, whether every candidate was scanned: see ContextConfig.scan_ms)."""
        cfg = self.config
        words = identifiers(query)
        modules = imported_modules(current.text, current.language)
        ranked, scanned, complete = [], 0, True
        deadline = time.perf_counter() + cfg.scan_ms / 1000
        for rank, f in enumerate(candidates):
            if not self.exclusions.known(f.path, f.text):
                if scanned and time.perf_counter() > deadline:
                    complete = False
                    continue
                scanned += 1
            if self.exclusions.reason(f.path, f.text) is not None:
                continue
            path = relative(f.path, self.exclusions.root)
            score, text = best_window(f.text, words, cfg.window_lines, self._split(f))
            if text.strip():
                key = (_imports(path, here, modules, current.language), f.language == current.language, round(score, 4), -rank)
                ranked.append((key, Snippet(path, text)))
        ranked.sort(key=lambda r: r[0], reverse=True)
        chosen, left = [], cfg.tokens * CHARS_PER_TOKEN
        for _, snippet in ranked:
            cost = len(snippet.path) + len(snippet.text) + 2
            if cost <= left:
                chosen.append(snippet)
                left -= cost
            if len(chosen) == cfg.max_files:
                break
        return tuple(reversed(chosen)), complete


def comment_prefix(language: str | None) -> str:
    return "#" if language in _HASH_COMMENT else "//"


def render_comments(snippet: Snippet, language: str | None) -> str:
    """A snippet as comment lines (the layout for models without a file separator)."""
    mark = comment_prefix(language)
    body = "".join(f"{mark} {line}".rstrip() + "\n" for line in snippet.text.rstrip("\n").split("\n"))
    return f"{mark} Path: {snippet.path}\n{body}"
