"""The file's own conventions around a completion: line endings and the indentation unit.

Models learn from LF files indented as their training code was (Go with tabs, Python and Java
with spaces). An editor's buffer may differ: a CRLF file on Windows, a Python file indented with
tabs, a Java file indented with tabs or two spaces. The engine reads the buffer as LF and the
model writes its own indentation; `FileStyle` maps the completion back:

- CRLF: when the buffer's lines end in `\\r\\n`, the model sees `\\n` (a `\\r` before every newline
  is text it rarely saw) and the completion's newlines are written as `\\r\\n`.
- Indentation unit: the leading blanks of each new line of the completion (never the cursor's
  own line, whose indentation the editor already wrote) are rewritten in the file's unit: tabs in
  a tab-indented file (each `model_width` spaces the model wrote become a tab), spaces in a
  space-indented file (each tab becomes the file's width in spaces).

`FileStyle.render` is stable under growth: rendering a text and then a longer text that starts
with it gives results that start with each other, as long as the shorter one does not end inside
a line's leading blanks — which settled streaming text never does (completion_text.py strips
trailing blanks) — so streamed deltas are rendered as they come."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

_LEADING = re.compile(r"^[ \t]+", re.MULTILINE)
_SAMPLE_LINES = 400  # lines of each side read to tell the file's style


@dataclass(frozen=True)
class FileStyle:
    crlf: bool = False  # the buffer's lines end in \r\n
    tabs: bool | None = None  # True: indents with tabs; False: with spaces; None: unknown (leave as written)
    width: int = 4  # spaces per indentation level in a space-indented file
    model_width: int = 4  # spaces the model writes per level (read from what it writes, else 4)

    @classmethod
    def of(cls, prefix: str, suffix: str) -> "FileStyle":
        """The style of the buffer around the cursor."""
        head = prefix.rsplit("\n", _SAMPLE_LINES)[1:] + suffix.split("\n", _SAMPLE_LINES)[:-1]
        ended = [line for line in head[:-1] if line]
        crlf = bool(ended) and sum(line.endswith("\r") for line in ended) * 2 > len(ended)
        indents = [m.group(0) for m in _LEADING.finditer("\n".join(head))]
        tabbed = sum(i.startswith("\t") for i in indents)
        spaced = len(indents) - tabbed
        if not indents:
            return cls(crlf=crlf)
        if tabbed > spaced:
            return cls(crlf=crlf, tabs=True)
        return cls(crlf=crlf, tabs=False, width=_unit([len(i) for i in indents if i.startswith(" ")]))

    def read(self, text: str) -> str:
        """Buffer text as the model reads it (LF line ends)."""
        return text.replace("\r\n", "\n") if self.crlf else text

    def render(self, completion: str) -> str:
        """The model's completion (LF, its own indentation) as the buffer writes it."""
        text = self._reindent(completion)
        return text.replace("\n", "\r\n") if self.crlf else text

    def stream(self, on_text: Callable[[str], None]) -> Callable[[str], None]:
        """`on_text` fed with rendered deltas of a stream of raw deltas."""
        raw = [""]

        def forward(delta: str) -> None:
            before = self.render(raw[0])
            raw[0] += delta
            after = self.render(raw[0])
            on_text(after[len(before):])

        return forward

    def _reindent(self, text: str) -> str:
        if self.tabs is None or "\n" not in text:
            return text
        first, _, rest = text.partition("\n")
        return first + "\n" + _LEADING.sub(lambda m: self._indent(m.group(0)), rest)

    def _indent(self, blanks: str) -> str:
        if self.tabs:
            spaces = len(blanks) - len(blanks.lstrip(" "))  # leading spaces, before any tab
            levels, odd = divmod(spaces, self.model_width)
            return "\t" * levels + " " * odd + blanks[spaces:]
        return blanks.replace("\t", " " * self.width)


def _unit(widths: list[int]) -> int:
    """The indentation unit of space-indented lines: the shallowest indentation, when it is a
    plausible unit (1–8 spaces), else 4."""
    shallowest = min(widths, default=4)
    return shallowest if 1 <= shallowest <= 8 else 4
