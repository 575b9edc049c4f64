"""The line benchmark's cursor positions (benchmarks/line_positions.py): after the indentation of a
real line and mid-line after a typed prefix, never on closers, headers or comment continuations,
drawn by the seed and spread over files (a smaller draw part of a larger one), and the true block
that follows a position."""

from __future__ import annotations

from collections import Counter

import pytest

from line_positions import MIN_TYPED, choose_positions, indent_width, trivial
from line_samples import DOCS, PY


def _line_of(p):
    return p.text.split("\n")[p.line]


def _of_kind(lang: str, kind: str) -> list:
    """(position, its whole line, the line's text before the cursor) for the positions of `kind`."""
    positions, _ = choose_positions(DOCS[lang], lang, 200, seed=1)
    chosen = [p for p in positions if p.kind == kind]
    assert chosen
    return [(p, _line_of(p), p.prefix[p.prefix.rfind("\n") + 1:]) for p in chosen]


@pytest.mark.parametrize("lang", sorted(DOCS))
def test_after_indent_positions_end_after_the_indentation_of_a_real_line(lang):
    for p, line, before in _of_kind(lang, "after-indent"):
        assert before and not before.strip() and before == line[: len(before)]  # the whole indentation, no more
        assert not p.text[p.cursor].isspace()
        assert p.target == line.strip() and not trivial(p.target)
        assert p.line_suffix == p.text[p.cursor + len(line) - len(before):]
        assert p.line_suffix.startswith("\n") or p.line_suffix == ""


@pytest.mark.parametrize("lang", sorted(DOCS))
def test_mid_line_positions_cut_inside_the_lines_code(lang):
    for p, line, typed in _of_kind(lang, "mid-line"):
        indent = len(line) - len(line.lstrip(" \t"))
        assert len(typed) - indent >= MIN_TYPED
        assert p.target and typed + p.target == line.rstrip() and not trivial(p.target)


def test_positions_skip_closers_header_comments_and_comment_continuations():
    positions, skipped = choose_positions(DOCS["java"], "java", 200, seed=0)
    chosen = {(p.kind, _line_of(p).strip()) for p in positions}
    after = {text for kind, text in chosen if kind == "after-indent"}
    assert "} else {" in after and "/**" in after
    assert not {"}", "*/", "* The path of a name."} & after
    assert not any("Copyright" in text for _, text in chosen)
    assert skipped["after-indent: closing brackets only"] == 2  # the two lone "}" indented
    assert skipped["after-indent: block comment continuation"] == 2  # "* The path..." and "*/" of the javadoc
    assert skipped["after-indent: file header comment"] == 2  # " * Copyright" and " */"
    py_positions, py_skipped = choose_positions(DOCS["python"], "python", 200, seed=0)
    assert py_skipped["after-indent: closing brackets only"] == 2  # "}" twice, one per file
    assert py_skipped["mid-line: file header comment"] == 4
    assert all(p.line >= 3 for p in py_positions)


def test_positions_are_determined_by_the_seed_and_spread_over_files():
    a, _ = choose_positions(DOCS["python"], "python", 10, seed=3)
    b, _ = choose_positions(list(reversed(DOCS["python"])), "python", 10, seed=3)
    c, _ = choose_positions(DOCS["python"], "python", 10, seed=4)
    key = [(p.path, p.line, p.cursor, p.kind) for p in a]
    assert key == [(p.path, p.line, p.cursor, p.kind) for p in b]
    assert key != [(p.path, p.line, p.cursor, p.kind) for p in c]
    assert Counter(p.kind for p in a) == {"after-indent": 5, "mid-line": 5}
    per_file = Counter(p.path for p in a)
    assert set(per_file) == {"store.py", "other.py"} and max(per_file.values()) - min(per_file.values()) <= 2
    assert len({(p.path, p.line, p.kind) for p in a}) == 10


def test_a_file_gives_several_positions_before_the_next_file_is_used():
    docs = [{"path": f"f{i}.py", "text": PY.replace("Store", f"Store{i}")} for i in range(6)]
    positions, _ = choose_positions(docs, "python", 8, seed=2)
    per_file = Counter((p.path, p.kind) for p in positions)
    assert len({path for path, _ in per_file}) == 2  # 4 positions each: 2 after-indent, 2 mid-line
    assert set(per_file.values()) == {2}


def test_a_smaller_draw_is_part_of_a_larger_one():
    docs = [{"path": f"f{i}.py", "text": PY.replace("Store", f"Store{i}")} for i in range(6)]
    for n in (1, 6, 13):
        small, _ = choose_positions(docs, "python", n, seed=7)
        large, _ = choose_positions(docs, "python", 40, seed=7)
        assert {(p.path, p.line, p.cursor) for p in small} < {(p.path, p.line, p.cursor) for p in large}


def test_the_true_block_follows_the_multi_line_rules():
    positions, _ = choose_positions(DOCS["python"] + DOCS["java"], "python", 400, seed=0)
    by_target = {(p.path, p.target): p for p in positions if p.kind == "after-indent"}
    # sibling lines go on; back at the cursor's indentation after going deeper, a line that is no
    # closer or continuation ends the block, left out
    assert by_target[("store.py", "self.root = root")].block == (
        'self.root = root\n        self.items = {\n            "a": 1,\n        }')
    assert by_target[("store.py", "for name in argv[1:]:")].block == (
        "for name in argv[1:]:\n        print(store.path(name))")
    assert by_target[("store.py", "if not name:")].block == 'if not name:\n            raise ValueError("no name")'
    assert by_target[("store.py", "if not name:")].block_suffix.startswith("\n        return os.path.join")
    assert by_target[("store.py", "return 0")].block == "return 0"  # the file ends
    # back at the cursor's indentation after going deeper: a closer is kept and ends the block, a
    # continuation is kept and goes on
    java = by_target[("Store.java", "if (name.isEmpty()) {")]
    assert java.block == ('if (name.isEmpty()) {\n            throw new IllegalArgumentException("no name");\n'
                          '        } else {\n            return root + "/" + name;\n        }')
    assert java.block_suffix == "\n    }\n}\n"
    assert indent_width("\t\tx") == 8
