"""Which open files may lend context to a prompt (context.py): never an excluded, ignored,
secret-bearing, binary or huge one.

    rules = ContextExclusions(globs=DEFAULT_EXCLUDE, root="/home/me/project")
    rules.reason("/home/me/project/.env", text)     # "excluded" | "gitignored" | "secret" | ... | None

* `globs`: the VS Code extension's `umbra.exclude` semantics (vscode-extension/src/exclusions.ts):
  a glob without `/` matches the file name anywhere (`*.pem`), one with `/` the absolute path or
  the path inside the workspace root (`**/secrets/**`); `**` crosses folders, dot files match.
  The extension never syncs such files; the server checks again for every other editor.
* `.gitignore`: the workspace root's and those of every folder down to the file, git's rules
  (`#` comments, `!` negation, a trailing `/` for folders, a `/` inside anchors the pattern to
  its .gitignore's folder, the last match wins, a file under an ignored folder is ignored).
  Files outside the root, and names that are not paths (an unsaved buffer), have no .gitignore.
* secrets: any span the scrubber's secret finder flags (umbra/scrub/secrets.py: detect-secrets'
  plugins, PEM blocks, credential rules) excludes the whole document.
* binary (a NUL character) and huge (over `max_chars`) documents are skipped unread.

Verdicts are cached per (path, text): the secret scan runs once per version of a document."""

from __future__ import annotations

import os
import posixpath
import re
from functools import lru_cache

from umbra.scrub.config import ScrubConfig
from umbra.scrub.secrets import SecretFinder

# The default of the extension's `umbra.exclude` (vscode-extension/src/exclusions.ts).
DEFAULT_EXCLUDE = (
    "**/.env", "**/.env.*", "**/*.env",
    "**/*.key", "**/*.pem", "**/*.p8", "**/*.p12", "**/*.pfx", "**/*.jks", "**/*.keystore",
    "**/id_rsa*", "**/id_dsa*", "**/id_ecdsa*", "**/id_ed25519*", "**/.ssh/**",
    "**/*.crt", "**/*.cer", "**/*.der",
)
_VERDICTS = 4096  # (path, text) verdicts kept (oldest dropped first)
_GITIGNORE_BYTES = 1 << 20  # a larger .gitignore is read no further


@lru_cache(maxsize=1024)
def glob_regex(glob: str) -> re.Pattern:
    """A glob as a regex over '/'-separated paths: `**` any folders, `*` and `?` within one."""
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and "]" in glob[i + 1:]:
            j = glob.index("]", i + 1)
            body = glob[i + 1:j].replace("\\", "\\\\")
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def _slashes(path: str) -> str:
    return path.replace("\\", "/")


class _Gitignore:
    """The patterns of one .gitignore: (regex, negated, folders only, anchored)."""

    def __init__(self, text: str):
        self.rules: list[tuple[re.Pattern, bool, bool, bool]] = []
        for line in text.splitlines():
            line = line.rstrip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            line = line[1:] if negated else line.replace("\\!", "!", 1)
            folders = line.endswith("/")
            line = line.rstrip("/")
            anchored = "/" in line
            if line:
                self.rules.append((glob_regex(line.lstrip("/")), negated, folders, anchored))

    def verdict(self, rel: str, is_folder: bool) -> bool | None:
        """True ignored, False re-included, None no pattern matches `rel` (relative to its folder)."""
        name = rel.rsplit("/", 1)[-1]
        result = None
        for regex, negated, folders, anchored in self.rules:
            if folders and not is_folder:
                continue
            if regex.match(rel if anchored else name):
                result = not negated
        return result


def _read_gitignore(folder: str) -> _Gitignore | None:
    try:
        with open(os.path.join(folder, ".gitignore"), encoding="utf-8", errors="replace") as f:
            return _Gitignore(f.read(_GITIGNORE_BYTES))
    except OSError:  # none there, or unreadable: no patterns
        return None


class ContextExclusions:
    def __init__(self, globs: tuple[str, ...] = DEFAULT_EXCLUDE, root: str | None = None,
                 max_chars: int = 200_000, secrets: bool = True):
        self.globs = tuple(_slashes(g) for g in globs)
        self.root = _slashes(os.path.abspath(root)).rstrip("/") if root else None
        self.max_chars = max_chars
        self._finder = SecretFinder(ScrubConfig()) if secrets else None
        self._gitignores: dict[str, _Gitignore | None] = {}  # folder -> its .gitignore (read once)
        self._verdicts: dict[tuple[str, int, int], str | None] = {}

    def known(self, path: str, text: str) -> bool:
        """Whether the verdict on this version of the document is cached (no scan needed)."""
        return (path, len(text), hash(text)) in self._verdicts

    def reason(self, path: str, text: str) -> str | None:
        """Why `path` with content `text` may not lend context, or None when it may."""
        key = (path, len(text), hash(text))
        if key in self._verdicts:
            return self._verdicts[key]
        verdict = self._reason(path, text)
        if len(self._verdicts) >= _VERDICTS:
            del self._verdicts[next(iter(self._verdicts))]
        self._verdicts[key] = verdict
        return verdict

    def _reason(self, path: str, text: str) -> str | None:
        if self.excluded(path):
            return "excluded"
        if len(text) > self.max_chars:
            return "too large"
        if "\x00" in text:
            return "binary"
        if self.ignored(path):
            return "gitignored"
        if self._finder is not None and next(iter(self._finder.find(text, path)), None) is not None:
            return "secret"
        return None

    def excluded(self, path: str) -> bool:
        """Whether a glob of `globs` matches the path (see the module)."""
        path = _slashes(path)
        candidates = [path]
        if self.root and path.startswith(self.root + "/"):
            candidates.append(path[len(self.root) + 1:])
        name = path.rsplit("/", 1)[-1]
        for glob in self.globs:
            regex = glob_regex(glob)
            if "/" not in glob:
                if regex.match(name):
                    return True
            elif any(regex.match(c) for c in candidates):
                return True
        return False

    def ignored(self, path: str) -> bool:
        """Whether the workspace's .gitignore files ignore `path` (see the module)."""
        path = _slashes(path)
        if not self.root or not path.startswith(self.root + "/"):
            return False
        parts = path[len(self.root) + 1:].split("/")
        if ".git" in parts[:-1]:
            return True
        for depth in range(len(parts)):  # each folder down to the file, then the file itself
            is_folder = depth < len(parts) - 1
            verdict = None
            for k in range(depth + 1):  # the .gitignore files at or above that entry, deepest last
                folder = posixpath.join(self.root, *parts[:k])
                if folder not in self._gitignores:
                    self._gitignores[folder] = _read_gitignore(folder)
                rules = self._gitignores[folder]
                if rules is not None:
                    v = rules.verdict("/".join(parts[k:depth + 1]), is_folder)
                    verdict = v if v is not None else verdict
            if verdict:
                return True
        return False
