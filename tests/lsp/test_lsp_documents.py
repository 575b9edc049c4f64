"""Documents: LSP line breaks (only \\n, \\r\\n, \\r), position encodings, incremental edits."""

from __future__ import annotations

import random

import pytest
from lsprotocol import types

from lsp.documents import Document, Documents, identifier_before
from umbra.errors import ValidationError


def P(line: int, character: int) -> types.Position:
    return types.Position(line=line, character=character)


def edit(a: types.Position, b: types.Position, text: str) -> types.TextDocumentContentChangePartial:
    return types.TextDocumentContentChangePartial(range=types.Range(start=a, end=b), text=text)


def test_only_lsp_line_breaks_start_lines():
    text = "a\fb\u2028c\x1cd\ne\r\nf\rg"  # form feed etc. are characters inside a line
    doc = Document(text)
    assert doc.line_count == 4
    assert doc.split(P(0, 8)) == ("a\fb\u2028c\x1cd", "\ne\r\nf\rg")
    assert doc.offset(P(1, 1)) == text.index("e") + 1
    assert doc.offset(P(2, 0)) == text.index("f") and doc.offset(P(3, 1)) == len(text)


@pytest.mark.parametrize("encoding, column", [("utf-16", 6), ("utf-8", 9), ("utf-32", 5)])
def test_columns_count_code_units_of_the_negotiated_encoding(encoding, column):
    text = "é\U0001F600 = x"  # é: 1/2/1 units, 😀: 2/4/1 units (UTF-16/UTF-8/UTF-32)
    doc = Document(text, encoding=encoding)
    assert doc.offset(P(0, column)) == 5 == text.index("x")
    assert doc.position(5) == P(0, column)


def test_a_column_past_the_end_of_its_line_is_the_end_of_the_line():
    doc = Document("ab\r\ncd")
    assert doc.offset(P(0, 99)) == 2 and doc.offset(P(1, 99)) == 6


def test_a_line_past_the_end_is_invalid_in_requests_and_the_end_in_edits():
    doc = Document("ab\n")
    assert doc.offset(P(1, 0)) == 3  # the empty last line exists
    with pytest.raises(ValidationError, match="line 2 is outside the document"):
        doc.offset(P(2, 0))
    doc.apply(edit(P(5, 0), P(5, 0), "cd"))
    assert doc.text == "ab\ncd"


def test_incremental_edits_replay_a_typing_session():
    doc = Document("def f():\n    return\n")
    doc.apply(edit(P(1, 10), P(1, 10), " 1"))
    doc.apply(edit(P(0, 4), P(0, 5), "g"))  # rename f -> g
    doc.apply(edit(P(1, 4), P(2, 0), "pass\n"))  # replace across a line break
    assert doc.text == "def g():\n    pass\n"
    doc.apply(types.TextDocumentContentChangeWholeDocument(text="x = 1"))
    assert doc.text == "x = 1" and doc.line_count == 1
    with pytest.raises(ValidationError, match="ends before it starts"):
        doc.apply(edit(P(0, 3), P(0, 1), ""))


def test_position_inverts_offset_everywhere():
    rng = random.Random(0)
    alphabet = ["a", " ", "\n", "\r\n", "\r", "é", "\U0001F600", "\f"]
    text = "".join(rng.choice(alphabet) for _ in range(300))
    for encoding in ("utf-8", "utf-16", "utf-32"):
        doc = Document(text, encoding=encoding)
        for offset in range(len(text) + 1):
            if text[offset - 1 : offset + 1] == "\r\n":
                continue  # between \r and \n is no position of its own
            assert doc.offset(doc.position(offset)) == offset


def test_documents_track_open_change_close():
    docs = Documents()
    docs.open(types.TextDocumentItem(uri="file:///a.py", language_id="python", version=1, text="x"))
    docs.change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri="file:///a.py", version=2),
        content_changes=[edit(P(0, 1), P(0, 1), " = 1")]))
    assert docs.get("file:///a.py").text == "x = 1" and docs.get("file:///a.py").version == 2
    docs.close("file:///a.py")
    with pytest.raises(ValidationError, match="is not open"):
        docs.get("file:///a.py")


def test_identifier_before_the_cursor():
    assert identifier_before("return self.valu") == "valu"
    assert identifier_before("x = (") == "" and identifier_before("café") == ""
