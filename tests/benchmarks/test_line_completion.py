"""The accepted-lines benchmark (benchmarks/line_completion.py): its default model, its bad-input
errors through the real command line, and one small run through a real `umbra serve` and the
local engine. Its parts: test_line_positions.py, test_line_metrics.py, test_line_report.py."""

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

from line_metrics import score
from line_positions import choose_positions
from line_samples import DOCS
from umbra.paths import DEFAULT_MODEL_NAME, default_model_dir

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "line_completion.py"
TINY = ROOT / "models" / "umbra-code-tiny"

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


@pytest.mark.slow  # the benchmark's one real run: `umbra serve` as a process and the local engine
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
