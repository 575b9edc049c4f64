"""Committed manifests: per-split file lists (path, sha256, bytes) and a JSON summary.

The manifests never contain code; the corpus text itself lives under data/corpus/ (gitignored)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

from umbra.errors import ConfigError

FIELDS = ("lang", "source", "path", "sha256", "bytes")


@dataclass(frozen=True)
class ManifestRow:
    lang: str  # "python" | "go" | "java"
    source: str  # source id (e.g. "pypi/flask-3.0.3")
    path: str  # unique corpus path
    sha256: str  # sha256 of the UTF-8 bytes
    bytes: int  # size in bytes


def write_rows(path: Path, rows: list[ManifestRow]) -> bool:
    """Write the manifest sorted by (lang, path); True when its content changed."""
    buf = io.StringIO(newline="")
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(FIELDS)
    for r in sorted(rows, key=lambda r: (r.lang, r.path)):
        w.writerow((r.lang, r.source, r.path, r.sha256, r.bytes))
    text = buf.getvalue()
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", newline="")
    return True


def read_rows(path: Path) -> list[ManifestRow]:
    if not path.exists():
        raise ConfigError(f"manifest {path} does not exist; run `umbra data build`")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh, delimiter="\t")
        header = next(reader, None)
        if tuple(header or ()) != FIELDS:
            raise ConfigError(f"manifest {path} has an unexpected header {header}")
        return [ManifestRow(a, b, c, d, int(e)) for a, b, c, d, e in reader]


def write_summary(path: Path, summary: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def read_summary(path: Path) -> dict:
    if not path.exists():
        raise ConfigError(f"summary {path} does not exist; run `umbra data build`")
    return json.loads(path.read_text(encoding="utf-8"))
