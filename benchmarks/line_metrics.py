"""How a user judges one completion at a position (benchmarks/line_completion.py), and the sums
over a cell of positions.

    s = score(completion, target, prefix, block=None)     # one completion -> Scores
    cell = Cell(); cell.add(s, seconds); cell.row()         # a cell's counts, rates and latency

The completion's first line is what the editor shows on the cursor's line; `target` is the rest
of that line in the file (trailing blanks dropped, as the engine drops them).

  exact        the first line equals the target (trailing blanks aside); a completion that stops
               before the line's end is not exact
  accepted     exact, or the first line is a strict prefix of the target of at least
               ACCEPT_CHARS characters: a user would take it and type on
  edit_sim     1 - Levenshtein(first line, target) / the longer one's length (1 when both empty)
  blank_start  the completion starts with a space or tab while the cursor already stands after
               a blank (after the line's indentation, or after `x = `): it repeats blanks the
               line has, and an editor would indent the line twice
  ws_start     the completion starts with any whitespace, a newline included
  empty        the completion inserts nothing but whitespace
  block_exact  (block mode) every line of the completion equals the true block's, and there are as
               many (trailing blanks of each line and trailing blank lines aside)"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

ACCEPT_CHARS = 8


def first_line(text: str) -> str:
    return text.split("\n", 1)[0]


def levenshtein(a: str, b: str) -> int:
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def edit_similarity(a: str, b: str) -> float:
    longest = max(len(a), len(b))
    return 1.0 if longest == 0 else 1.0 - levenshtein(a, b) / longest


def cursor_after_blank(prefix: str) -> bool:
    """The cursor stands right after a space or tab on its line (its indentation included)."""
    return prefix[prefix.rfind("\n") + 1 :].endswith((" ", "\t"))


def block_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


@dataclass(frozen=True)
class Scores:
    exact: bool
    accepted: bool
    edit_sim: float
    blank_start: bool
    ws_start: bool
    empty: bool
    block_exact: bool | None  # None: not a block completion


def score(completion: str, target: str, prefix: str, block: str | None = None) -> Scores:
    """The scores of `completion` at a cursor after `prefix` whose line goes on with `target`;
    `block`: the true block, for a block completion."""
    shown, want = first_line(completion), first_line(target).rstrip()
    exact = shown.rstrip() == want
    prefix_taken = len(shown) >= ACCEPT_CHARS and len(shown) < len(want) and want.startswith(shown)
    return Scores(
        exact=exact,
        accepted=exact or prefix_taken,
        edit_sim=edit_similarity(shown.rstrip(), want),
        blank_start=completion[:1] in (" ", "\t") and cursor_after_blank(prefix),
        ws_start=completion[:1].isspace(),
        empty=not completion.strip(),
        block_exact=None if block is None else block_lines(completion) == block_lines(block),
    )


def quantile(values: list[float], q: float) -> float:
    """The nearest-rank quantile (NaN for none)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


COUNTS = ("exact", "accepted", "blank_start", "ws_start", "empty")


@dataclass
class Cell:
    """The sums over one cell's completions (one path)."""

    n: int = 0
    counts: dict = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    edit_sim: float = 0.0
    block_exact: int = 0
    block_fit: int = 0  # true blocks that fit the token cap
    block_fit_exact: int = 0
    seconds: list = field(default_factory=list)

    def add(self, s: Scores, seconds: float, fits: bool | None = None) -> None:
        self.n += 1
        for name in COUNTS:
            self.counts[name] += getattr(s, name)
        self.edit_sim += s.edit_sim
        if s.block_exact is not None:
            self.block_exact += s.block_exact
            if fits:
                self.block_fit += 1
                self.block_fit_exact += s.block_exact
        self.seconds.append(seconds)

    def row(self, block: bool) -> dict:
        """Counts (the rates' numerators), the mean edit similarity and latency quantiles in ms."""
        out = {"n": self.n, **self.counts, "edit_sim": round(self.edit_sim / self.n, 4) if self.n else None,
               "p50_ms": round(1000 * quantile(self.seconds, 0.5), 1),
               "p95_ms": round(1000 * quantile(self.seconds, 0.95), 1)}
        if block:
            out |= {"block_exact": self.block_exact, "block_fit": self.block_fit,
                    "block_fit_exact": self.block_fit_exact}
        return out
