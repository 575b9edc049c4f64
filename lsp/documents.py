"""Open documents as the editor sees them, kept by the language server's document sync.

LSP positions count lines by "\\n", "\\r\\n" and "\\r" only, and columns in the negotiated
encoding's code units (UTF-16 unless the client offers UTF-8 / UTF-32). pygls's own document
copy splits lines with `str.splitlines`, which also breaks at form feeds, "\\x1c".."\\x1e",
"\\x85", "\\u2028" and "\\u2029" — a Python file with a form feed would put its positions on
the wrong line — so the server keeps this copy and completes from it.

A column past the end of its line means the end of the line (LSP); a line past the end of the
document is invalid in a request (ValidationError) and means the end of the document in an edit.

JSON can carry lone UTF-16 surrogates ("\\ud800") that no encoder accepts; `well_formed` replaces
each with U+FFFD (one code unit in UTF-16 and UTF-32, three bytes in UTF-8 like the surrogate:
positions stay where they were) before text reaches a tokenizer."""

from __future__ import annotations

import copy
import re
from bisect import bisect_right

from lsprotocol import types

from umbra.errors import ValidationError

_BREAK = re.compile(r"\r\n|\r|\n")
_IDENTIFIER_TAIL = re.compile(r"[A-Za-z0-9_]*\Z")
_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str every surrogate is a lone one (JSON pairs combine)


def well_formed(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (encodable as UTF-8)."""
    return _SURROGATE.sub("\ufffd", text)


def _width(char: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(char.encode("utf-8", "surrogatepass"))
    if encoding == "utf-16":
        return 2 if ord(char) > 0xFFFF else 1
    return 1


class Document:
    def __init__(self, text: str, version: int = 0, language_id: str = "", encoding: str = "utf-16"):
        self.version = version
        self.language_id = language_id  # the editor's languageId: routes the request to its expert
        self.encoding = encoding
        self._set(text)

    def _set(self, text: str) -> None:
        self.text = text
        self._starts = [0] + [m.end() for m in _BREAK.finditer(text)]  # offset of each line's start

    @property
    def line_count(self) -> int:
        return len(self._starts)

    def _line_end(self, line: int) -> int:
        """Offset of the end of `line`'s content (before its line break)."""
        if line + 1 >= len(self._starts):
            return len(self.text)
        nxt = self._starts[line + 1]
        return nxt - (2 if self.text.startswith("\r\n", nxt - 2) else 1)

    def offset(self, position: types.Position, *, past_end_ok: bool = False) -> int:
        """The string offset of an LSP position. ValidationError for a line past the end (or, with
        `past_end_ok`, the end of the document)."""
        if position.line >= len(self._starts):
            if past_end_ok:
                return len(self.text)
            raise ValidationError(f"line {position.line} is outside the document (0..{len(self._starts) - 1})")
        start, end = self._starts[position.line], self._line_end(position.line)
        if self.encoding == "utf-32":
            return min(start + position.character, end)
        units, i = 0, start
        while i < end and units < position.character:
            units += _width(self.text[i], self.encoding)
            i += 1
        return i

    def position(self, offset: int) -> types.Position:
        """The LSP position of a string offset (inverse of `offset`)."""
        line = bisect_right(self._starts, offset) - 1
        start = self._starts[line]
        character = sum(_width(c, self.encoding) for c in self.text[start:offset])
        return types.Position(line=line, character=character)

    def snapshot(self) -> Document:
        """This document as it is now: later edits replace the copy's text, never change it."""
        return copy.copy(self)  # `_set` replaces `text` and `_starts`, it never mutates them

    def split(self, position: types.Position) -> tuple[str, str]:
        """(prefix, suffix) at the cursor."""
        at = self.offset(position)
        return self.text[:at], self.text[at:]

    def apply(self, change: types.TextDocumentContentChangeEvent) -> None:
        if isinstance(change, types.TextDocumentContentChangePartial):
            a = self.offset(change.range.start, past_end_ok=True)
            b = self.offset(change.range.end, past_end_ok=True)
            if b < a:
                raise ValidationError("an edit's range ends before it starts")
            self._set(self.text[:a] + change.text + self.text[b:])
        else:  # the whole document
            self._set(change.text)


def identifier_before(prefix: str) -> str:
    """The ASCII identifier characters just before the cursor (what an editor filters items by)."""
    return _IDENTIFIER_TAIL.search(prefix).group(0)


class Documents:
    """uri -> Document, for the documents the editor has open."""

    def __init__(self) -> None:
        self.encoding = "utf-16"  # set from the negotiated position encoding at initialize
        self._docs: dict[str, Document] = {}

    def __contains__(self, uri: str) -> bool:
        return uri in self._docs

    def __len__(self) -> int:
        return len(self._docs)

    def open(self, item: types.TextDocumentItem) -> None:
        self._docs[item.uri] = Document(item.text, item.version, item.language_id, self.encoding)

    def change(self, params: types.DidChangeTextDocumentParams) -> None:
        doc = self.get(params.text_document.uri)
        for change in params.content_changes:
            doc.apply(change)
        doc.version = params.text_document.version

    def close(self, uri: str) -> None:
        self._docs.pop(uri, None)

    def find(self, uri: str) -> Document | None:
        return self._docs.get(uri)

    def get(self, uri: str) -> Document:
        doc = self._docs.get(uri)
        if doc is None:
            raise ValidationError(f"document {uri} is not open (send textDocument/didOpen first)")
        return doc
