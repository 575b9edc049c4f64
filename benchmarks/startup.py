"""Cold start as a user meets it, on the embedded default model: `umbra complete FILE:LINE:COL`
from launch to its answer (the client and the cloud it starts as its child), and `umbra serve`
from launch to /healthz "ready" (the server the editors and the HTTP API talk to, with its cloud).
Wall seconds, and the CPU-seconds of every process involved (the command and its descendants).

    python benchmarks/startup.py [--runs 3] [--checkout DIR] [--write] [--note "..."]

`--checkout DIR` also times another checkout of Umbra (a `git worktree` of the commit before a
change) with the same interpreter, alternating with this one run by run, so before and after are
one run on one machine; the table says whether both gave the same completion."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from doc_markers import write_block  # noqa: E402
from machine import describe  # noqa: E402

CURSOR = "examples/sample.py:39:12"  # the README's quick start
CLOCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Timing:
    wall: list[float] = field(default_factory=list)  # seconds, one per run
    cpu: list[float] = field(default_factory=list)  # CPU-seconds of the command and its descendants
    answers: set[str] = field(default_factory=set)  # `complete`'s completions (one if deterministic)


def tree_cpu(pid: int) -> float:
    """CPU-seconds (user + system) used so far by `pid` and every living descendant of it."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / CLOCK  # utime, stime
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += cpu.get(p, 0.0)
        todo += [c for c, parent in parents.items() if parent == p]
    return total


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("UMBRA_LOCAL_")} | {"OMP_NUM_THREADS": "1"}


def time_complete(checkout: Path, timing: Timing) -> None:
    before = os.times()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "umbra.cli.main", "complete", CURSOR, "--threads", "1"],
                          cwd=checkout, env=_env(), capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    after = os.times()
    if done.returncode != 0:
        raise SystemExit(f"umbra complete failed in {checkout}:\n{done.stderr[-2000:]}")
    timing.wall.append(wall)
    # the client waited for its cloud, so the cloud's CPU is in the client's children's
    timing.cpu.append((after.children_user - before.children_user) + (after.children_system - before.children_system))
    timing.answers.add(done.stdout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_serve(checkout: Path, timing: Timing, timeout: float = 300.0) -> None:
    port = _free_port()
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "umbra.cli.main", "serve", "--no-auth", "--port", str(port),
                             "--threads", "1"], cwd=checkout, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"umbra serve exited in {checkout}:\n{proc.stderr.read()[-2000:]}")
            if time.perf_counter() - start > timeout:
                raise SystemExit(f"umbra serve not ready after {timeout:.0f} s in {checkout}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1.0).json().get("state") == "ready":
                    break
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.05)
        timing.wall.append(time.perf_counter() - start)
        timing.cpu.append(tree_cpu(proc.pid))
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def label(checkout: Path) -> str:
    """The checkout's commit, and whether its tracked files differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True).stdout.strip()
    sha = git("rev-parse", "--short", "HEAD") or str(checkout)
    return sha + (" + changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def table(results: dict[tuple[str, str], Timing]) -> str:
    rows = ["| checkout | command | runs | wall s, median (min–max) | CPU s, median (min–max) |",
            "|---|---|---:|---:|---:|"]
    for (name, command), t in results.items():
        rows.append(f"| {name} | {command} | {len(t.wall)} | {_cell(t.wall)} | {_cell(t.cpu)} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="runs of each command per checkout (default: 3)")
    p.add_argument("--checkout", type=Path, default=None, help="another checkout to time beside this one")
    p.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    p.add_argument("--note", default="", help="a sentence on the machine's state, added to the table's text")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be >= 1")
    paths = [ROOT] + ([args.checkout.resolve()] if args.checkout else [])
    for path in paths:
        if not (path / "umbra" / "cli" / "main.py").is_file():
            p.error(f"{path} is not a checkout of Umbra")
    checkouts = {label(path): path for path in paths}
    results: dict[tuple[str, str], Timing] = {}
    for _ in range(args.runs):
        for name, path in checkouts.items():
            time_complete(path, results.setdefault((name, f"`umbra complete {CURSOR}`"), Timing()))
            time_serve(path, results.setdefault((name, "`umbra serve` to ready"), Timing()))
    answers = {name: t.answers for (name, command), t in results.items() if t.answers}
    same = len(set().union(*answers.values())) == 1
    text = (f"Measured {time.strftime('%Y-%m-%d %H:%M')}: `python benchmarks/startup.py --runs {args.runs}"
            + (" --checkout DIR" if args.checkout else "") + "`, the embedded default model, torch threads 1. "
            + f"Machine: {describe()}. {args.note}".rstrip() + "\n\n" + table(results) + "\n\n"
            + ("Every run of every checkout gave the same completion." if same
               else "The completions differ: " + "; ".join(f"{k}: {sorted(v)!r}" for k, v in answers.items())))
    print(text)
    if args.write:
        write_block(ROOT / "docs" / "benchmarks.md", "startup", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
