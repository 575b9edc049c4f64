"""The keystroke benchmark's tables (benchmarks/keystroke.py): per run, keystroke-to-answer
percentiles, the decoded keystrokes against the engine alone, why decodes stopped, the
type-ahead answers, the burst, and each run's verdict against its goals (issue 19 on loopback;
issue 58 across a link: p50 <= 150 ms and p95 <= 300 ms at 30 ms RTT, p50 <= 250 ms at 80 ms)."""

from __future__ import annotations

import platform
import statistics
from collections import Counter
from dataclasses import dataclass

import torch

from machine import describe
from split_overhead import median_ci_ranks

GOALS = {"p50": 150.0, "p95": 300.0, "overhead": 1.1}  # on loopback (issue 19) and at a 30 ms RTT (issue 58)
LINK_GOALS = {30.0: {"p50": 150.0, "p95": 300.0}, 80.0: {"p50": 250.0}}  # issue 58, per RTT in ms


@dataclass
class Keystroke:
    server_s: float
    engine_s: float | None  # None: a type-ahead answer, nothing decoded to compare with
    same: bool  # the server's answer equals the engine's decode of the same request
    right: int  # characters of the file's real continuation the server's answer starts with
    decode_right: int  # the same for the engine's decode
    tokens: int  # tokens the engine's decode generated
    stop: str | None  # why the server's decode stopped (umbra/stats "stops"); None: a type-ahead answer


def chars_right(shown: str, truth: str) -> int:
    """How many characters of `shown` the file really goes on with (accepting that much is right)."""
    n = 0
    while n < min(len(shown), len(truth)) and shown[n] == truth[n]:
        n += 1
    return n


def chars_right(shown: str, truth: str) -> int:
    """How many characters of `shown` the file really goes on with (accepting that much is right)."""
    n = 0
    while n < min(len(shown), len(truth)) and shown[n] == truth[n]:
        n += 1
    return n


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def summarize(name: str, run: dict) -> dict:
    """Table rows, the type-ahead's line and the goals' verdict of one mode."""
    strokes = run["strokes"]
    decoded = [k for k in strokes if k.engine_s is not None]
    ahead = [k for k in strokes if k.engine_s is None]
    every = [1000 * k.server_s for k in strokes]
    server = [1000 * k.server_s for k in decoded]
    engine = [1000 * k.engine_s for k in decoded]
    ratios = sorted(k.server_s / k.engine_s for k in decoded)
    lo, hi, _ = median_ci_ranks(len(ratios))
    ratio = statistics.median(ratios)

    rtt = run.get("rtt_ms", 0.0)
    goals = GOALS if not rtt else LINK_GOALS.get(rtt, {})

    def goal(value: float, limit: float, unit: str) -> str:
        return f"{value:.{2 if unit == '×' else 0}f}{unit} ({'held' if value <= limit else 'missed'})"

    return {
        "row": f"| {name} | {len(strokes)} | {len(ahead)} | {pct(every, 50):.0f} | {pct(every, 90):.0f} "
               f"| {pct(every, 95):.0f} | {max(every):.0f} |",
        "overhead": f"| {name} | {len(decoded)} | {pct([k.tokens for k in decoded], 50):.0f} / "
                    f"{pct([k.tokens for k in decoded], 95):.0f} "
                    f"| {pct(server, 50):.0f} / {pct(server, 95):.0f} | {pct(engine, 50):.0f} / {pct(engine, 95):.0f} "
                    f"| {ratio:.2f}× [{ratios[lo]:.2f}, {ratios[hi]:.2f}] "
                    f"| {sum(k.same for k in decoded)} / {len(decoded)} |",
        "stops": f"{name}: " + ", ".join(f"{reason} {count}" for reason, count in
                                         sorted(Counter(k.stop for k in decoded).items(), key=lambda rc: -rc[1])),
        "ahead": f"{name}: {len(ahead)} type-ahead answers, {sum(k.same for k in ahead)} of them equal to a "
                 f"decode of the same request; of the file's next characters they got "
                 f"{sum(k.right for k in ahead):,} right, the decodes {sum(k.decode_right for k in ahead):,}",
        "verdict": f"{name}: " + "; ".join(
            f"{what} " + ", ".join(f"{q} {goal(pct(values, int(q[1:])), limit, ' ms')}" for q, limit in goals.items()
                                   if q != "overhead")
            for what, values in (("every keystroke", every), ("the decoded keystrokes alone", server)))
            + (f"; overhead {goal(ratio, goals['overhead'], '×')}" if "overhead" in goals else ""),
    }


def link_note(args) -> str:
    if args.rtts == "0":
        return "The server and the engine each start their own cloud on loopback. "
    return ("One cloud (a subprocess on loopback) serves the server and the engine, both through "
            "benchmarks/wan_link.py's delaying TCP proxy on 127.0.0.1 (no netem in this kernel) at the RTT "
            "the mode's name gives (0 ms: the proxy without delay). ")


def report(runs: dict[str, dict], args, path: str, started: str) -> str:
    modes = {name: summarize(name, run) for name, run in runs.items()}
    bursts = "; ".join(f"{name}: {r['burst']['n']} keystrokes sent without waiting, {r['burst']['started']} decodes "
                       f"started ({r['burst']['skipped']} requests skipped as already superseded), at most {r['burst']['max_per_document']} at once in the document, the last "
                       f"{'answered' if r['burst']['answered'] else 'NOT answered'} "
                       f"{r['burst']['last_ms']:.0f} ms after the burst was sent" for name, r in runs.items())
    return "\n".join([
        f"Measured {started}: `python benchmarks/keystroke.py --keystrokes {args.keystrokes} --threads {args.threads}"
        f"{' --runs ' + args.runs if args.runs != 'plain,bundle' else ''}"
        f"{' --rtts ' + args.rtts if args.rtts != '0' else ''}"
        f"{f' --context-tokens {args.context_tokens}' if getattr(args, 'context_tokens', None) else ''}`, typing `{path}` "
        f"({args.keystrokes} characters from the line nearest its middle), default model (`UMBRA_MODEL_DIR` if set), "
        f"default `completion` (but `--context-tokens`) and `inline` options, bundle seed {args.bundle_seed}, torch threads {args.threads} per process. "
        f"Machine: {describe()}; {platform.machine()} (torch {torch.__version__}). {link_note(args)}{args.note}".rstrip(),
        "",
        "Keystroke to inline completion, ms (every keystroke; the client waits for each answer):",
        "",
        "| mode | keystrokes | type-ahead answers | p50 | p90 | p95 | max |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(m["row"] for m in modes.values()),
        "",
        "The decoded keystrokes against the engine alone on the same requests (ms, p50 / p95):",
        "",
        "| mode | decoded | tokens / decode (p50 / p95) | server | engine | server / engine, median [95 % CI] "
        "| same answer |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(m["overhead"] for m in modes.values()),
        "",
        "Why the server's decodes stopped: " + "; ".join(m["stops"] for m in modes.values()) + ".",
        "",
        "Type-ahead: " + "; ".join(m["ahead"] for m in modes.values()) + ".",
        "",
        f"Goals (p50 ≤ {GOALS['p50']:.0f} ms, p95 ≤ {GOALS['p95']:.0f} ms, overhead ≤ {GOALS['overhead']}× on loopback; "
        f"across the link p50 ≤ 150 ms and p95 ≤ 300 ms at 30 ms RTT, p50 ≤ 250 ms at 80 ms): "
        + "; ".join(m["verdict"] for m in modes.values()) + ".",
        "",
        f"Burst: {bursts}.",
    ])
