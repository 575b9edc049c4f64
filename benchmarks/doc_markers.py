"""Benchmarks write their tables into the docs between a pair of HTML comments,
`<!-- NAME:begin -->` and `<!-- NAME:end -->`, so a rerun replaces its own table and nothing else."""

from __future__ import annotations

import re
from pathlib import Path


def replace_block(text: str, name: str, body: str, *, append: bool = False) -> str:
    """`text` with what lies between NAME's markers replaced by `body` (appended at the end, with
    its markers, when they are missing and `append` is set; otherwise missing markers are an error)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{body}\n{end}"
    if begin in text and end in text:
        return re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, count=1, flags=re.S)
    if append:
        return text.rstrip() + "\n\n" + block + "\n"
    raise SystemExit(f"markers {begin} ... {end} are missing")


def write_block(doc: Path, name: str, body: str, *, append: bool = False) -> None:
    doc.write_text(replace_block(doc.read_text(), name, body, append=append))
