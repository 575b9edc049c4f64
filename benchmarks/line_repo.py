"""The line benchmark's repository mode (`python benchmarks/line_completion.py --repo`): does
context from the files a developer has open raise accepted lines (issue 63)?

    python benchmarks/line_completion.py --repo [--positions 60] [--seed 0] [--languages python,go,java]
        [--model DIR] [--threads 1] [--max-tokens 64] [--context-tokens 384] [--prompt-tokens N] [--write]

Positions (benchmarks/line_positions.py, the same seeded draw and kinds) come from the files of
held-out packages with at least two files: a package is the first two parts of a record's path
(`pypi/arrow-1.4.0/arrow/api.py` -> `pypi/arrow-1.4.0`). The open tabs at a position are up to
OPEN_TABS other files of its package, those of the cursor file's folder first, the rest in a
seeded order, each more recently used than the next. The context provider (umbra/engine/context.py,
with the default exclusions and the secret scan) picks the snippets from them, as the language
server does; paths are the records' own (what repository training units carry).

Each position is completed twice in single-line mode with the file after the line as the suffix,
in the local engine (`CompletionEngine.monolithic`, greedy), within the prompt budget an editor's
request gets (`--prompt-tokens`, default: the language server's, the smaller of
completion.contextTokens and inline.contextTokens, lsp/options.py: 512), without and with the
context (which the session takes out of that budget: at most half of it), each
in a fresh session as a keystroke: the position minus its last character first (not measured),
then the position — so the measured latency is a warm keystroke's (its context selection, memoised
as in the server, included), the context already cached. "open files used" counts the files
whose snippets were in the prompt (the session drops the least relevant past its token budget).
Scored as the line benchmark scores (benchmarks/line_metrics.py): exact next line and "would be
accepted". Rows go to benchmarks/results/line_repo.jsonl; `--write` puts the table into
docs/benchmarks.md between the `line-repo` markers."""

from __future__ import annotations

import datetime
import json
import posixpath
import random
import time
import uuid
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from doc_markers import write_block
from line_metrics import Cell, score
from line_positions import choose_positions, load_set

OPEN_TABS = 5
MARKER = "line-repo"
RESULTS = Path(__file__).resolve().parent / "results" / "line_repo.jsonl"
_ROOT = "/repo"  # where the records' paths are put (the context's paths are relative to it)


def prompt_tokens(args) -> int:
    """The prompt budget: `--prompt-tokens`, else an editor request's (lsp/options.py)."""
    if args.prompt_tokens is not None:
        return args.prompt_tokens
    from lsp.options import CompletionOptions, InlineOptions

    return min(CompletionOptions().context_tokens, InlineOptions().context_tokens)


def package(path: str) -> str:
    return "/".join(path.split("/")[:2])


def packaged(docs: list[dict]) -> dict[str, list[dict]]:
    """Documents by package, only packages of two or more files."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for d in docs:
        groups[package(d["path"])].append(d)
    return {k: v for k, v in groups.items() if len(v) >= 2}


def open_tabs(path: str, files: list[dict], seed: int) -> list[dict]:
    """Up to OPEN_TABS other files of the package: the cursor file's folder first, then the rest
    in a seeded order (the first is the most recently used)."""
    others = [d for d in files if d["path"] != path]
    random.Random(f"line-repo:{seed}:{path}").shuffle(others)
    folder = posixpath.dirname(path)
    others.sort(key=lambda d: posixpath.dirname(d["path"]) != folder)
    return others[:OPEN_TABS]


async def measure(args, languages: list[str], commit: str) -> list[dict]:
    """The rows of every language: per language, kind and context (without / with)."""
    import torch

    from line_paths import Local

    from umbra.engine import ClientModel, CompletionEngine
    from umbra.engine.context import ContextConfig, ContextProvider, OpenFile
    from umbra.engine.context_exclusions import ContextExclusions

    torch.set_num_threads(args.threads)
    model = ClientModel.load(args.model)
    engine = CompletionEngine.monolithic(model)
    config = Local.config(False, args.max_tokens)
    config = replace(config, prompt=replace(config.prompt, budget=prompt_tokens(args)))
    # every open tab scanned at once (the server spreads first scans over keystrokes: scan_ms)
    provider = ContextProvider(ContextConfig(enabled=True, tokens=args.context_tokens, scan_ms=600_000.0),
                               ContextExclusions(root=_ROOT))
    run = {"run": uuid.uuid4().hex[:12], "model": args.model.resolve().name, "commit": commit, "seed": args.seed,
           "positions": args.positions, "context_tokens": args.context_tokens, "prompt_tokens": config.prompt.budget,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
           "layout": "file_sep" if any(model.tokenizer.token_id(t) is not None for t in ("<file_sep>", "<|file_sep|>"))
           else "comments"}
    async with engine.session(config) as s:  # warm up (not measured)
        await s.complete("def f(x):\n    ", "")
    rows = []
    for lang in languages:
        groups = packaged(load_set(args.data_root, args.set, lang))
        docs = [d for files in groups.values() for d in files]
        positions, _ = choose_positions(docs, lang, args.positions, args.seed)
        cells: dict[tuple[str, str], Cell] = defaultdict(Cell)
        files_used, context_chars = [], []
        for i, p in enumerate(positions):
            tabs = open_tabs(p.path, groups[package(p.path)], args.seed)
            current = OpenFile(f"{_ROOT}/{p.path}", p.text, lang, used=len(tabs) + 1)
            others = [OpenFile(f"{_ROOT}/{d['path']}", d["text"], lang, used=len(tabs) - k) for k, d in enumerate(tabs)]
            for variant in ("without", "with"):
                pick = (lambda prefix: provider.select(current, prefix, others)) if variant == "with" else None
                async with engine.session(config) as s:
                    before = p.prefix[:-1]  # the keystroke before (not measured)
                    await s.complete(before, p.line_suffix, context=pick and pick(before))
                    t0 = time.perf_counter()  # the keystroke: its context selection (memoised) and completion
                    context = pick and pick(p.prefix)
                    result = await s.complete(p.prefix, p.line_suffix, context=context)
                    seconds = time.perf_counter() - t0
                if context is not None:
                    files_used.append(len(result.context_files))
                    context_chars.append(sum(len(x.text) for x in context.snippets if x.path in result.context_files))
                cells[(p.kind, variant)].add(score(result.text, p.target, p.prefix), seconds)
                cells[("all", variant)].add(score(result.text, p.target, p.prefix), seconds)
            if (i + 1) % 20 == 0 or i + 1 == len(positions):
                print(f"{lang}: {i + 1} / {len(positions)} positions", flush=True)
        for (kind, variant), cell in sorted(cells.items()):
            rows.append({**run, "lang": lang, "kind": kind, "context": variant, "packages": len(groups),
                         "files_per_position": round(sum(files_used) / max(1, len(files_used)), 2),
                         "context_chars": round(sum(context_chars) / max(1, len(context_chars))),
                         **cell.row(False)})
    return rows


def render(rows: list[dict]) -> str:
    """The table of one run: per language, exact and accepted without and with context, their
    ratio, and the warm keystroke's p50 without and with context."""
    if not rows:
        return "(no run)"
    r0 = rows[0]
    out = [f"Run {r0['run']} ({r0['date']} UTC, commit {r0['commit']}, model {r0['model']}, seed {r0['seed']}, "
           f"{r0['positions']} positions per language, context layout: {r0['layout']}, "
           f"{_budget(r0)})", "",
           "| language | kind | n | open files used | exact without | exact with | ratio | accepted without "
           "| accepted with | p50 ms without | p50 ms with | p50 ratio |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by = {(r["lang"], r["kind"], r["context"]): r for r in rows}
    for lang, kind in dict.fromkeys((r["lang"], r["kind"]) for r in rows):
        a, b = by.get((lang, kind, "without")), by.get((lang, kind, "with"))
        if a is None or b is None or not a["n"]:
            continue
        n = a["n"]
        ratio = f"{b['exact'] / a['exact']:.2f}" if a["exact"] else "n/a"
        out.append(f"| {lang} | {kind} | {n} | {b['files_per_position']} | {a['exact'] / n:.1%} | {b['exact'] / n:.1%} "
                   f"| {ratio} | {a['accepted'] / n:.1%} | {b['accepted'] / n:.1%} | {a['p50_ms']} | {b['p50_ms']} "
                   f"| {b['p50_ms'] / a['p50_ms']:.2f} |")
    return "\n".join(out)


def _budget(run: dict) -> str:
    """The run's prompt budget and the context's share of it (the session's rule: at most half)."""
    if "prompt_tokens" not in run:  # runs before --prompt-tokens: the engine's default prompt
        return f"{run['context_tokens']} context tokens at most"
    return (f"prompt budget {run['prompt_tokens']} tokens, context at most "
            f"{min(run['context_tokens'], run['prompt_tokens'] // 2)} of them")


def run_repo(args, languages: list[str], commit: str, command: str) -> int:
    import asyncio

    rows = asyncio.run(measure(args, languages, commit))
    for r in rows:
        r["command"] = command
    results = args.results if args.results.name != "line_completion.jsonl" else RESULTS
    results.parent.mkdir(parents=True, exist_ok=True)
    with open(results, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    table = render(rows) + f"\n\nCommand: `{command}`"
    print(table)
    if args.write:
        write_block(args.doc, MARKER, table, append=True)
    return 0
