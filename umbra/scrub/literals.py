"""Where a source text's string literals and comments are, approximately and fast: one regex
pass over triple-quoted, double-, single- and backtick-quoted strings and `#`, `//` and `/* */`
comments. Host names are only taken from these regions in code files — in code proper,
`threading.local` and `options.local` are attribute chains, not hosts.

It errs towards "literal": Python's `//` operator starts a "comment", which can only make a host
after it count. Computed once per text, and only when a host candidate needs it."""

from __future__ import annotations

import bisect
import os
import re

_REGIONS = re.compile(
    r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\''
    r'|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|`[^`]*`'
    r"|#[^\n]*|//[^\n]*|/\*[\s\S]*?\*/"
)
# Files whose text is code: elsewhere (configs, docs, shell) a host name counts wherever it stands.
CODE_EXTENSIONS = frozenset({
    ".py", ".pyi", ".pyx", ".java", ".go", ".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx", ".c", ".h", ".cc", ".cpp",
    ".cxx", ".hpp", ".hh", ".cs", ".rb", ".rs", ".kt", ".kts", ".scala", ".swift", ".php", ".m", ".mm", ".dart",
    ".groovy", ".lua", ".pl", ".pm", ".r", ".jl", ".ex", ".exs", ".erl", ".hs", ".clj", ".fs", ".vb", ".sol",
})


def is_code(path: str | None) -> bool:
    """Text of unknown origin (no path) is treated as code: this is a scrubber for code."""
    return path is None or os.path.splitext(str(path))[1].lower() in CODE_EXTENSIONS


class LiteralMap:
    """The [start, end) regions of `text` that are string literals or comments."""

    def __init__(self, text: str):
        self._starts: list[int] = []
        self._ends: list[int] = []
        for m in _REGIONS.finditer(text):
            self._starts.append(m.start())
            self._ends.append(m.end())

    def contains(self, pos: int) -> bool:
        i = bisect.bisect_right(self._starts, pos) - 1
        return i >= 0 and pos < self._ends[i]
