"""Post-processing: drop text that repeats the suffix, strip trailing whitespace."""

from __future__ import annotations

from umbra.engine.postprocess import postprocess


def test_trailing_whitespace_is_stripped_per_line_and_at_the_end():
    assert postprocess("x = 1   \n    y = 2\t\n\n  ", "") == "x = 1\n    y = 2"
    assert postprocess("\n    return x  ", "") == "\n    return x"


def test_single_line_overlap_with_the_rest_of_the_line_is_dropped():
    assert postprocess("a, b)", ")") == "a, b"
    assert postprocess("a, b):", "):\n    pass") == "a, b"
    assert postprocess("x + offset", " + offset\n") == "x"


def test_single_line_overlap_keeps_brackets_the_completion_needs():
    assert postprocess("foo()", ")") == "foo()"
    assert postprocess("foo(a))", ")") == "foo(a)"


def test_single_line_short_word_overlap_is_kept():
    assert postprocess("ab", "bc") == "ab"


def test_multiline_repeat_of_the_suffix_is_dropped():
    suffix = "\n    return total\n\nprint(add(1, 2))\n"
    text = "total = a + b\n    return total\n"
    assert postprocess(text, suffix) == "total = a + b"
    # a repeat cut short by max_tokens is still a repeat
    assert postprocess("total = a + b\n    return tot", suffix) == "total = a + b"


def test_multiline_lone_closer_is_kept():
    assert postprocess("if (x) {\n    y();\n}", "\n}\n") == "if (x) {\n    y();\n}"


def test_multiline_without_repeat_is_untouched():
    text = "total = a + b\n    log(total)"
    assert postprocess(text, "\n    return total\n") == text
