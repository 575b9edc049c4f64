"""FileStyle (umbra/engine/file_style.py): the buffer's line ends and indentation unit, read once
and written back into the completion."""

from __future__ import annotations

import pytest

from umbra.engine.file_style import FileStyle


def test_lf_file_spaces_by_four():
    style = FileStyle.of("def f(x):\n    if x:\n        ", "\n    return 1\n")
    assert (style.crlf, style.tabs, style.width) == (False, False, 4)
    assert style.read("a\r\nb") == "a\r\nb"  # an LF file's stray \r is text, left alone
    assert style.render("x\n        y") == "x\n        y"


def test_crlf_is_read_as_lf_and_written_back():
    prefix, suffix = "def f(x):\r\n    if x:\r\n        ", "\r\n    return 1\r\n"
    style = FileStyle.of(prefix, suffix)
    assert style.crlf
    assert style.read(prefix) == "def f(x):\n    if x:\n        "
    assert style.render("return 2\n    y = 3") == "return 2\r\n    y = 3"


def test_a_file_with_a_few_crlf_lines_is_still_lf():
    style = FileStyle.of("a\nb\nc\r\nd\ne\n", "")
    assert not style.crlf


def test_tab_file_gets_tabs_for_the_models_spaces():
    style = FileStyle.of("class A:\n\tdef f(self, x):\n\t\tif x:\n\t\t\t", "\n\t\treturn 0\n")
    assert style.tabs is True
    # the cursor's own line is the editor's; new lines' leading spaces become tabs, 4 to a tab
    assert style.render("y = 1\n            return y\n        z") == "y = 1\n\t\t\treturn y\n\t\tz"
    assert style.render("a\n      b") == "a\n\t  b"  # spaces that are not a whole level stay


@pytest.mark.parametrize("indent, width", [("  ", 2), ("    ", 4), ("   ", 3)])
def test_space_file_gets_its_width_for_the_models_tabs(indent, width):
    prefix = f"func f() {{\n{indent}if x {{\n{indent * 2}"
    style = FileStyle.of(prefix, f"\n{indent}}}\n}}\n")
    assert (style.tabs, style.width) == (False, width)
    assert style.render("y := 1\n\t\treturn y") == f"y := 1\n{indent * 2}return y"


def test_no_indented_line_leaves_the_text_as_written():
    style = FileStyle.of("x = 1\n", "y = 2\n")
    assert style.tabs is None
    assert style.render("a\n\tb\n    c") == "a\n\tb\n    c"


def test_streamed_deltas_render_to_the_whole_text():
    style = FileStyle(crlf=True, tabs=True)
    got = []
    forward = style.stream(got.append)
    # settled streaming text never ends inside leading blanks (completion_text.py)
    for delta in ["y", " = 1", "\n        ret", "urn y", "\n        z"]:
        forward(delta)
    assert "".join(got) == style.render("y = 1\n        return y\n        z") == "y = 1\r\n\t\treturn y\r\n\t\tz"
