"""Cursor positions an editor produces, drawn from a set's files (benchmarks/line_completion.py).

    docs = load_set(ROOT, "test", "python")                 # [{"path", "text"}, ...]; SetError if unusable
    positions, skipped = choose_positions(docs, "python", n=300, seed=0)
    p.prefix, p.target, p.line_suffix                        # single-line completion at p
    p.block, p.block_suffix                                  # block completion at p

Two kinds of position, half of the positions each:

  after-indent  the cursor after the indentation of a real, non-blank line inside a body
                (indented more than column 0): where an editor leaves it after Enter. The target
                is the line's whole code.
  mid-line      the cursor after a typed part of a non-blank line: a random cut inside its code,
                at least MIN_TYPED characters after the indentation, before the last character.
                The target is the rest of the line.

Never scored, and counted (the `skipped` Counter, by reason): the comment lines that open a file
(its license header, copied verbatim between the files of a project: a memory test, not
completion) for either kind; an after-indent line whose code is only closing brackets and
punctuation (`}`, `)`, `]);`, `},`): the editor closes those itself, and so would a trivial
completion; an after-indent line continuing a block comment (`* ...`): after Enter there an
editor has typed the `* ` itself, so the cursor is not after the indentation; a mid-line line
whose code is too short for a cut (fewer than MIN_TYPED + 1 characters), or where every cut
leaves only such closers. Blank lines are no candidates.

Several positions per file, as an editor user completes many times in one file: the files are
put in a seeded random order, and each kind takes up to PER_FILE / 2 candidate lines (in a seeded
random order) from each file in turn until it has its share (another pass over the files if one
is not enough), so both kinds come from the same first files (a line may give one of each). The
draw depends on the seed, the language and the files' text only (files are taken in path order
first), and a smaller draw is part of a larger one with the same seed: a quick run checks a
subset of a long run's positions. Skipped lines are counted over all the set's files.

The true block at a position (what block mode should produce) follows the documented rules of
the engine's multi-line mode (umbra/engine/stops.py), written out here so that the truth does
not move with the engine under test: from the cursor line on, lines go on until one with code
is indented less than the cursor line; once a line went deeper, a line back at the cursor
line's indentation ends it — kept if it is a closer (`}`, `)`, `]`, `end`), kept and going on if
it is a continuation (`else`, `elif`, `except`, `finally`, `catch`), left out otherwise. Tabs
count 4 columns; blank lines inside the block are kept, trailing ones are not."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("after-indent", "mid-line")
SETS = {"test": "data/corpus/test/{lang}.jsonl", "heldout": "data/heldout/{lang}.jsonl"}
MIN_TYPED = 3  # code characters typed on the line before a mid-line cursor
PER_FILE = 4  # positions a file gives in one pass over the files, half of each kind
TAB = 4
_TRIVIAL = re.compile(r"[)\]}][)\]};,]*")  # only closing brackets, then ; , or more closers
_CLOSER = re.compile(r"[}\])]|</|end\b")
_COMMENT = re.compile(r"#|//|/\*|\*")  # a line of comment (after its indentation)
_CONTINUER = re.compile(r"(?:[})\]]\s*)?(?:else|elif|except|finally|catch)\b")


class SetError(ValueError):
    """The set cannot be read, or holds nothing to draw positions from."""


def set_path(root: Path, name: str, lang: str) -> Path:
    if name not in SETS:
        raise SetError(f"unknown set {name!r} (choose from {', '.join(SETS)})")
    return root / SETS[name].format(lang=lang)


def load_set(root: Path, name: str, lang: str) -> list[dict]:
    """The set's files of `lang`: JSON lines of {"path", "text"}, in path order."""
    path = set_path(root, name, lang)
    if not path.is_file():
        hint = " (run `umbra data build`)" if name == "test" else " (build the held-out set first, or pass --set test)"
        raise SetError(f"set {name!r} has no {lang} file: {path} is missing{hint}")
    docs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            raise SetError(f"{path}:{number} is not JSON") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("path"), str) or not isinstance(doc.get("text"), str):
            raise SetError(f"{path}:{number} is not a {{\"path\", \"text\"}} object")
        docs.append(doc)
    if not docs:
        raise SetError(f"set {name!r} is empty for {lang}: {path} holds no files")
    return sorted(docs, key=lambda d: d["path"])


def indent_width(line: str) -> int:
    return len(line[: len(line) - len(line.lstrip(" \t"))].expandtabs(TAB))


def trivial(code: str) -> bool:
    """Nothing worth completing: blank, or only closing brackets and punctuation."""
    code = code.strip()
    return not code or _TRIVIAL.fullmatch(code) is not None


@dataclass(frozen=True)
class Position:
    lang: str
    path: str
    line: int  # 0-based line of the cursor
    kind: str  # KINDS
    cursor: int  # offset of the cursor in `text`
    line_end: int  # offset of the end of the target line's code (trailing blanks excluded)
    block_end: int  # offset of the end of the true block starting at the cursor
    text: str = field(repr=False, compare=False)

    @property
    def prefix(self) -> str:
        return self.text[: self.cursor]

    @property
    def target(self) -> str:
        """The rest of the cursor's line: what a single-line completion should insert."""
        return self.text[self.cursor : self.line_end]

    @property
    def line_suffix(self) -> str:
        """The file after the target line (from its newline on)."""
        return self.text[_next_newline(self.text, self.line_end) :]

    @property
    def block(self) -> str:
        """The true block from the cursor on (the target line, then whole lines)."""
        return self.text[self.cursor : self.block_end]

    @property
    def block_suffix(self) -> str:
        return self.text[_next_newline(self.text, self.block_end) :]


def _next_newline(text: str, at: int) -> int:
    nl = text.find("\n", at)
    return len(text) if nl == -1 else nl


def block_end(lines: list[str], starts: list[int], row: int) -> int:
    """Offset of the end of the true block whose first line is `row` (see the module)."""
    ref, deeper = indent_width(lines[row]), False
    end = starts[row] + len(lines[row].rstrip())
    for j in range(row + 1, len(lines)):
        code = lines[j].strip()
        if not code:
            continue
        width, line_end = indent_width(lines[j]), starts[j] + len(lines[j].rstrip())
        if width < ref:
            break
        if width > ref:
            deeper, end = True, line_end
        elif not deeper:
            end = line_end
        elif _CONTINUER.match(code):
            deeper, end = False, line_end
        else:
            if _CLOSER.match(code):
                end = line_end
            break
    return end


@dataclass
class _File:
    doc: dict
    lines: list[str]
    starts: list[int]
    header: int  # lines of the comment block that opens the file (blank lines among them)


def _split(doc: dict) -> _File:
    lines = doc["text"].split("\n")
    starts, at = [], 0
    for line in lines:
        starts.append(at)
        at += len(line) + 1
    header = 0
    while header < len(lines) and (not lines[header].strip() or _COMMENT.match(lines[header].strip())):
        header += 1
    return _File(doc, lines, starts, header)


def _after_indent_rows(f: _File, skipped: Counter) -> list[int]:
    rows = []
    for i, line in enumerate(f.lines):
        if not line.strip() or indent_width(line) == 0:
            continue
        if i < f.header:
            skipped["after-indent: file header comment"] += 1
        elif trivial(line):
            skipped["after-indent: closing brackets only"] += 1
        elif line.strip().startswith("*"):
            skipped["after-indent: block comment continuation"] += 1
        else:
            rows.append(i)
    return rows


def _mid_line_cuts(line: str) -> list[int]:
    """Cursor columns of `line` a mid-line position may use (see the module)."""
    code = line.rstrip()
    start = len(line) - len(line.lstrip(" \t")) + MIN_TYPED
    return [c for c in range(start, len(code)) if not trivial(code[c:])]


def _mid_line_rows(f: _File, skipped: Counter) -> list[int]:
    rows = []
    for i, line in enumerate(f.lines):
        if not line.strip():
            continue
        if i < f.header:
            skipped["mid-line: file header comment"] += 1
        elif len(line.strip()) <= MIN_TYPED:
            skipped["mid-line: line too short to cut"] += 1
        elif not _mid_line_cuts(line):
            skipped["mid-line: only closing brackets after every cut"] += 1
        else:
            rows.append(i)
    return rows


def choose_positions(docs: list[dict], lang: str, n: int, seed: int, per_file: int = PER_FILE
                     ) -> tuple[list[Position], Counter]:
    """`n` positions of `lang` (fewer if the files have fewer candidates), half of each kind
    (after-indent first when `n` is odd), and the count of the set's lines skipped, by reason."""
    rng = random.Random(f"line-positions:{seed}:{lang}")
    files = [_split(d) for d in sorted(docs, key=lambda d: d["path"])]
    skipped: Counter = Counter()
    rows = {"after-indent": [_after_indent_rows(f, skipped) for f in files],
            "mid-line": [_mid_line_rows(f, skipped) for f in files]}
    for kind in KINDS:
        for candidates in rows[kind]:
            rng.shuffle(candidates)
    order = list(range(len(files)))
    rng.shuffle(order)
    per_pass = max(1, per_file // len(KINDS))  # of each kind from a file, per pass over the files
    positions: list[Position] = []
    for kind, share in zip(KINDS, ((n + 1) // 2, n // 2)):
        taken = 0
        while taken < share and any(rows[kind]):
            for fi in order:
                for _ in range(min(per_pass, len(rows[kind][fi]), share - taken)):
                    positions.append(_position(files[fi], lang, rows[kind][fi].pop(), kind, seed))
                    taken += 1
                if taken >= share:
                    break
    return positions, skipped


def _position(f: _File, lang: str, row: int, kind: str, seed: int) -> Position:
    line = f.lines[row]
    if kind == "after-indent":
        col = len(line) - len(line.lstrip(" \t"))
    else:  # the cut of a line depends on the seed and the line only, not on the draw's order
        col = random.Random(f"line-cut:{seed}:{lang}:{f.doc['path']}:{row}").choice(_mid_line_cuts(line))
    start = f.starts[row]
    return Position(lang, f.doc["path"], row, kind, start + col, start + len(line.rstrip()),
                    block_end(f.lines, f.starts, row), f.doc["text"])
