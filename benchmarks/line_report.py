"""docs/benchmarks.md's "Accepted lines" tables, from benchmarks/results/line_completion.jsonl.

    rows = read_rows(path)            # the results file's JSON lines
    body = render(rows)               # markdown: the runs, a summary, the serve table, the local table

A run counts once it has its "run" record (written after its last cell); of several complete
runs with the same model, commit, set, seed and languages the one with the most positions is
shown (a smaller draw is part of a larger one), the latest of equals. Every table row is stamped
with its run: model, commit, set, seed, positions per language and date (UTC)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from line_metrics import COUNTS
from line_positions import KINDS

MODES = ("line", "block")
SUFFIXES = ("with", "none")
LANGUAGE_ORDER = ("python", "go", "java")
ISSUE_CELL = ("after-indent", "line", "with")  # where an editor leaves the cursor after Enter (issue 57)


def read_rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def latest_runs(rows: list[dict]) -> list[dict]:
    """The complete runs' records: of those with the same model, commit, set, seed and languages,
    the one with the most positions (a smaller draw is part of it), then the latest; oldest first."""
    runs = {}
    for r in rows:
        if r.get("record") == "run":
            key = (r["model"], r["commit"], r["set"], r["seed"], tuple(r["languages"]), r.get("mode", "split"))
            if key not in runs or (r["positions"], r["date"]) >= (runs[key]["positions"], runs[key]["date"]):
                runs[key] = r
    return sorted(runs.values(), key=lambda r: r["date"])


def stamp(run: dict) -> str:
    """The run's model, commit, set, seed, positions and date; "client-only" when it measured that mode."""
    mode = " (client-only)" if run.get("mode") == "client-only" else ""
    return (f"{run['model']}{mode} @ {run['commit']}, {run['set']}, seed {run['seed']}, {run['positions']} positions, "
            f"{run['date']}")


def _pct(count: int, n: int) -> str:
    return "—" if not n else f"{100 * count / n:.0f}"


def _cells(rows: list[dict], run_id: str) -> dict[tuple, dict]:
    """(lang, kind, mode, suffix, path) -> the cell row of `run_id`."""
    return {(r["lang"], r["kind"], r["mode"], r["suffix"], r["path"]): r for r in rows
            if r.get("record") == "cell" and r["run"] == run_id}


def _pooled(cells: dict, lang: str, path: str) -> dict:
    out = defaultdict(int)
    for (la, _, _, _, p), c in cells.items():
        if la == lang and p == path:
            out["n"] += c["n"]
            out["identical"] += c.get("identical", 0)
            for name in COUNTS:
                out[name] += c[name]
    return out


def _runs_text(runs: list[dict]) -> list[str]:
    out = []
    for run in runs:
        drawn = "; ".join(f"{lang} {sum(k.values())} ({', '.join(f'{n} {kind}' for kind, n in k.items())})"
                          for lang, k in run["drawn"].items())
        skipped = "; ".join(f"{lang}: " + (", ".join(f"{n} {why}" for why, n in sorted(s.items())) or "none")
                            for lang, s in run["skipped"].items())
        shas = ", ".join(f"{lang} {sha}" for lang, sha in run.get("set_sha256", {}).items())
        out += [f"- **{stamp(run)}**{' — ' + run['label'] if run.get('label') else ''}. "
                f"`{run['command']}`. Positions: {drawn}; lines skipped: {skipped}. "
                + (f"Set files (SHA-256): {shas}. " if shas else "") +
                f"{run['max_tokens']} tokens at most, torch threads {run['threads']} per process, "
                f"{run['seconds'] / 60:.0f} min. Machine: {run['machine']}."]
    return out


def render(rows: list[dict]) -> str:
    runs = latest_runs(rows)
    if not runs:
        return "No complete run yet."
    cells = {run["run"]: _cells(rows, run["run"]) for run in runs}
    out = ["Runs:", "", *_runs_text(runs), ""]

    out += ["Summary per language: the cursor after Enter (after-indent, single line, the file after it as the "
            "suffix), then every cell pooled; rates in % of the positions, through `umbra serve`; "
            "`serve = local`: identical completions of the two paths over every cell.", "",
            "| run | language | after Enter: exact | accepted | blank start | all cells: exact | accepted | "
            "blank start | ws start | empty | serve = local |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for lang in _languages(runs):
        for run in (r for r in runs if lang in r["languages"]):
            out += _summary_row(run, cells[run["run"]], lang)

    out += ["", "Through `umbra serve` (HTTP /v1/infill, a warm server, its self-started cloud on loopback); "
            "rates in %, edit similarity as a mean, latency of the HTTP request in ms:", "",
            "| language | position | mode | suffix | n | exact | accepted | edit sim | blank start | ws start | "
            "empty | block exact | block ≤ cap: exact | p50 | p95 | run |",
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    out += _table(runs, cells, "serve", _serve_cols)
    out += ["", "The local engine (`umbra complete --local`: the whole model in one process) on the same positions, "
            "and how often its completion is the server's, character for character; latency of "
            "`CompletionEngine.complete` in ms:", "",
            "| language | position | mode | suffix | n | exact | accepted | blank start | block exact | "
            "identical to serve | p50 | p95 | run |",
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    out += _table(runs, cells, "local", _local_cols)
    return "\n".join(out)


def _summary_row(run: dict, cells: dict, lang: str) -> list[str]:
    e, p = cells.get((lang, *ISSUE_CELL, "serve")), _pooled(cells, lang, "serve")
    if e is None or not p["n"]:
        return []
    return [f"| {stamp(run)} | {lang} | {_pct(e['exact'], e['n'])} | {_pct(e['accepted'], e['n'])} | "
            f"{_pct(e['blank_start'], e['n'])} | {_pct(p['exact'], p['n'])} | {_pct(p['accepted'], p['n'])} | "
            f"{_pct(p['blank_start'], p['n'])} | {_pct(p['ws_start'], p['n'])} | {_pct(p['empty'], p['n'])} | "
            f"{p['identical']} / {p['n']} |"]


def _languages(runs: list[dict]) -> list[str]:
    return sorted({lang for run in runs for lang in run["languages"]}, key=LANGUAGE_ORDER.index)


def _serve_cols(c: dict) -> list[str]:
    block = ("—", "—") if "block_exact" not in c else (
        _pct(c["block_exact"], c["n"]), f"{c['block_fit_exact']} / {c['block_fit']}")
    return [_pct(c["exact"], c["n"]), _pct(c["accepted"], c["n"]), f"{c['edit_sim']:.2f}",
            _pct(c["blank_start"], c["n"]), _pct(c["ws_start"], c["n"]), _pct(c["empty"], c["n"]), *block,
            f"{c['p50_ms']:.0f}", f"{c['p95_ms']:.0f}"]


def _local_cols(c: dict) -> list[str]:
    return [_pct(c["exact"], c["n"]), _pct(c["accepted"], c["n"]), _pct(c["blank_start"], c["n"]),
            _pct(c["block_exact"], c["n"]) if "block_exact" in c else "—",
            f"{c.get('identical', 0)} / {c['n']}", f"{c['p50_ms']:.0f}", f"{c['p95_ms']:.0f}"]


def _table(runs: list[dict], cells: dict, path: str, cols) -> list[str]:
    out = []
    for lang in _languages(runs):
        for kind in KINDS:
            for mode in MODES:
                for suffix in SUFFIXES:
                    for run in runs:
                        c = cells[run["run"]].get((lang, kind, mode, suffix, path))
                        if c is not None:
                            out.append(f"| {lang} | {kind} | {mode} | {suffix} | {c['n']} | "
                                       + " | ".join(cols(c)) + f" | {stamp(run)} |")
    return out
