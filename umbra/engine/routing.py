"""Routing a request to its adapters: the document's language picks the expert (NOESIS's
deterministic routing by language id), the shared adapters always act, and SecureGate adds the
revealing adapter the access gate unlocked or, when it unlocked none, the bundle's secure
adapter (umbra/securegate/: keys, gate and sealing live on the client).

The language comes from the LSP `languageId`, the HTTP API's `language` or `umbra complete`'s file
extension (`--language` overrides); `canonical_language` maps aliases (`py`, `golang`, `c++`, ...)
to one name per language. An unknown language — or one without an expert — gets the shared
adapters only. Nothing here is sent anywhere: the cloud never learns the language (invariant 7)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePath

from umbra.errors import ConfigError
from umbra.privacy.manifest import ROLES

# alias -> canonical language name (canonical names map to themselves)
LANGUAGE_ALIASES: dict[str, str] = {
    "python": "python", "py": "python", "python3": "python", "pyi": "python",
    "go": "go", "golang": "go",
    "java": "java",
    "javascript": "javascript", "js": "javascript", "javascriptreact": "javascript", "jsx": "javascript",
    "typescript": "typescript", "ts": "typescript", "typescriptreact": "typescript", "tsx": "typescript",
    "rust": "rust", "rs": "rust",
    "c": "c", "cpp": "cpp", "c++": "cpp", "cxx": "cpp", "cc": "cpp",
    "csharp": "csharp", "c#": "csharp", "cs": "csharp",
    "kotlin": "kotlin", "kt": "kotlin", "scala": "scala", "ruby": "ruby", "rb": "ruby", "php": "php",
    "shellscript": "shell", "shell": "shell", "sh": "shell", "bash": "shell",
}

EXTENSIONS: dict[str, str] = {
    ".py": "python", ".pyi": "python", ".pyw": "python", ".go": "go", ".java": "java",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".tsx": "typescript", ".mts": "typescript", ".rs": "rust",
    ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp",
    ".cs": "csharp", ".kt": "kotlin", ".kts": "kotlin", ".scala": "scala", ".rb": "ruby", ".php": "php",
    ".sh": "shell", ".bash": "shell",
}


def canonical_language(name: str | None, aliases: Mapping[str, str] | None = None) -> str | None:
    """The canonical name of a language id or alias (case-insensitive); None for None or "".
    `aliases` (e.g. the editor's settings) are consulted before the built-in ones. A name nobody
    knows is returned lower-cased: it routes to no expert unless one is registered under it."""
    if not name:
        return None
    key = name.strip().lower()
    extra = {k.lower(): v.lower() for k, v in (aliases or {}).items()}
    return extra.get(key) or LANGUAGE_ALIASES.get(key) or key


def language_of_path(path: str | PurePath) -> str | None:
    """The language of a file from its extension, or None."""
    return EXTENSIONS.get(PurePath(path).suffix.lower())


@dataclass(frozen=True)
class Route:
    language: str | None  # canonical language of the request (None: not given)
    expert: str | None  # the expert adapter that serves it (None: shared adapters only)
    adapters: tuple[str, ...]  # every adapter active for the request, sorted
    revealing: str | None = None  # the revealing adapter the request's access key unlocked (None: secure)

    @property
    def access(self) -> str:
        """What the user is shown: "secure" or "revealing: NAME" (never a key)."""
        return f"revealing: {self.revealing}" if self.revealing else "secure"


@dataclass(frozen=True)
class AdapterRole:
    name: str
    role: str  # "shared" (every request) | "expert" (one language) | "secure" | "revealing" (the gate's choice)
    language: str | None = None  # the expert's canonical language


class AdapterRouter:
    def __init__(self, roles: Iterable[AdapterRole] = (), aliases: Mapping[str, str] | None = None):
        self.aliases = dict(aliases or {})
        self.shared: tuple[str, ...] = ()
        self.experts: dict[str, str] = {}  # canonical language -> expert name
        self.revealing: set[str] = set()
        self.secure: str | None = None
        shared = []
        for r in roles:
            if r.role not in ROLES:
                raise ConfigError(f"adapter {r.name}: unknown role {r.role!r} (known: {', '.join(ROLES)})")
            if r.role == "shared":
                shared.append(r.name)
            elif r.role == "revealing":
                self.revealing.add(r.name)
            elif r.role == "secure":
                if self.secure is not None:
                    raise ConfigError(f"two secure adapters: {self.secure} and {r.name}")
                self.secure = r.name
            else:
                language = canonical_language(r.language, self.aliases)
                if language is None:
                    raise ConfigError(f"expert adapter {r.name} names no language")
                if language in self.experts:
                    raise ConfigError(f"two experts for {language}: {self.experts[language]} and {r.name}")
                self.experts[language] = r.name
        self.shared = tuple(sorted(shared))

    def route(self, language: str | None, revealing: str | None = None) -> Route:
        """`revealing`: the revealing adapter the access gate unlocked for this request, if any;
        otherwise the secure adapter (if the bundle has one) serves beside the expert."""
        canonical = canonical_language(language, self.aliases)
        expert = self.experts.get(canonical) if canonical else None
        names = set(self.shared)
        if expert is not None:
            names.add(expert)
        if revealing is not None:
            if revealing not in self.revealing:
                raise ConfigError(f"{revealing!r} is not a revealing adapter of this bundle")
            names.add(revealing)
        elif self.secure is not None:
            names.add(self.secure)
        return Route(canonical, expert, tuple(sorted(names)), revealing)
