"""What the scrubber finds: the kinds, their placeholders, the candidate spans the detectors
propose, how overlapping candidates are resolved, and the `Finding` a report holds.

A finding says what kind of thing stood where — line, column, length in the original text — and
never what it was: reports can be shared without re-leaking what was scrubbed.

Overlaps are resolved deterministically: candidates that overlap form one group, the group is
replaced as a whole (the union of its spans, so nothing of any member survives) under the kind
of its longest member, ties going to the more specific kind (`KINDS` order). A URL containing an
internal host is one `<URL>`; an e-mail whose domain is an internal host one `<EMAIL>`."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

# The kinds, most specific first (the order breaks ties between overlapping candidates of equal length).
KINDS = ("secret", "url", "email", "host", "ip", "name")

# Each kind's replacement: plain text, chosen so that no detector matches it (scrubbing is idempotent).
PLACEHOLDERS = {kind: f"<{kind.upper()}>" for kind in KINDS}


@dataclass(frozen=True, order=True)
class Span:
    """A detector's candidate: characters [start, end) of the text are a `kind`."""

    start: int
    end: int
    kind: str


@dataclass(frozen=True)
class Finding:
    """One replaced span of the original text: 1-based line and column (in characters), and its
    length in characters (a PEM private key block spans several lines)."""

    kind: str
    line: int
    column: int
    length: int

    def to_json(self) -> dict:
        return {"kind": self.kind, "line": self.line, "column": self.column, "length": self.length}


def resolve(spans: Iterable[Span]) -> list[Span]:
    """Non-overlapping spans in text order: each group of overlapping candidates becomes the union
    of its spans, under the kind of its longest member (ties: `KINDS` order)."""
    ordered = sorted(s for s in spans if s.end > s.start)
    out: list[Span] = []
    group: list[Span] = []
    group_end = -1
    for span in ordered:
        if group and span.start >= group_end:
            out.append(_merge(group))
            group = []
        group.append(span)
        group_end = max(group_end, span.end) if len(group) > 1 else span.end
    if group:
        out.append(_merge(group))
    return out


def _merge(group: list[Span]) -> Span:
    winner = min(group, key=lambda s: (-(s.end - s.start), KINDS.index(s.kind), s.start))
    return Span(min(s.start for s in group), max(s.end for s in group), winner.kind)


def line_starts(text: str) -> list[int]:
    """Offsets at which each line of `text` starts (line 1 at offset 0)."""
    starts = [0]
    pos = text.find("\n")
    while pos != -1:
        starts.append(pos + 1)
        pos = text.find("\n", pos + 1)
    return starts


def to_finding(span: Span, starts: list[int]) -> Finding:
    """The report entry of a resolved span, given the text's `line_starts`."""
    index = bisect.bisect_right(starts, span.start) - 1
    return Finding(span.kind, index + 1, span.start - starts[index] + 1, span.end - span.start)


def offset_of(finding: Finding, starts: list[int]) -> int:
    """The offset in the original text where `finding` starts (the inverse of `to_finding`)."""
    return starts[finding.line - 1] + finding.column - 1
