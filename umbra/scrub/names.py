"""Personal names where code names people: author tags and fields, copyright holders, commit
trailers and `TODO(name)` notes. Names in free prose are not found (that needs a language model,
not rules); what is claimed is the anchored forms below.

Strong anchors take whatever name or handle follows (`@author jdoe` too):
  `@author`, `__author__` / `__maintainer__` / `__credits__` (their string values), `Author:`,
  `Authors:`, `Maintainer:`, `Written by:`, Sphinx's `moduleauthor::` / `sectionauthor::` /
  `codeauthor::` / `:author:`, commit trailers (`Signed-off-by:`, `Co-authored-by:`, `Reviewed-by:`,
  ...), and `TODO(name)` / `FIXME(name)` / `XXX(name)` / `HACK(name)`.
Weak anchors need a personal name's shape — two to five capitalised words or initials, no
organisation word (Foundation, Inc, Authors, Oracle, ...): copyright lines (`Copyright (c) 2020
Jane Doe`, `SPDX-FileCopyrightText:`) and `written/contributed/created/... by Jane Doe`. So
`Copyright 2009 The Go Authors` and `Oracle and/or its affiliates` are kept.
Only the name is replaced; an e-mail beside it is `patterns.find_emails`' to find."""

from __future__ import annotations

import re
from collections.abc import Iterator

from umbra.scrub.findings import PLACEHOLDERS, Span

_LEAD = r"(?:^|(?<=[\s#*/;!%\"'-]))"  # a tag starts a line, a comment or a string
_STRONG = re.compile(
    r"(?im)(?:(?:^|(?<=\s))@author\b[ \t:]*"
    r"|" + _LEAD + r"(?:original\s+)?(?:authors?|maintainers?|written[ \t]+by)[ \t]*:[ \t]*"
    r"|\.\.[ \t]+(?:module|section|code)author::[ \t]*"
    r"|:authors?:[ \t]*"
    r"|" + _LEAD + r"(?:signed-off|co-authored|reviewed|acked|reported|tested|suggested|helped|requested)-by"
    r"[ \t]*:[ \t]*)"
)
_DUNDER = re.compile(r"(?m)\b__(?:author|maintainer|credits)__\s*(?::[^=\n]*)?=\s*")
_TODO = re.compile(r"\b(?:TODO|FIXME|XXX|HACK)\(([A-Za-z][\w.-]*(?:[ \t]+[A-Z][\w.-]*)?)\)")
_COPYRIGHT = re.compile(
    r"(?i)(?:\bcopyright\b|SPDX-FileCopyrightText\b)(?:[ \t]*:)?(?:[ \t]*(?:\(c\)|©))?"
    r"(?:[ \t]*(?:\d{4}(?:[ \t]*[-–,][ \t]*(?:\d{4}|present))*),?)*[ \t]*(?:by[ \t]+)?"
)
_BY = re.compile(
    r"(?i)\b(?:written|contributed|created|authored|developed|implemented|ported|maintained|coded)"
    r"(?:[ \t]+(?:originally|initially))?[ \t]+by[ \t]+"
)
_CUTTING_PLACEHOLDERS = tuple(p for kind, p in PLACEHOLDERS.items() if kind != "email")
_QUOTED = re.compile(r"""(?s)("{3}|'{3}|"|')(.*?)\1""")

# Where a name list ends on its line.
_STOP = re.compile(
    r"<|\(|\[|\{|\*/|-->|\"|`|=|\bAll rights reserved\b|\s[-–—|]\s"  # brackets, quotes, code, dashes
    r"|(?<!\b[A-Z])\.\s+[A-Z]|\.\s*$|$",  # a sentence's end (not an initial's dot), the line's end
    re.I | re.M,
)
_ENTITY = re.compile(r"&(?:[A-Za-z]{2,8}|#\d{2,6});")
_SEPARATORS = re.compile(r",|;|&|/|\s+and\s+|\s+with\s+", re.I)
_WORD = re.compile(r"[^\W\d_](?:[^\W\d_]|['’.-])*\.?")
_HANDLE = re.compile(r"[^\W\d_][\w.'’-]*")

PARTICLES = frozenset({"van", "von", "der", "den", "de", "da", "di", "du", "del", "della", "le", "la", "dos", "das",
                       "bin", "ibn", "al", "y", "ter", "ten", "st.", "jr.", "jr", "sr.", "sr", "iii", "ii"})
ORG_WORDS = frozenset("""
the and or its affiliates authors author contributors contributor developers team project projects group
foundation software inc inc. incorporated ltd ltd. limited llc llp corp corp. corporation co co. company gmbh ag ab
sa bv nv plc pty oy as kk labs lab laboratory laboratories university institute center centre research systems
technologies technology microsystems networks solutions services holdings association consortium society
community organization organisation trust council initiative stichting centrum matrix unicode oracle google
microsoft apple ibm intel amazon facebook meta mozilla apache python go java openjdk sun netscape lucent
affiliates others all rights reserved see license licence notice holder holders copyright python's
""".split())
STOP_WORDS = frozenset("""
unascribed unknown anonymous nobody none n/a na tbd tba various see me you someone somebody everyone everybody
issue issues bug bugs perf performance cleanup later someday refactor test tests docs doc fix hack todo note
""".split())


def find_names(text: str) -> Iterator[Span]:
    for m in _STRONG.finditer(text):
        yield from _names_in(text, m.end(), _segment_end(text, m.end()), strict=True)
    for m in _DUNDER.finditer(text):
        yield from _dunder_names(text, m.end())
    for m in _TODO.finditer(text):
        if _valid_handle(m.group(1)):
            yield Span(m.start(1), m.end(1), "name")
    for regex in (_COPYRIGHT, _BY):
        for m in regex.finditer(text):
            yield from _names_in(text, m.end(), _segment_end(text, m.end()), strict=False)


def _segment_end(text: str, start: int) -> int:
    """Where the name list starting at `start` ends; at `start` (nothing) when it runs into a
    placeholder other than <EMAIL>: the scrubbed text would then offer a shorter list than the
    original did ("Jane Doe <SECRET>" from "Jane Doe AKIA…"), and scrubbing twice must find nothing new."""
    end = _STOP.search(text, start).start()
    return start if _cut_by_placeholder(text, end) else end


def _cut_by_placeholder(text: str, pos: int) -> bool:
    return text.startswith("<", pos) and any(text.startswith(p, pos) for p in _CUTTING_PLACEHOLDERS)


def _dunder_names(text: str, start: int) -> Iterator[Span]:
    """The names in `__author__ = "A <a@x>, B"` or a list/tuple of such strings."""
    end = text.find("\n", start)
    end = len(text) if end == -1 else end
    if text[start:start + 1] in "([":
        close = text.find(")" if text[start] == "(" else "]", start)
        end = close if close != -1 and close - start < 4000 else end
    for q in _QUOTED.finditer(text, start, end):
        body_start, body_end = q.start(2), q.end(2)
        stop = text.find("<", body_start, body_end)
        if stop != -1 and _cut_by_placeholder(text, stop):
            continue
        yield from _names_in(text, body_start, stop if stop != -1 else body_end, strict=True)


def _names_in(text: str, start: int, end: int, strict: bool) -> Iterator[Span]:
    """Each name in the list text[start:end] (split on commas, 'and', '&', ...). HTML entities
    (`Ah&eacute;`) count as letters of a name, not as an '&' and a ';'."""
    if text[end:end + 1] in ("{", "(", "=") and not text[start:end].strip().count(" "):
        return  # `Author: Person{` is a struct field, `author(x)` a call
    segment = _ENTITY.sub(lambda m: "x" * len(m.group()), text[start:end])  # same length: same offsets
    pos = 0
    for sep in list(_SEPARATORS.finditer(segment)) + [None]:
        part_end = sep.start() if sep else len(segment)
        yield from _one_name(segment, pos, part_end, strict, start)
        if sep:
            pos = sep.end()


def _one_name(segment: str, start: int, end: int, strict: bool, base: int) -> Iterator[Span]:
    """The name in segment[start:end], if it is one, as a span of the text (`base` + offsets)."""
    raw = segment[start:end]
    lead = len(raw) - len(raw.lstrip(" \t*#\"'"))
    body = raw.strip(" \t*#\"'").rstrip(":")
    last = body.split()[-1] if body.split() else ""
    if body.endswith(".") and len(last) > 2 and last.lower() not in PARTICLES:
        body = body[:-1]  # a sentence's full stop, not an initial's or "Jr."
    if body and _is_name(body, strict):
        s = base + start + lead
        yield Span(s, s + len(body), "name")


def _is_name(body: str, strict: bool) -> bool:
    words = body.split()
    if not 1 <= len(words) <= 5 or "\n" in body:
        return False
    lowered = [w.lower().rstrip(".,") for w in words]
    if any(w in ORG_WORDS for w in lowered) or lowered[0] in STOP_WORDS:
        return False
    if strict and len(words) == 1:
        return _valid_handle(words[0])
    if not all(_WORD.fullmatch(w) for w in words):
        return False
    if not words[0][0].isupper() or not words[-1][0].isupper():
        return False
    if not all(w[0].isupper() or w.lower() in PARTICLES for w in words):
        return False
    return strict or len(words) >= 2


def _valid_handle(word: str) -> bool:
    low = word.lower()
    return (bool(_HANDLE.fullmatch(word)) and len(word) >= 2
            and not {low, low.strip(".")} & (STOP_WORDS | ORG_WORDS | PARTICLES))
