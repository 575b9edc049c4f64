"""How the line benchmark scores a completion (benchmarks/line_metrics.py): exact, accepted,
blank-start, edit similarity, block exact, and a cell's rates and latency."""

from __future__ import annotations

import pytest

from line_metrics import Cell, edit_similarity, levenshtein, score


def test_exact_means_the_whole_rest_of_the_line():
    prefix = "def f(x):\n    "
    assert score("return x + 1", "return x + 1", prefix).exact
    assert score("return x + 1  \n    y = 2", "return x + 1", prefix).exact  # trailing blanks and later lines aside
    assert not score("return x", "return x + 1", prefix).exact  # stops before the line's end
    assert not score("return x + 12", "return x + 1", prefix).exact
    assert not score("\nreturn x + 1", "return x + 1", prefix).exact  # the first line is empty


def test_accepted_is_exact_or_a_strict_prefix_of_at_least_eight_characters():
    prefix = "    "
    target = "result = compute(a, b)"
    assert score("result = compute(a, b)", target, prefix).accepted
    assert score("result =", target, prefix).accepted  # 8 characters
    assert not score("result ", target, prefix).accepted  # 7
    assert not score("result = compute(a, c)", target, prefix).accepted
    assert not score("result = compute(a, b)!", target, prefix).accepted
    assert not score("", target, prefix).accepted


def test_blank_start_is_a_completion_repeating_blanks_the_cursor_has():
    assert score("    return 1", "return 1", "def f():\n    ").blank_start  # after the indentation
    assert score("\treturn 1", "return 1", "func f() int {\n\t").blank_start  # a Go tab
    assert score(" 1", "1", "    x = ").blank_start  # after `x = `
    assert not score(" = 1", "= 1", "    x").blank_start  # the cursor is not after a blank
    assert not score("return 1", "return 1", "def f():\n    ").blank_start
    assert not score("\n    return 1", "return 1", "def f():\n    ").blank_start  # a newline is no blank ...
    assert score("\n    return 1", "return 1", "def f():\n    ").ws_start  # ... but whitespace
    assert score("  \n", "return 1", "    ").empty and score("", "x", "").empty
    assert not score(" x", "x", "").blank_start  # column 0: nothing before the cursor


def test_edit_similarity():
    assert levenshtein("kitten", "sitting") == 3
    assert edit_similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)
    assert edit_similarity("", "") == 1.0 and edit_similarity("", "abc") == 0.0
    assert score("retrun x", "return x", "    ").edit_sim == pytest.approx(1 - 2 / 8)


def test_block_exact_compares_every_line():
    block = "if x:\n        y = 1\n    z = 2"
    assert score("if x:\n        y = 1\n    z = 2\n\n", "if x:", "    ", block).block_exact
    assert score("if x:   \n        y = 1\n    z = 2", "if x:", "    ", block).block_exact
    assert not score("if x:\n        y = 1", "if x:", "    ", block).block_exact
    assert not score("if x:\n        y = 1\n    z = 2\n    w = 3", "if x:", "    ", block).block_exact
    assert score("if x:", "if x:", "    ").block_exact is None


def test_a_cell_counts_rates_and_latency():
    cell = Cell()
    cell.add(score("return 1", "return 1", "    ", "return 1"), 0.1, fits=True)
    cell.add(score("    return 2", "return 1", "    ", "return 1"), 0.3, fits=False)
    row = cell.row(block=True)
    assert (row["n"], row["exact"], row["blank_start"], row["block_exact"], row["block_fit"],
            row["block_fit_exact"]) == (2, 1, 1, 1, 1, 1)
    assert row["p50_ms"] == 100.0 and row["p95_ms"] == 300.0


# -- tables ------------------------------------------------------------------------------------
