"""The accepted-lines benchmark (benchmarks/line_completion.py): the cursor positions it draws, how
it scores a completion, its tables, its bad-input errors through the real command line, and one
small run through a real `umbra serve` and the local engine."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from line_metrics import Cell, edit_similarity, levenshtein, score
from line_positions import MIN_TYPED, choose_positions, indent_width, trivial
from line_report import latest_runs, render
from umbra.paths import DEFAULT_MODEL_NAME, default_model_dir

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "line_completion.py"
TINY = ROOT / "models" / "umbra-code-tiny"

PY = '''# Copyright header: a license the files of a project share.
# It is not code anyone completes.

import os


class Store:
    """Keeps values."""

    def __init__(self, root):
        self.root = root
        self.items = {
            "a": 1,
        }

    def path(self, name):
        if not name:
            raise ValueError("no name")
        return os.path.join(self.root, name)


def main(argv):
    store = Store(argv[0])
    for name in argv[1:]:
        print(store.path(name))
    return 0
'''

GO = '''// Copyright 2024 The Authors.
// Use of this source code is governed by a license.

package store

func Path(root string, names []string) []string {
\tout := make([]string, 0, len(names))
\tfor _, name := range names {
\t\tif name == "" {
\t\t\tcontinue
\t\t}
\t\tout = append(out, root+"/"+name)
\t}
\treturn out
}
'''

JAVA = '''/*
 * Copyright (c) 2024, the authors.
 */
package store;

public class Store {
    /**
     * The path of a name.
     */
    public String path(String root, String name) {
        if (name.isEmpty()) {
            throw new IllegalArgumentException("no name");
        } else {
            return root + "/" + name;
        }
    }
}
'''

DOCS = {"python": [{"path": "store.py", "text": PY}, {"path": "other.py", "text": PY.replace("Store", "Shelf")}],
        "go": [{"path": "store.go", "text": GO}], "java": [{"path": "Store.java", "text": JAVA}]}


# -- positions ---------------------------------------------------------------------------------

def _line_of(p):
    return p.text.split("\n")[p.line]


@pytest.mark.parametrize("lang", sorted(DOCS))
def test_after_indent_positions_end_after_the_indentation_of_a_real_line(lang):
    positions, _ = choose_positions(DOCS[lang], lang, 200, seed=1)
    after = [p for p in positions if p.kind == "after-indent"]
    assert after
    for p in after:
        line = _line_of(p)
        before = p.prefix[p.prefix.rfind("\n") + 1:]
        assert before and not before.strip() and before == line[: len(before)]  # the whole indentation, no more
        assert not p.text[p.cursor].isspace()
        assert p.target == line.strip() and not trivial(p.target)
        assert p.line_suffix == p.text[p.cursor + len(line) - len(before):]
        assert p.line_suffix.startswith("\n") or p.line_suffix == ""


@pytest.mark.parametrize("lang", sorted(DOCS))
def test_mid_line_positions_cut_inside_the_lines_code(lang):
    positions, _ = choose_positions(DOCS[lang], lang, 200, seed=1)
    mid = [p for p in positions if p.kind == "mid-line"]
    assert mid
    for p in mid:
        line = _line_of(p)
        typed = p.prefix[p.prefix.rfind("\n") + 1:]
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


# -- metrics -----------------------------------------------------------------------------------

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

def _run(run_id, commit, date, exact, positions=4):
    stamp = {"run": run_id, "model": "m", "commit": commit, "set": "test", "seed": 0, "date": date}
    cell = {"record": "cell", **stamp, "lang": "python", "kind": "after-indent", "mode": "line", "suffix": "with",
            "n": 4, "exact": exact, "accepted": exact, "blank_start": 4 - exact, "ws_start": 4 - exact, "empty": 0,
            "edit_sim": 0.5, "p50_ms": 10.0, "p95_ms": 20.0, "identical": 4}
    run = {"record": "run", **stamp, "positions": positions, "languages": ["python"], "max_tokens": 64, "threads": 1,
           "label": "", "machine": "a machine", "command": "python benchmarks/line_completion.py",
           "drawn": {"python": {"after-indent": 4}}, "skipped": {"python": {"x": 1}}, "seconds": 60}
    return [cell | {"path": "serve"}, cell | {"path": "local"}, run]


def test_tables_show_the_largest_then_latest_complete_run_of_each_identity_stamped():
    old = _run("r1", "abc1234", "2026-01-01 10:00", 0)
    new = _run("r2", "abc1234", "2026-01-02 10:00", 1)
    after = _run("r3", "def5678+dirty", "2026-01-03 10:00", 3, positions=8)
    quick = _run("r5", "def5678+dirty", "2026-01-04 10:00", 2)  # a smaller draw: part of r3's
    unfinished = [after[0] | {"run": "r4", "commit": "0000000"}]  # cells without their run record
    rows = old + new + after + quick + unfinished
    assert [r["run"] for r in latest_runs(rows)] == ["r2", "r3"]
    text = render(rows)
    assert "0000000" not in text and "2026-01-01" not in text and "2026-01-04" not in text
    assert "| python | after-indent | line | with | 4 | 25 | 25 |" in text
    assert "| python | after-indent | line | with | 4 | 75 | 75 |" in text
    assert "| m @ def5678+dirty, test, seed 0, 8 positions, 2026-01-03 10:00 | python | 75 | 75 | 25 |" in text
    assert text.index("abc1234, test, seed 0, 4 positions, 2026-01-02") < text.index("def5678")


# -- the command line --------------------------------------------------------------------------

def _cli(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, check=False)


def _main(*args) -> subprocess.CompletedProcess:
    """The script's main(argv) in this process: what `_cli` returns, without a Python start-up and
    the import of torch (the bad-input checks; one of them stays a real subprocess)."""
    import line_completion

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = line_completion.main([str(a) for a in args])
    return subprocess.CompletedProcess([sys.executable, str(SCRIPT), *map(str, args)], code, out.getvalue(),
                                       err.getvalue())


def _data_root(tmp_path: Path, docs: dict[str, list[dict]], name: str = "heldout") -> Path:
    d = tmp_path / "root" / "data" / name
    d.mkdir(parents=True)
    for lang, files in docs.items():
        (d / f"{lang}.jsonl").write_text("".join(json.dumps(f) + "\n" for f in files))
    return tmp_path / "root"


def _one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    return lines[0]


def test_without_model_the_run_uses_the_default_model():
    import line_completion

    args = line_completion.parse_args([])
    assert args.model == default_model_dir() and args.model.name == DEFAULT_MODEL_NAME
    assert args.model.resolve().name == DEFAULT_MODEL_NAME  # the run record's "model"


def test_bad_input_is_one_line_and_exit_status_2(tmp_path):
    model = TINY
    no_tokenizer = tmp_path / "model"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        (no_tokenizer / name).symlink_to(model / name)
    root = _data_root(tmp_path, {"python": DOCS["python"], "go": []})
    results = tmp_path / "results.jsonl"
    common = ["--data-root", root, "--results", results, "--languages", "python"]

    line = _one_line_error(_cli(*common, "--model", no_tokenizer))  # the one real subprocess: exit status, pipes
    assert line == f"line_completion: error: model directory {no_tokenizer} is incomplete: missing tokenizer.json"
    line = _one_line_error(_main(*common, "--positions", "0"))
    assert line == "line_completion: error: --positions must be at least 1, got 0"
    line = _one_line_error(_main("--data-root", root, "--results", results, "--languages", "go"))
    assert line == (f"line_completion: error: set 'heldout' is empty for go: {root}/data/heldout/go.jsonl "
                    f"holds no files")
    line = _one_line_error(_main("--data-root", root, "--results", results, "--languages", "java"))
    assert line.startswith(f"line_completion: error: set 'heldout' has no java file: {root}/data/heldout/java.jsonl "
                           f"is missing")
    line = _one_line_error(_main(*common, "--set", "test"))
    assert line.startswith("line_completion: error: set 'test' has no python file")
    line = _one_line_error(_main("--render-only", "--results", results, "--doc", tmp_path / "absent.md"))
    assert line == f"line_completion: error: {tmp_path / 'absent.md'} does not exist"
    assert not results.exists()


def test_a_small_run_through_a_real_umbra_serve_and_the_local_engine(tmp_path):
    files = [{"path": p, "text": (ROOT / p).read_text()}
             for p in ("umbra/engine/sampling.py", "umbra/engine/postprocess.py")]
    root = _data_root(tmp_path, {"python": files})
    results, dump, doc = tmp_path / "results.jsonl", tmp_path / "dump.jsonl", tmp_path / "doc.md"
    doc.write_text("# B\n\n<!-- line-completion:begin -->\nold\n<!-- line-completion:end -->\n\nafter\n")
    # the tiny model (8 layers; the default is 16) and 16 tokens at most: the run and its tables, not the numbers
    r = _cli("--data-root", root, "--languages", "python", "--positions", "3", "--seed", "5", "--results", results,
             "--dump", dump, "--doc", doc, "--write", "--model", TINY, "--max-tokens", "16", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]  # 0: the server and the local engine agreed on every completion
    assert "serve and local disagree on 0 of 12 completions" in r.stderr

    rows = [json.loads(line) for line in results.read_text().splitlines()]
    run = rows[-1]
    commit = run["commit"].removesuffix("+dirty")
    assert re.fullmatch(r"[0-9a-f]{7,}", commit)
    # the checkout's HEAD when the run began (others may commit meanwhile: an ancestor of HEAD now)
    assert subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=ROOT).returncode == 0
    assert run["record"] == "run" and run["set"] == "heldout"
    set_file = root / "data" / "heldout" / "python.jsonl"
    assert run["set_sha256"] == {"python": hashlib.sha256(set_file.read_bytes()).hexdigest()[:12]}
    assert run["model"] == TINY.name and run["seed"] == 5 and run["max_tokens"] == 16
    assert run["drawn"] == {"python": {"after-indent": 2, "mid-line": 1}} and run["disagreements"] == 0
    cells = [row for row in rows if row["record"] == "cell"]
    assert len(cells) == 2 * 2 * 2 * 2  # kinds x modes x suffixes x paths

    # the rows are the scores of the completions the two paths gave at the positions drawn
    positions, _ = choose_positions(files, "python", 3, seed=5)
    by_line = {(p.path, p.line + 1): p for p in positions}
    completions = [json.loads(line) for line in dump.read_text().splitlines()]
    assert len(completions) == 3 * 4
    for row in cells:
        mine = [c for c in completions
                if (c["kind"], c["mode"], c["suffix"]) == (row["kind"], row["mode"], row["suffix"])]
        scores = [score(c[row["path"]], by_line[(c["path"], c["line"])].target, by_line[(c["path"], c["line"])].prefix,
                        c["block"]) for c in mine]
        assert row["n"] == len(mine) == Counter(p.kind for p in positions)[row["kind"]]
        for name in ("exact", "accepted", "blank_start", "ws_start", "empty"):
            assert row[name] == sum(getattr(s, name) for s in scores), name
        assert row["edit_sim"] == pytest.approx(sum(s.edit_sim for s in scores) / len(scores), abs=1e-4)
        if row["mode"] == "block":
            assert row["block_exact"] == sum(s.block_exact for s in scores)
        assert row["identical"] == row["n"] and 0 < row["p50_ms"] <= row["p95_ms"]
    for c in completions:
        assert c["target"] == by_line[(c["path"], c["line"])].target

    text = doc.read_text()
    assert text.startswith("# B\n\n<!-- line-completion:begin -->\n")
    assert text.endswith("<!-- line-completion:end -->\n\nafter\n")
    assert "old" not in text
    stamp = f"{TINY.name} @ {run['commit']}, heldout, seed 5, 3 positions, {run['date']}"
    assert "| python | after-indent | line | with | 2 |" in text and stamp in text
