"""The text side of one completion's decode loop: where the text stops, its final clean-up, and
— for a streaming caller — the part of it that can no longer change.

    text = CompletionText(prefix, suffix, cfg.stop, stream=TextStream(on_text))
    reason = text.feed(decoded_so_far, at_limit=len(generated) >= cfg.stop.max_tokens)  # per token
    final = text.end(reason or "eos")                                                   # once

`feed` applies the text stop rules (stops.py) to the text decoded so far; it returns the stop
reason once the completion ends there ("max_tokens" when `at_limit`), else None, after handing
the settled text to the stream. `end` applies the rules once more to an unfinished last line,
drops half a character cut by the token cap, and post-processes (postprocess.py).

Streaming. A later token can still change what the editor gets: a stop rule may cut the text
before it, post-processing may drop an overlap with the suffix, trailing whitespace is
stripped, a partly decoded character is replaced. `settled_text` is the longest text that every
possible continuation's final text starts with; the stream sends only what it adds. So the
deltas a caller receives concatenate to the final text, exactly — `TextStream` checks it and
raises StreamDiverged rather than send text that would have to be taken back."""

from __future__ import annotations

import re
from collections.abc import Callable

from umbra.engine.config import StopConfig
from umbra.engine.postprocess import postprocess, strip_trailing_whitespace
from umbra.engine.stops import StopContext, block_mode, check_text, last_line_dropped, unfinished_cut
from umbra.errors import StreamDiverged

_WS = re.compile(r"\s+")
_PARTIAL_CHAR = "\ufffd"  # what the tokenizer decodes the bytes of an unfinished character to


class TextStream:
    """Hands a caller's `on_text(delta)` the settled text as it grows: once per decode step
    ("" when that step settled nothing new) and once at the end with the rest."""

    def __init__(self, on_text: Callable[[str], None]):
        self.on_text = on_text
        self.sent = ""

    def advance(self, settled: str) -> None:
        delta = ""
        if len(settled) > len(self.sent):
            self._check(settled)
            delta, self.sent = settled[len(self.sent):], settled
        self.on_text(delta)

    def close(self, final: str) -> None:
        self._check(final)
        rest, self.sent = final[len(self.sent):], final
        if rest:
            self.on_text(rest)

    def _check(self, text: str) -> None:
        if not text.startswith(self.sent):  # a request restarted after the cloud dropped its session
            raise StreamDiverged("the completion changed after part of it was streamed (the cloud dropped "
                                 "the session and the restarted completion differs)")


class CompletionText:
    def __init__(self, prefix: str, suffix: str, cfg: StopConfig, stream: TextStream | None = None):
        self.ctx = StopContext.from_cursor(prefix, suffix)
        self.suffix = suffix
        self.cfg = cfg
        self.stream = stream
        self.text = ""
        self.reason: str | None = None  # set by a text stop rule

    def feed(self, text: str, at_limit: bool = False) -> str | None:
        """The text decoded so far (after one more token): the stop reason if the completion
        ends here, else None."""
        stop = check_text(text, self.ctx, self.cfg)
        if stop is not None:
            self.text, self.reason = text[: stop.cut], stop.reason
            return self.reason
        self.text = text
        if at_limit:
            return "max_tokens"
        if self.stream is not None:
            self.stream.advance(settled_text(text, self.suffix, self.cfg, self.ctx))
        return None

    def shows_if_cut(self) -> bool:
        """Whether the text so far, cut short now (a deadline), leaves anything to show: a whole
        word or line, what `end("deadline")` would return, is not empty."""
        return bool(self._cut_short(self.text))

    def end(self, reason: str) -> str:
        """The completion's final text, once decoding stopped for `reason` ("deadline": cut
        short, so trimmed to its last whole line or word: stops.unfinished_cut)."""
        if reason == "deadline":
            final = self._cut_short(self.text)
        else:
            final = postprocess(self._complete_text(reason), self.suffix)
        if self.stream is not None:
            self.stream.close(final)
        return final

    def _complete_text(self, reason: str) -> str:
        text = self.text
        if reason == "max_tokens":
            text = text.rstrip(_PARTIAL_CHAR)  # bytes of a character the cap cut in half
            if block_mode(self.cfg, self.ctx) and self.cfg.stop_at_block_end:
                text = last_line_dropped(text)
        if reason in ("eos", "max_tokens", "stop_string", "repetition"):  # the last line is complete: rules apply
            stop = check_text(text, self.ctx, self.cfg, final=True)
            if stop is not None:
                text = text[: stop.cut]
        return text

    def _cut_short(self, text: str) -> str:
        """`text` cut short mid-way, post-processed: up to its last whole line or word."""
        text = text.rstrip(_PARTIAL_CHAR)  # bytes of a character the deadline cut in half
        text = text[: unfinished_cut(text)]
        return postprocess(text, self.suffix) if text.strip() else ""


def settled_text(text: str, suffix: str, cfg: StopConfig, ctx: StopContext | None = None) -> str:
    """The longest text that the final text of every continuation of `text` starts with, when
    decoding goes on after `text` (no stop rule fired on it); `ctx` the cursor's (stops.py;
    None: the cursor of an empty document)."""
    end = len(text.rstrip(_PARTIAL_CHAR))  # a partly decoded character changes when it completes
    end = min(end, len(text) - _partial_stop(text, cfg.strings))  # may become a stop string
    if block_mode(cfg, ctx or StopContext.from_cursor("", suffix)) and cfg.stop_at_block_end:
        # A block-end cut falls on a newline; lines complete before the one holding `end` are
        # judged already (stops.py), that one may still be cut at the newline before it.
        newline = text.rfind("\n", 0, end)
        end = newline if newline != -1 else end
    kept = text[:end]
    end = min(_repeat_start(kept, suffix), _overlap_start(kept, suffix))
    return strip_trailing_whitespace(kept[:end])


def _partial_stop(text: str, strings: tuple[str, ...]) -> int:
    """Length of the longest end of `text` that begins one of the stop strings."""
    longest = 0
    for s in strings:
        for n in range(min(len(s) - 1, len(text)), longest, -1):
            if text.endswith(s[:n]):
                longest = n
                break
    return longest


def _repeat_start(text: str, suffix: str) -> int:
    """Where postprocess may yet drop lines that repeat the suffix: the first newline after
    which the text, whitespace removed, begins the suffix (postprocess.drop_repeated_suffix_lines)."""
    squeezed = _WS.sub("", suffix)
    if not squeezed:
        return len(text)
    start = text.find("\n")
    while start != -1:
        if squeezed.startswith(_WS.sub("", text[start + 1:])):
            return start
        start = text.find("\n", start + 1)
    return len(text)


def _overlap_start(text: str, suffix: str) -> int:
    """Where postprocess may yet drop an overlap with the rest of the cursor line: the earliest
    end of the text (trailing whitespace aside) that begins it (postprocess.drop_line_overlap)."""
    rest = suffix.split("\n", 1)[0].rstrip()
    body = text.rstrip()
    for start in range(max(0, len(body) - len(rest)), len(body)):
        if rest.startswith(body[start:]):
            return start
    return len(body)
