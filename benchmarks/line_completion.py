"""Accepted lines: is the next line a completion suggests the one the file really has, judged the
way a user judges it, at the positions an editor produces (issue 57).

    python benchmarks/line_completion.py [--set heldout|test] [--positions 300] [--seed 0]
        [--languages python,go,java] [--model DIR] [--threads 1] [--max-tokens 64] [--write]
        [--label TEXT] [--dump FILE] [--data-root DIR] [--results FILE] [--doc FILE] [--client-only]
    python benchmarks/line_completion.py --render-only     # docs/benchmarks.md from the results file
    python benchmarks/line_completion.py --repo --positions 60   # context from open files (line_repo.py)

`--positions` per language (default 300), half "after-indent" (the cursor after a real line's
indentation inside a body, where an editor leaves it after Enter), half "mid-line" (after a
random typed part of a line); benchmarks/line_positions.py draws them, seeded (`--seed`), and
says which lines it skips. Every position is completed four ways: single line (the target is
the rest of the line) and block (the engine's multi-line mode; the target is the true block
from the cursor on), each with the file after the target as the suffix and without a suffix.
Each of those goes through two paths, one after the other (their order alternating): a warm
`umbra serve` started here as a subprocess (127.0.0.1, a free port, its default cloud started
by it on loopback; POST /v1/infill with prefix, suffix and language) and the local engine in
this process (`umbra complete --local`: CompletionEngine.monolithic). Greedy, 64 tokens at most.
benchmarks/line_metrics.py scores each completion: exact next line, accepted, edit similarity,
blank start, whitespace start, empty, block exact; and the paths must agree: the count of
completions that differ is printed, and the exit status is 1 if any do.

Data: `--set heldout` reads data/heldout/<lang>.jsonl (third-party code no model here trained
on), `--set test` the corpus's test split, data/corpus/test/<lang>.jsonl (`umbra data build`).
Each finished language appends its cells to benchmarks/results/line_completion.jsonl (`--results`),
and the run's record comes last; `--write` renders the tables from that file into
docs/benchmarks.md between the `line-completion` markers (benchmarks/line_report.py). Bad input
(a model directory without its tokenizer, a missing or empty set, --positions 0) is one line on
stderr and exit status 2.

The code measured is the `umbra` package this process imports: put another checkout first on
PYTHONPATH to measure it (the server then runs from that checkout too; the run checks it)."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "benchmarks"))  # appended: a PYTHONPATH checkout's umbra must win over the editable one
sys.path.append(str(ROOT))

from doc_markers import write_block  # noqa: E402
from line_metrics import Cell, score  # noqa: E402
from line_positions import SETS, SetError, choose_positions, load_set, set_path  # noqa: E402
from line_report import MODES, SUFFIXES, read_rows, render  # noqa: E402
from umbra.paths import default_model_dir  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "line_completion.jsonl"
DOC = ROOT / "docs" / "benchmarks.md"
MARKER = "line-completion"
LANGUAGES = ("python", "go", "java")


class InputError(ValueError):
    """Bad input: reported as one line, exit status 2."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", default="heldout", choices=sorted(SETS), help="data set (default heldout)")
    p.add_argument("--positions", type=int, default=300, help="positions per language (default 300)")
    p.add_argument("--seed", type=int, default=0, help="seed of the positions' draw")
    p.add_argument("--data-root", type=Path, default=ROOT, help="where data/ lies (default: this checkout)")
    p.add_argument("--languages", default=",".join(LANGUAGES), help="comma-separated (default python,go,java)")
    p.add_argument("--model", type=Path, default=default_model_dir(), help="model directory (default: the default model)")
    p.add_argument("--threads", type=int, default=1, help="torch threads, here and in the server and its cloud")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens per completion at most")
    p.add_argument("--results", type=Path, default=RESULTS, help="results file (JSON lines, appended)")
    p.add_argument("--doc", type=Path, default=DOC, help="markdown file with the line-completion markers")
    p.add_argument("--write", action="store_true", help="render the tables into --doc after the run")
    p.add_argument("--render-only", action="store_true", help="render the tables from --results, run nothing")
    p.add_argument("--label", default="", help="a note stored with the run and shown with its tables")
    p.add_argument("--client-only", action="store_true",
                   help="measure client-only completion: `umbra serve --client-only` and the client-only engine "
                        "(the client's blocks alone, no cloud); the run and its rows say so")
    p.add_argument("--repo", action="store_true",
                   help="repository mode: without and with context from the package's other files as open tabs "
                        "(benchmarks/line_repo.py; its own results file and docs table)")
    p.add_argument("--context-tokens", type=int, default=384, help="--repo: context tokens at most (default 384)")
    p.add_argument("--prompt-tokens", type=int, default=None,
                   help="--repo: the prompt budget, context included (default: an editor request's, lsp/options.py)")
    p.add_argument("--dump", type=Path, default=None, help="write every completion as JSON lines here (not committed)")
    return p.parse_args(argv)


def git_commit(root: Path) -> str:
    """`git rev-parse --short HEAD` of `root`, with "+dirty" when a tracked file differs from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                           text=True, check=True).stdout.strip()
    return head + ("+dirty" if dirty else "")


def prepare(args: argparse.Namespace) -> dict:
    """Validate the input; the positions of every language. InputError / SetError on bad input."""
    if args.positions < 1:
        raise InputError(f"--positions must be at least 1, got {args.positions}")
    if args.threads < 1 or args.max_tokens < 1:
        raise InputError("--threads and --max-tokens must be at least 1")
    languages = [lang.strip() for lang in args.languages.split(",") if lang.strip()]
    if not languages or any(lang not in LANGUAGES for lang in languages):
        raise InputError(f"--languages must name some of {', '.join(LANGUAGES)}, got {args.languages!r}")
    from umbra.engine.model import check_model_dir
    from umbra.errors import ConfigError

    try:
        check_model_dir(args.model)
    except ConfigError as exc:
        raise InputError(str(exc)) from None
    drawn = {}
    for lang in languages:
        positions, skipped = choose_positions(load_set(args.data_root, args.set, lang), lang, args.positions, args.seed)
        if not positions:
            raise SetError(f"set {args.set!r} has no {lang} line to complete (every line was skipped)")
        drawn[lang] = (positions, skipped)
    return drawn


async def measure(args, drawn: dict, run: dict) -> int:
    """Complete every position every way through both paths; append each language's cells.
    Returns the number of completions on which the paths disagree."""
    from line_paths import Local, Serve, code_root, serve_code_root

    from umbra.engine.tokenizer import ClientTokenizer

    here, there = code_root(), serve_code_root()
    if there != {here}:
        raise RuntimeError(f"umbra serve would import from {sorted(map(str, there))}, this process from {here}")
    print(f"measuring the code in {here} (commit {run['commit']})", file=sys.stderr)
    tokenizer = ClientTokenizer.from_dir(args.model)
    local = Local(args.model, args.threads, client_only=args.client_only)
    if args.dump:
        args.dump.parent.mkdir(parents=True, exist_ok=True)
    disagreements = 0
    with open(args.dump or os.devnull, "w") as dump:
        async with Serve(args.model, args.threads, client_only=args.client_only) as serve:
            paths = {"serve": serve, "local": local}
            for multiline in (False, True):  # warm both paths up (not measured)
                for path in paths.values():
                    await path.complete("def f(x):\n    ", "", "python", multiline, args.max_tokens)
            for lang, (positions, _) in drawn.items():
                cells: dict[tuple, dict] = {}
                for i, p in enumerate(positions):
                    order = ("serve", "local") if i % 2 == 0 else ("local", "serve")
                    disagreements += await complete_position(p, [(n, paths[n]) for n in order], args.max_tokens,
                                                             tokenizer, cells, dump)
                    if (i + 1) % 25 == 0 or i + 1 == len(positions):
                        print(f"{lang}: {i + 1} / {len(positions)} positions, {disagreements} disagreements so far",
                              file=sys.stderr, flush=True)
                append(args.results, [{"record": "cell", **stamp_of(run), "lang": lang, "kind": kind, "mode": mode,
                                       "suffix": suffix, "path": name, **c[name].row(mode == "block"),
                                       "identical": c["same"]}
                                      for (kind, mode, suffix), c in cells.items() for name in ("serve", "local")])
    return disagreements


async def complete_position(p, paths: list, max_tokens: int, tokenizer, cells: dict, dump) -> int:
    """Complete at `p` in every mode, with and without the suffix, through each of `paths` (in
    that order); add the scores to `cells` and the completions to `dump`. Returns the number of
    completions on which the paths disagree."""
    disagreements = 0
    for mode in MODES:
        block = mode == "block"
        fits = tokenizer_fits(tokenizer, p.block, max_tokens) if block else None
        for suffix in SUFFIXES:
            text_after = (p.block_suffix if block else p.line_suffix) if suffix == "with" else ""
            cell = cells.setdefault((p.kind, mode, suffix), {"serve": Cell(), "local": Cell(), "same": 0})
            got = {name: await path.complete(p.prefix, text_after, p.lang, block, max_tokens) for name, path in paths}
            for name, (text, seconds) in got.items():
                cell[name].add(score(text, p.target, p.prefix, p.block if block else None), seconds, fits)
            same = got["serve"][0] == got["local"][0]
            cell["same"] += same
            disagreements += not same
            dump.write(json.dumps({"lang": p.lang, "path": p.path, "line": p.line + 1, "kind": p.kind, "mode": mode,
                                   "suffix": suffix, "target": p.target, "block": p.block if block else None,
                                   "serve": got["serve"][0], "local": got["local"][0]}) + "\n")
    return disagreements


def tokenizer_fits(tokenizer, block: str, max_tokens: int) -> bool:
    return len(tokenizer.encode(block)) <= max_tokens


def stamp_of(run: dict) -> dict:
    return {k: run[k] for k in ("run", "model", "commit", "set", "seed", "date")}


def append(path: Path, rows: list[dict]) -> None:
    """Append `rows` in one write, so runs sharing the file never interleave their lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, "".join(json.dumps(row) + "\n" for row in rows).encode())
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if (args.render_only or args.write) and not args.doc.is_file():
        print(f"line_completion: error: {args.doc} does not exist", file=sys.stderr)
        return 2
    if args.render_only:
        write_block(args.doc, MARKER, render(read_rows(args.results)))
        print(f"wrote the tables into {args.doc}")
        return 0
    if args.repo:
        return _repo(args, argv)
    try:
        drawn = prepare(args)
    except (InputError, SetError) as exc:
        print(f"line_completion: error: {exc}", file=sys.stderr)
        return 2
    from line_paths import code_root

    from machine import describe

    run = {"record": "run", "run": uuid.uuid4().hex[:12], "model": args.model.resolve().name,
           "commit": git_commit(code_root()), "set": args.set, "seed": args.seed,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
           "positions": args.positions, "languages": list(drawn), "max_tokens": args.max_tokens,
           "threads": args.threads, "label": args.label, "machine": describe(),
           "mode": "client-only" if args.client_only else "split",
           "command": "python benchmarks/line_completion.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
           "drawn": {lang: _by_kind(ps) for lang, (ps, _) in drawn.items()},
           "skipped": {lang: dict(s) for lang, (_, s) in drawn.items()},
           "set_sha256": {lang: _sha(set_path(args.data_root, args.set, lang)) for lang in drawn}}
    signal.signal(signal.SIGTERM, _interrupt)  # stop the server on the way out, as on Ctrl-C
    t0 = time.perf_counter()
    try:
        disagreements = asyncio.run(measure(args, drawn, run))
    except KeyboardInterrupt:
        print(f"line_completion: interrupted; finished languages' cells are in {args.results}, without a run "
              f"record, so no table shows them", file=sys.stderr)
        return 130
    append(args.results, [{**run, "seconds": round(time.perf_counter() - t0, 1), "disagreements": disagreements}])
    rows = read_rows(args.results)
    print(render([r for r in rows if r.get("run") == run["run"]]))
    if args.write:
        write_block(args.doc, MARKER, render(rows))
        print(f"wrote the tables into {args.doc}", file=sys.stderr)
    total = sum(len(ps) for ps, _ in drawn.values()) * len(MODES) * len(SUFFIXES)
    print(f"serve and local disagree on {disagreements} of {total} completions", file=sys.stderr)
    return 1 if disagreements else 0


def _repo(args, argv) -> int:
    """The repository mode (benchmarks/line_repo.py): the set and model checked as for the others."""
    from line_paths import code_root
    from line_repo import run_repo

    try:
        if args.context_tokens < 1:
            raise InputError(f"--context-tokens must be at least 1, got {args.context_tokens}")
        if args.prompt_tokens is not None and args.prompt_tokens < 2:
            raise InputError(f"--prompt-tokens must be at least 2, got {args.prompt_tokens}")
        languages = list(prepare(args))
    except (InputError, SetError) as exc:
        print(f"line_completion: error: {exc}", file=sys.stderr)
        return 2
    command = "python benchmarks/line_completion.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    return run_repo(args, languages, git_commit(code_root()), command)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _sha(path: Path) -> str:
    """The first 12 hex digits of the set file's SHA-256: which version of the set a run read."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def _by_kind(positions) -> dict:
    out: dict[str, int] = {}
    for p in positions:
        out[p.kind] = out.get(p.kind, 0) + 1
    return out


if __name__ == "__main__":
    sys.exit(main())
