"""Text stop rules, checked on the decoded completion after every token.

Token-level stops (FIM end / EOS token, max tokens) live in the decode loop; this module
decides where the *text* ends:

single-line mode  (multiline False) The completion ends at its first newline. A newline that comes before any
                  other text is allowed when the cursor sits at the end of its line (so
                  `def f():|` can be completed with the next line's statement); the completion
                  then ends at the following newline.
multi-line mode   (multiline True) The completion ends where its code leaves the cursor's block. With `ref` the
                  indentation of the cursor line, a later line (with content) ends it when
                  - it is indented less than `ref` (dedent out of the block), or
                  - it is indented exactly `ref` after some completion line went deeper (the
                    completion opened a block and closed it): a closing line (`}`, `)`, `]`,
                    `end`, ...) is kept and ends the completion; a continuation (`else`,
                    `elif`, `except`, `finally`, `catch`) is kept and decoding goes on;
                    anything else is dropped;
                  - it repeats the line before it: the same indentation and the same code, with a
                    word character in it (`self.x = x` twice; not `}` twice) — a small model's loop,
                    which the token-level stop (repetition.py) misses when its unit is a whole
                    line; the repeat is dropped (reason "repeated_line").
                  Cut by the token cap, a block drops its unfinished last line when an earlier line
                  has content (`last_line_dropped`).
auto              (multiline "auto", what an editor's inline completion wants) Mid-line, or
                  after text on the cursor line, single-line mode: the rest of the line.
                  On a blank line (only whitespace before and after the cursor), multi-line
                  mode that also ends at the first blank line after some content: the block
                  the user starts there, up to a dedent out of it or a blank line.
stop strings      (every mode; `StopConfig.strings`, OpenAI's `stop`) the completion ends
                  just before the first occurrence of any of them, unless a line rule above
                  ends it earlier.
Tabs count as 4 columns."""

from __future__ import annotations

import re
from dataclasses import dataclass

from umbra.engine.config import StopConfig

_TAB = 4
_CLOSER = re.compile(r"[}\])]|</|end\b")
_CONTINUER = re.compile(r"(?:[})\]]\s*)?(?:else|elif|except|finally|catch)\b")


def indent_width(line: str) -> int:
    stripped = line.lstrip(" \t")
    return len(line[: len(line) - len(stripped)].expandtabs(_TAB))


@dataclass(frozen=True)
class StopContext:
    indent: int  # indentation of the cursor line
    at_line_end: bool  # nothing but whitespace follows the cursor on its line
    blank_line: bool = False  # nothing but whitespace before and after the cursor on its line

    @classmethod
    def from_cursor(cls, prefix: str, suffix: str) -> "StopContext":
        line = prefix[prefix.rfind("\n") + 1 :]
        rest = suffix.split("\n", 1)[0]
        return cls(indent_width(line), not rest.strip(), not line.strip() and not rest.strip())


def block_mode(cfg: StopConfig, ctx: StopContext) -> bool:
    """Whether the completion is a block (multi-line rules) rather than the rest of a line."""
    if cfg.multiline == "auto":
        return ctx.blank_line
    return bool(cfg.multiline)


@dataclass(frozen=True)
class TextStop:
    cut: int  # the completion is text[:cut]
    reason: str  # "newline" | "block_end" | "blank_line" | "repeated_line" | "stop_string"


def check_text(text: str, ctx: StopContext, cfg: StopConfig, final: bool = False) -> TextStop | None:
    """Where the completion `text` (decoded so far) ends, or None to keep decoding. `final`
    says decoding has ended for another reason, so an unfinished last line is complete."""
    rule = _line_rule(text, ctx, cfg, final)
    hit = _stop_string(text, cfg.strings)
    if hit is not None and (rule is None or hit.cut <= rule.cut):
        return hit
    return rule


def _line_rule(text: str, ctx: StopContext, cfg: StopConfig, final: bool) -> TextStop | None:
    if not block_mode(cfg, ctx):
        return _single_line(text, ctx)
    if cfg.stop_at_block_end:
        rules = (_block_end(text, ctx, final, at_blank_line=cfg.multiline == "auto"),
                 _repeated_line(text, ctx, final))
        return min((r for r in rules if r is not None), key=lambda r: r.cut, default=None)
    return None


def _stop_string(text: str, strings: tuple[str, ...]) -> TextStop | None:
    cuts = [at for s in strings if (at := text.find(s)) != -1]
    return TextStop(min(cuts), "stop_string") if cuts else None


def _single_line(text: str, ctx: StopContext) -> TextStop | None:
    first = text.find("\n")
    if first == -1:
        return None
    if text[:first].strip() or not ctx.at_line_end:
        return TextStop(first, "newline")
    # Leading newline(s) at the end of a line: complete the next line with content.
    start = first
    while True:
        nxt = text.find("\n", start + 1)
        if nxt == -1:
            return None
        if text[start + 1 : nxt].strip():
            return TextStop(nxt, "newline")
        start = nxt


def _block_end(text: str, ctx: StopContext, final: bool, at_blank_line: bool = False) -> TextStop | None:
    """The multi-line rules; `at_blank_line` also ends the block at its first blank line after
    some content."""
    ref = ctx.indent
    deeper = False
    pos = text.find("\n")
    if pos == -1:
        return None
    seen = bool(text[:pos].strip())  # the block has content before the line under inspection
    while pos != -1:  # `pos` is the newline that starts the line under inspection
        start = pos + 1
        end = text.find("\n", start)
        line = text[start:] if end == -1 else text[start:end]
        content = line.lstrip(" \t")
        if not content:  # blank, or indentation not finished yet
            if at_blank_line and seen and end != -1:
                return TextStop(pos, "blank_line")
            pos = end
            continue
        seen = True
        width = indent_width(line)
        if width < ref:
            return TextStop(pos, "block_end")
        if width > ref:
            deeper = True
        elif deeper:
            if end == -1 and not final:  # the line's first word decides: wait for all of it
                return None
            if _CONTINUER.match(content):
                deeper = False
            elif _CLOSER.match(content):
                return TextStop(len(text) if end == -1 else end, "block_end")
            else:
                return TextStop(pos, "block_end")
        pos = end
    return None


_WORD = re.compile(r"\w")


def _repeated_line(text: str, ctx: StopContext, final: bool) -> TextStop | None:
    """The first complete line that repeats the complete line before it (the same indentation
    and code, with a word character in it) ends the block at the newline before it. The
    completion's first line is the cursor line's, compared only when the cursor line was blank
    (its indentation is then `ctx.indent`); a line is complete once a newline follows it, or at
    the end when `final`."""
    lines = text.split("\n")
    complete = len(lines) if final else len(lines) - 1
    keys = [(indent_width(line), line.strip()) for line in lines[:complete]]
    if keys and ctx.blank_line:
        keys[0] = (ctx.indent + keys[0][0], keys[0][1])
    pos = len(lines[0])  # the newline before line k (k >= 1)
    for k in range(1, complete):
        if (k > 1 or ctx.blank_line) and keys[k] == keys[k - 1] and _WORD.search(keys[k][1]):
            return TextStop(pos, "repeated_line")
        pos += 1 + len(lines[k])
    return None


def last_line_dropped(text: str) -> str:
    """A block cut by the token cap, without its last line (unfinished: the cap fell inside it)
    when an earlier line has content; else the text as it is. Never takes back streamed text:
    a block streams whole lines only (completion_text.settled_text)."""
    newline = text.rfind("\n")
    return text[:newline] if newline != -1 and text[:newline].strip() else text


_OPENERS = {"(": ")", "[": "]", "{": "}"}
_QUOTES = "\"'`"


def _balanced(text: str) -> list[bool]:
    """ok[i] for i in 0..len(text): True when every bracket and quote opened inside text[:i] is
    closed there (a closer of something opened before the completion is fine; a line comment
    (`#`, `//`) hides brackets and quotes up to its line's end)."""
    ok, stack, comment, escaped = [True], [], False, False
    for i, ch in enumerate(text):
        in_string = bool(stack) and stack[-1] in _QUOTES
        if ch == "\n":
            comment = False
            if in_string and stack[-1] != "`":  # a quote never spans lines (but Go's raw strings)
                stack.pop()
        elif comment:
            pass
        elif in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == stack[-1]:
                stack.pop()
        elif ch in _QUOTES:
            stack.append(ch)
        elif ch in _OPENERS:
            stack.append(_OPENERS[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
        elif ch == "#" or text.startswith("//", i):
            comment = True
        ok.append(not stack and not escaped)
    return ok


def _word_boundary(text: str, i: int) -> bool:
    """A cut at i splits no identifier, and text[:i] does not end in a word the decode may have
    been in the middle of (`os.path.jo`)."""
    return not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_") and
                (i == len(text) or text[i].isalnum() or text[i] == "_"))


def unfinished_cut(text: str) -> int:
    """Where a completion cut short mid-way (a latency deadline) ends where a user would end it:
    at its last line end that leaves no bracket or quote opened by the completion unclosed, when
    an earlier line has content; else at the last point of that kind that splits no word
    (`os.path.jo` -> `os.path.`, `f'<{path}<{pa` -> `f`, `foo(a, ` -> `foo`); 0 when none."""
    ok = _balanced(text)
    lines = [i for i, ch in enumerate(text) if ch == "\n" and ok[i] and text[:i].strip()]
    if lines:
        return lines[-1]
    return next(i for i in range(len(text), -1, -1) if ok[i] and _word_boundary(text, i))
