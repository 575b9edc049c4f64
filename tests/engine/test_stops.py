"""Text stop rules: single-line, end of block by indentation in multi-line mode, "auto" (line or
block by the cursor line), and where a completion cut short by a deadline ends."""

from __future__ import annotations

import pytest

from umbra.engine.config import StopConfig
from umbra.engine.stops import StopContext, check_text, indent_width, last_line_dropped, unfinished_cut
from umbra.errors import ConfigError

SINGLE = StopConfig(multiline=False)
MULTI = StopConfig(multiline=True)


def _complete(text, prefix, suffix="", cfg=MULTI):
    """Feed `text` one character at a time like a decode loop; return the kept text and reason."""
    ctx = StopContext.from_cursor(prefix, suffix)
    for n in range(1, len(text) + 1):
        stop = check_text(text[:n], ctx, cfg)
        if stop is not None:
            return text[:n][: stop.cut], stop.reason
    stop = check_text(text, ctx, cfg, final=True)
    return (text[: stop.cut], stop.reason) if stop else (text, None)


def test_indent_width_counts_tabs_as_four():
    assert indent_width("    x") == 4 and indent_width("\tx") == 4 and indent_width("\t  x") == 6
    assert indent_width("") == 0


def test_context_from_cursor():
    ctx = StopContext.from_cursor("def f():\n    x = g(", ")\n    return x\n")
    assert ctx.indent == 4 and not ctx.at_line_end
    assert StopContext.from_cursor("if x:\n", "  \nnext").at_line_end


def test_single_line_stops_at_the_first_newline():
    assert _complete("a, b)\n    return", "    x = f(", ")", SINGLE) == ("a, b)", "newline")
    # mid-line cursor: a leading newline ends the completion at once
    assert _complete("\n    y = 2\n", "x = ", "1", SINGLE) == ("", "newline")


def test_single_line_at_line_end_completes_the_next_line():
    text, reason = _complete("\n\n    return a + b\n    print(a)\n", "def add(a, b):", "", SINGLE)
    assert (text, reason) == ("\n\n    return a + b", "newline")


def test_block_end_on_dedent():
    prefix = "def add(a, b):\n    "
    text = "total = a + b\n    return total\n\n\nprint(add(1, 2))\n"
    assert _complete(text, prefix) == ("total = a + b\n    return total\n\n", "block_end")


def test_block_end_when_the_completion_closes_its_own_block():
    prefix = "def add(a, b):"
    text = "\n    return a + b\n\ndef sub(a, b):\n    return a - b\n"
    assert _complete(text, prefix) == ("\n    return a + b\n", "block_end")


def test_closing_line_is_kept_and_ends_the_block():
    prefix = "  if (x > 0) {"
    text = "\n    y = x;\n  }\n  z = 1;\n"
    assert _complete(text, prefix) == ("\n    y = x;\n  }", "block_end")
    # `endpoint` is not the keyword `end`
    assert _complete("\n    a\nendpoint = 1\n", "if x then") == ("\n    a", "block_end")


def test_continuation_keywords_keep_the_block_open():
    prefix = "    if ok:"
    text = "\n        a()\n    else:\n        b()\n    c()\n"
    assert _complete(text, prefix) == ("\n        a()\n    else:\n        b()", "block_end")


def test_same_level_statements_continue_until_max_tokens():
    text = "x = 1\n    y = 2\n    z = 3"
    assert _complete(text, "def f():\n    ") == (text, None)


def test_a_line_that_repeats_the_line_before_it_ends_the_block():
    # the loop a small model falls into (seen in a quarter of the line benchmark's block completions)
    loop = "self.paths = paths\n        self.options = options\n        self.options = options\n        self.opt"
    prefix = "    def __init__(self, paths, options):\n        "
    assert _complete(loop, prefix, "\n") == ("self.paths = paths\n        self.options = options", "repeated_line")
    # the cursor line itself counts when it was blank: its indentation is the cursor's
    assert _complete("x = 1\n        x = 1\n", prefix, "\n") == ("x = 1", "repeated_line")
    # ... not when the cursor stood after code (`y = ` + `x = 1` is not the line `x = 1`)
    assert _complete("1\n        x = 1\n        z = 2", "    def f():\n        y = ", "") == (
        "1\n        x = 1\n        z = 2", None)


def test_a_repeat_needs_the_same_indentation_a_word_and_a_complete_line():
    prefix = "def f():"
    # closers only (`}` twice at the same indentation) are not a loop
    assert _complete("\n    a()\n    }\n    }\n    b()", prefix) == ("\n    a()\n    }\n    }\n    b()", None)
    # different indentation: not a repeat
    assert _complete("\n    g(x)\n        g(x)\n    h()", prefix)[1] is None
    # the repeat is judged once its line is complete (it might still grow: `a()` -> `a().b`)
    ctx = StopContext.from_cursor(prefix, "")
    assert check_text("\n    a()\n    a()", ctx, MULTI) is None
    assert check_text("\n    a()\n    a()", ctx, MULTI, final=True).reason == "repeated_line"
    assert check_text("\n    a()\n    a().b\n", ctx, MULTI) is None
    # single-line mode ends at the first newline anyway; no block rule, no repeat rule
    assert check_text("\n    a()\n    a()\n", ctx, StopConfig(multiline=True, stop_at_block_end=False)) is None


def test_last_line_dropped_when_the_cap_falls_inside_it():
    assert last_line_dropped("x = 1\n    self.opt") == "x = 1"
    assert last_line_dropped("\n    x = 1\n    y") == "\n    x = 1"
    assert last_line_dropped("\n    self.opt") == "\n    self.opt"  # no earlier line with content
    assert last_line_dropped("x = f(a, b") == "x = f(a, b"


def test_unfinished_last_line_waits_unless_final():
    ctx = StopContext.from_cursor("def f():", "")
    assert check_text("\n    a\nel", ctx, MULTI) is None  # might become `else`
    assert check_text("\n    a\nel", ctx, MULTI, final=True).cut == len("\n    a")


@pytest.mark.parametrize("text", ["x = 1\ny = 2\n", "\n\n\n"])
def test_multiline_without_block_rule_never_cuts(text):
    ctx = StopContext.from_cursor("    ", "")
    assert check_text(text, ctx, StopConfig(multiline=True, stop_at_block_end=False)) is None


def test_a_stop_string_cuts_before_its_first_occurrence_in_either_mode():
    stops = StopConfig(multiline=True, stop_at_block_end=False, strings=("END", ";;"))
    assert _complete("a = 1;; b END", "", cfg=stops) == ("a = 1", "stop_string")
    assert _complete("x ENDy;;", "", cfg=stops) == ("x ", "stop_string")
    single = StopConfig(multiline=False, strings=("(",))
    assert _complete("print(x)", "", cfg=single) == ("print", "stop_string")
    with pytest.raises(Exception, match="non-empty"):
        StopConfig(strings=("",)).validate()


def test_the_earlier_of_a_line_rule_and_a_stop_string_wins():
    single = StopConfig(multiline=False, strings=("zz",))
    assert _complete("ab\ncd zz", "x = ", cfg=single) == ("ab", "newline")  # the newline comes first
    multi = StopConfig(multiline=True, strings=("\n\n",))  # a stop string spanning lines
    assert _complete("\n    a()\n\n    b()", "def f():", cfg=multi) == ("\n    a()", "stop_string")


AUTO = StopConfig(multiline="auto")


def test_auto_mid_line_completes_the_rest_of_the_line():
    assert _complete("a, b)\n    return x\n", "    x = f(", ")", AUTO) == ("a, b)", "newline")
    # after text on the cursor line (its end): the rest of the line, or the next line's statement
    assert _complete("\n    return 1\n    y = 2\n", "def f():", "", AUTO) == ("\n    return 1", "newline")


def test_auto_at_a_blank_line_completes_the_block_up_to_a_dedent_or_a_blank_line():
    prefix = "def f(x):\n    "
    assert StopContext.from_cursor(prefix, "\n").blank_line
    assert _complete("y = x\n    return y\n\n    z = 3\n", prefix, "\n", AUTO) == ("y = x\n    return y", "blank_line")
    assert _complete("y = x\n    return y\ndef g():\n", prefix, "\n", AUTO) == ("y = x\n    return y", "block_end")
    # blank lines before any content are the block's start, not its end
    assert _complete("\n\n    y = x\n\n", "def f(x):\n", "", AUTO) == ("\n\n    y = x", "blank_line")
    # an explicit multi-line completion does not stop at a blank line
    assert _complete("y = x\n\n    return y\n", prefix, "\n", MULTI) == ("y = x\n\n    return y\n", None)


def test_auto_is_a_valid_mode_and_nothing_else_is():
    StopConfig(multiline="auto").validate()
    for bad in ("block", 1, None):
        with pytest.raises(ConfigError, match="multiline"):
            StopConfig(multiline=bad).validate()
    with pytest.raises(ConfigError, match="repetition"):
        StopConfig(repetition=2).validate()


def test_unfinished_cut_keeps_whole_lines_or_words():
    assert unfinished_cut("lute = os.path.jo") == len("lute = os.path.")
    assert unfinished_cut("x = 1\n    y = compu") == len("x = 1")
    assert unfinished_cut("\n    retu") == len("\n    ")  # no earlier line with content: the word rule
    assert unfinished_cut("name") == 0


def test_unfinished_cut_never_leaves_a_bracket_or_quote_it_opened():
    assert unfinished_cut("f'<{path}<{pa") == len("f")  # issue 63: never inside a run like `{path}`
    assert unfinished_cut("foo(a, ") == len("foo")
    assert unfinished_cut("x = [1, 2] + ya") == len("x = [1, 2] + ")
    assert unfinished_cut("a, b) + c") == len("a, b) + ")  # closing what the cursor's line opened is fine
    assert unfinished_cut('s = "a(b" + x') == len('s = "a(b" + ')  # brackets inside a string are text
    assert unfinished_cut('s = "say \\"hi\\" now') == len("s = ")  # an escaped quote does not close it
    assert unfinished_cut("x = 1  # don't (") == len("x = 1  # don't (")  # a comment hides both
    assert unfinished_cut("y = 2  // it's {") == len("y = 2  // it's {")
    # a later line: the last line end with nothing left open, else the word rule over the whole text
    assert unfinished_cut("a = 1\nfoo(\n    b,\n    c") == len("a = 1")
    assert unfinished_cut("foo(\n    b,\n    c") == len("foo")
    assert unfinished_cut("s := `raw\nline` + na") == len("s := `raw\nline` + ")  # Go's raw string spans lines
