"""Which of detect-secrets' keyword regexes a file gets, by its name.

detect-secrets picks per file type: quoted values in code (Python, Java, JS, ...), optional
quotes in config formats (YAML, INI, properties, TOML) and in Go. We add: environment and shell
files (`.env`, `.env.prod`, `*.sh`, `Dockerfile`) are config (`DB_PASSWORD=hunter2`), and in
code, Go included, only a quoted value is a literal — `password = cfg.Password` is not one."""

from __future__ import annotations

import os

from detect_secrets.plugins.keyword import (
    CONFIG_DENYLIST_REGEX_TO_GROUP,
    QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP,
    REGEX_BY_FILETYPE,
)
from detect_secrets.util.filetype import FileType, determine_file_type

CONFIG_TYPES = frozenset({FileType.YAML, FileType.CONFIG, FileType.INI, FileType.PROPERTIES, FileType.TOML})
_ENV_SUFFIXES = (".env", ".envrc", ".sh", ".bash", ".zsh", ".ksh")
_ENV_NAMES = frozenset({"dockerfile", "containerfile", "makefile", ".netrc", ".pgpass", ".npmrc", ".pypirc"})


def keyword_table(path: str | None) -> tuple[dict, bool]:
    """(detect-secrets' keyword regex → group table for this file, whether values must be quoted)."""
    if path is None:
        return QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP, True
    name = os.path.basename(str(path)).lower()
    if name in _ENV_NAMES or name.startswith(".env") or name.endswith(_ENV_SUFFIXES):
        return CONFIG_DENYLIST_REGEX_TO_GROUP, False
    file_type = determine_file_type(name)
    table = REGEX_BY_FILETYPE.get(file_type, QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP)
    return table, file_type not in CONFIG_TYPES


def value_is_quoted(line: str, start: int) -> bool:
    """The value starting at `start` on `line` opens a string literal."""
    return start > 0 and line[start - 1] in "\"'`"
