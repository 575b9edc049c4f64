"""The line benchmark's repository mode (benchmarks/line_repo.py): packages and open tabs, the
table, and one small run of `line_completion.py --repo` on the default model."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

from line_repo import OPEN_TABS, open_tabs, package, packaged, prompt_tokens, render

from lsp.options import CompletionOptions, InlineOptions

ROOT = Path(__file__).resolve().parents[2]


def test_packages_are_the_first_two_path_parts_and_need_two_files():
    docs = [{"path": "pypi/arrow-1.4.0/arrow/api.py", "text": ""}, {"path": "pypi/arrow-1.4.0/arrow/util.py", "text": ""},
            {"path": "pypi/solo-1.0/solo.py", "text": ""}]
    assert package(docs[0]["path"]) == "pypi/arrow-1.4.0"
    assert list(packaged(docs)) == ["pypi/arrow-1.4.0"]


def test_open_tabs_are_other_files_of_the_package_same_folder_first_at_most_five():
    files = [{"path": f"p/k/{d}/f{i}.py", "text": ""} for d in ("a", "b") for i in range(6)]
    tabs = open_tabs("p/k/a/f0.py", files, seed=0)
    assert len(tabs) == OPEN_TABS and all(t["path"].startswith("p/k/a/") and t["path"] != "p/k/a/f0.py" for t in tabs)
    assert tabs == open_tabs("p/k/a/f0.py", files, seed=0) and open_tabs("p/k/a/f0.py", files[:1], 0) == []


def test_the_table_shows_both_variants_and_their_ratios():
    base = {"run": "r1", "date": "2026-12-06 23:00", "commit": "abc", "model": "m", "seed": 0, "positions": 2,
            "layout": "comments", "context_tokens": 384, "lang": "python", "kind": "all", "files_per_position": 3.0}
    rows = [{**base, "context": "without", "n": 10, "exact": 2, "accepted": 3, "p50_ms": 10.0},
            {**base, "context": "with", "n": 10, "exact": 4, "accepted": 5, "p50_ms": 12.0}]
    table = render(rows)
    assert "| python | all | 10 | 3.0 | 20.0% | 40.0% | 2.00 | 30.0% | 50.0% | 10.0 | 12.0 | 1.20 |" in table
    assert "context layout: comments" in table
    assert "prompt budget 512 tokens, context at most 256 of them" in render([{**r, "prompt_tokens": 512} for r in rows])


def test_the_prompt_budget_is_an_editor_requests_unless_given():
    editor = min(CompletionOptions().context_tokens, InlineOptions().context_tokens)
    assert prompt_tokens(argparse.Namespace(prompt_tokens=None)) == editor == 512
    assert prompt_tokens(argparse.Namespace(prompt_tokens=900)) == 900


def test_a_small_repo_run_on_the_default_model(tmp_path):
    text = {p: (ROOT / p).read_text() for p in ("umbra/engine/sampling.py", "umbra/engine/postprocess.py",
                                                "umbra/engine/stops.py")}
    heldout = tmp_path / "data" / "heldout"
    heldout.mkdir(parents=True)
    (heldout / "python.jsonl").write_text("".join(json.dumps({"path": f"pypi/umbra-0/{p}", "text": t}) + "\n"
                                                  for p, t in text.items()))
    results, doc = tmp_path / "repo.jsonl", tmp_path / "doc.md"
    doc.write_text("# B\n")
    # the script's main(argv) in this process (its real subprocess runs: tests/benchmarks/test_line_completion.py),
    # 16 tokens at most a completion: the run and its table, not the numbers
    import line_completion

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = line_completion.main(["--repo", "--data-root", str(tmp_path), "--languages", "python", "--positions", "2",
                                     "--results", str(results), "--doc", str(doc), "--write", "--max-tokens", "16"])
    assert code == 0, out.getvalue()[-3000:]
    assert "| python | all | 2 |" in out.getvalue()  # the table printed
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert {(row["kind"], row["context"]) for row in rows} == {(k, c) for k in ("all", "after-indent", "mid-line")
                                                               for c in ("without", "with")}
    assert all(0 < row["files_per_position"] <= 2 for row in rows) and rows[0]["layout"] == "file_sep"  # the default model has <file_sep>
    assert "<!-- line-repo:begin -->" in doc.read_text() and "| python | all | 2 |" in doc.read_text()
