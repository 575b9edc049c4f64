"""Reading and writing corpus text: one JSON-lines file per (split, language).

Each line is {"path": ..., "text": ...}. The files are gitignored and rebuilt by `umbra data build`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from umbra.errors import ConfigError

LANGS = ("python", "java", "go")


@dataclass(frozen=True)
class Document:
    lang: str  # "python" | "java" | "go"
    path: str  # unique corpus path
    text: str  # file content


def corpus_file(corpus_dir: Path, split: str, lang: str) -> Path:
    return corpus_dir / split / f"{lang}.jsonl"


def write_documents(corpus_dir: Path, split: str, lang: str, docs: list[Document]) -> Path:
    path = corpus_file(corpus_dir, split, lang)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for d in sorted(docs, key=lambda d: d.path):
            fh.write(json.dumps({"path": d.path, "text": d.text}, ensure_ascii=False) + "\n")
    return path


def read_documents(corpus_dir: Path, split: str, lang: str) -> Iterator[Document]:
    path = corpus_file(corpus_dir, split, lang)
    if not path.exists():
        raise ConfigError(f"corpus file {path} does not exist; run `umbra data build`")
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            yield Document(lang, rec["path"], rec["text"])


def read_split(corpus_dir: Path, split: str, langs: tuple[str, ...] = LANGS) -> list[Document]:
    """All documents of a split, in (language, path) order; languages without a file are skipped."""
    present = [lang for lang in langs if corpus_file(corpus_dir, split, lang).exists()]
    if not present:
        raise ConfigError(f"no corpus files for split {split!r} in {corpus_dir}; run `umbra data build`")
    return [d for lang in present for d in read_documents(corpus_dir, split, lang)]
