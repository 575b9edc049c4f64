"""Clean-up of a finished completion before it reaches the editor.

1. Text that repeats the suffix is dropped: models often "complete" the middle and then go on
   to write the code that already follows the cursor.
   - multi-line: the completion ends at the first of its own lines from which the rest of the
     completion equals the start of the suffix (whitespace-insensitive, at least
     `MIN_REPEAT` non-space characters, so a lone `}` that may close the completion's own
     block is kept);
   - single-line: the longest overlap between the completion's end and the rest of the cursor
     line after the cursor (`foo(|)` completed with `a, b)` gives `a, b`). An overlap is only
     dropped if it is punctuation or at least `MIN_REPEAT` characters long, and never takes a
     closing bracket the completion needs itself (`print(|)` completed with `foo()` stays).
2. Trailing whitespace is removed from every line and from the end."""

from __future__ import annotations

import re

MIN_REPEAT = 4  # non-whitespace characters a dropped multi-line repeat must have

_WS = re.compile(r"\s+")


def postprocess(text: str, suffix: str) -> str:
    if "\n" in text.strip("\n"):
        text = drop_repeated_suffix_lines(text, suffix)
    else:
        text = drop_line_overlap(text, suffix)
    return strip_trailing_whitespace(text)


def drop_repeated_suffix_lines(text: str, suffix: str) -> str:
    squeezed_suffix = _WS.sub("", suffix)
    if not squeezed_suffix:
        return text
    start = text.find("\n")
    while start != -1:
        tail = _WS.sub("", text[start + 1 :])
        if len(tail) >= MIN_REPEAT and squeezed_suffix.startswith(tail):
            return text[:start]
        start = text.find("\n", start + 1)
    return text


def drop_line_overlap(text: str, suffix: str) -> str:
    rest = suffix.split("\n", 1)[0].rstrip()
    body = text.rstrip()
    for k in range(min(len(rest), len(body)), 0, -1):
        overlap = rest[:k]
        if not body.endswith(overlap):
            continue
        punctuation = not any(ch.isalnum() for ch in overlap)
        long_enough = len(_WS.sub("", overlap)) >= MIN_REPEAT
        spare_closers = _bracket_balance(body)  # closers the completion does not need itself
        if (punctuation or long_enough) and _closers(overlap) <= spare_closers:
            return body[:-k]
    return text


def _closers(s: str) -> int:
    return sum(s.count(c) for c in ")]}")


def _bracket_balance(s: str) -> int:
    """Closing minus opening brackets (>0: the completion closes brackets opened before it)."""
    return _closers(s) - sum(s.count(c) for c in "([{")


def strip_trailing_whitespace(text: str) -> str:
    return "\n".join(line.rstrip(" \t\r") for line in text.split("\n")).rstrip()
