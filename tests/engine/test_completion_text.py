"""umbra/engine/completion_text.py: the decode loop's text side. Streamed deltas concatenate to
exactly the final text for any decode (a property over random token texts, suffixes, stop
strings and modes), the final text is what the stop rules and post-processing make of it, text
settles as soon as nothing can change it, and a stream never takes text back."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from umbra.engine.completion_text import CompletionText, TextStream, settled_text
from umbra.engine.config import StopConfig
from umbra.engine.postprocess import postprocess
from umbra.engine.stops import StopContext, block_mode, check_text
from umbra.errors import StreamDiverged

PARTIAL = "é?"  # a token ending in half a character: decodes to U+FFFD while it is the last one
PIECES = ["a", "b", "x", "y", " x", " = 1", " ", "    ", "\t", "\n", "\n\n", "\n  ", "\n    ", "\n        ", "}",
          ")", "):", "else:", "end", "return", "E", "ND", "END", ";", "\r", "\ufffd", PARTIAL]
PREFIXES = ["", "x = ", "def f():", "    if ok:", "  if (a) {", "print("]
SUFFIXES = ["", "\n", ")\n", "):\n    pass\n", "\n    return x\n", "END", "    b\n}\n", "x = 1\n", "x\n    return x"]
STOPS = ["END", ";", "\n\n", "x\ny", ")"]


def decoded(pieces: list[str]) -> str:
    """The tokenizer's text for these tokens: an unfinished character decodes to U+FFFD."""
    return "".join("\ufffd" if p == PARTIAL and i == len(pieces) - 1 else "é" if p == PARTIAL else p
                   for i, p in enumerate(pieces))


def reference(pieces, prefix, suffix, cfg, max_tokens):
    """The decode loop's text rules written out plainly: the final text and its stop reason."""
    ctx = StopContext.from_cursor(prefix, suffix)
    text, reason = "", None
    for n in range(1, len(pieces) + 1):
        text = decoded(pieces[:n])
        stop = check_text(text, ctx, cfg)
        if stop is not None and stop.reason != "stop_string":
            return postprocess(text[: stop.cut], suffix), stop.reason
        if stop is not None:  # cut at a stop string: its last line is complete, so the line rules judge it
            text, reason = text[: stop.cut], stop.reason
            break
        if n >= max_tokens:
            reason = "max_tokens"
            break
    reason = reason or "eos"
    if reason == "max_tokens":  # half a character at the end; a U+FFFD inside the text is a real one
        text = text.rstrip("\ufffd")
        if block_mode(cfg, ctx) and cfg.stop_at_block_end and "\n" in text and text[: text.rfind("\n")].strip():
            text = text[: text.rfind("\n")]  # the cap fell inside the block's last line: dropped
    stop = check_text(text, ctx, cfg, final=True)
    if stop is not None:
        text = text[: stop.cut]
    return postprocess(text, suffix), reason


def run(pieces, prefix, suffix, cfg, max_tokens):
    """CompletionText driven like the session's loop; (final text, reason, streamed deltas)."""
    deltas: list[str] = []
    completion = CompletionText(prefix, suffix, cfg, TextStream(deltas.append))
    reason = None
    for n in range(1, len(pieces) + 1):
        reason = completion.feed(decoded(pieces[:n]), at_limit=n >= max_tokens)
        if reason is not None:
            break
    reason = reason or "eos"
    return completion.end(reason), reason, deltas


@settings(max_examples=3000, deadline=None)
@given(pieces=st.lists(st.sampled_from(PIECES), min_size=1, max_size=14), prefix=st.sampled_from(PREFIXES),
       suffix=st.sampled_from(SUFFIXES), multiline=st.booleans(), block_end=st.booleans(),
       strings=st.lists(st.sampled_from(STOPS), max_size=3, unique=True), max_tokens=st.integers(1, 16))
# a line at the block's indent waits for its first word, then is dropped: held back until then
@example(["\n        ", "a", "\n    ", "x", " = 1", "\n"], "    if ok:", "", True, True, [], 16)
# a real U+FFFD inside the text stays when the token cap ends it after a dropped line
@example(["\n  ", "\ufffd", "\n", "a"], "", "", True, True, [], 4)
# "E", "ND": the end of the text may begin a stop string
@example(["a", "E", "ND"], "x = ", "\n", False, True, ["END"], 16)
# a line that repeats the line before it ends the block before it
@example(["\n    ", "x", "\n    ", "x", "\n"], "def f():", "", True, True, [], 16)
# the token cap inside a block's last line drops it
@example(["\n    ", "x", " = 1", "\n    ", "y"], "def f():", "", True, True, [], 5)
# lines that repeat the suffix are dropped when the completion ends (no block rule to hold them)
@example(["\n    ", "a", "\n    ", "return", " x"], "def f():", "\n    return x\n", True, False, [], 16)
def test_streamed_deltas_are_exactly_the_final_text(pieces, prefix, suffix, multiline, block_end, strings,
                                                    max_tokens):
    cfg = StopConfig(max_tokens=max_tokens, multiline=multiline, stop_at_block_end=block_end, strings=tuple(strings))
    final, reason, deltas = run(pieces, prefix, suffix, cfg, max_tokens)
    assert (final, reason) == reference(pieces, prefix, suffix, cfg, max_tokens)
    assert "".join(deltas) == final


def test_a_single_line_streams_token_by_token():
    cfg = StopConfig(multiline=False)
    final, reason, deltas = run(["return", " a", " +", " b", "\n", "x"], "    ", "\n", cfg, 64)
    assert (final, reason) == ("return a + b", "newline")
    assert deltas == ["return", " a", " +", " b"]  # each settled at once; the newline ended it


def test_text_that_may_still_change_is_held_back():
    single = StopConfig(multiline=False, strings=("END",))
    assert settled_text("foo E", "\n", single) == "foo"  # "E" may begin END; the space may be trailing
    assert settled_text("foo(a", ")\n", single) == "foo(a"  # ")" not typed yet: nothing to drop
    assert settled_text("foo(a)", ")\n", single) == "foo(a"  # the ")" may repeat the suffix's
    assert settled_text("caf\ufffd", "", single) == "caf"  # half a character
    multi = StopConfig(multiline=True)
    assert settled_text("\n    a = 1\n    b", "", multi) == "\n    a = 1"  # a block end may cut before "    b"
    assert settled_text("\n    a = 1\n    ret", "    return x\n", multi) == "\n    a = 1"


def test_a_stream_never_takes_text_back():
    sent: list[str] = []
    stream = TextStream(sent.append)
    stream.advance("abc")
    stream.advance("ab")  # shorter: nothing new, and nothing retracted
    assert sent == ["abc", ""]
    with pytest.raises(StreamDiverged):
        stream.advance("abd!")
    with pytest.raises(StreamDiverged):
        stream.close("xyz")
    stream.close("abcdef")
    assert "".join(sent) == "abcdef"
