"""The cloud's edge under hostile clients: legitimate sessions of two kinds from 127.0.0.1 — plain
HTTP steps (open, 8-position prefill, decode steps, close, over keep-alive) and the product's own
client (umbra.middle.remote.RemoteMiddle: prefill over HTTP, decode steps and a speculative
verify over the WebSocket stream) — beside attackers in their own process on the same address —
slow bodies without a token, slow bodies with a token, and a mix (slow headers, mid-body
disconnects, oversized and malformed frames, connection churn, WebSocket streams dropped in the
middle of a message) — each phase for a set time, against an idle phase without attackers. Reports the legitimate success rate and p95 per
phase, how long each attacker connection stayed open after its refusal (worst case), the cloud's
RSS and open file descriptors over the run, its 5xx count and tracebacks in its log. Real
service (python -m server) on 127.0.0.1 serving a tiny random model; everything bounded in count
and time.

    python benchmarks/edge_soak.py --seconds 15          # print the table (about a minute)
    python benchmarks/edge_soak.py --seconds 15 --write  # and write it into docs/benchmarks.md
    python benchmarks/edge_soak.py --seconds 150 --write # the 10-minute soak (4 phases x 150 s)
    python benchmarks/edge_soak.py --seconds 25 --phases mixed  # idle, then the mixed attackers only"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import torch

_REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_REPO), str(_REPO / "tests"), str(_REPO / "tests" / "server"), str(_REPO / "benchmarks")]

from doc_markers import write_block  # noqa: E402
from edge_attackers import MODES, attack  # noqa: E402
from server.launch import local_cloud_sync  # noqa: E402
from tiny_models import build_tiny_model  # noqa: E402
from umbra import wire  # noqa: E402
from umbra.middle.remote import RemoteMiddle  # noqa: E402

C = 64  # hidden size of the tiny model
PHASES = dict(zip(("slow", "slow-token", "mixed"), MODES))  # --phases names; each runs after the idle phase


# -- the legitimate client -----------------------------------------------------------------------
async def _legit(base: str, token: str, until: float, lat: list[float], fails: list[str]) -> None:
    auth = {"Authorization": f"Bearer {token}"}
    g = torch.Generator().manual_seed(0)
    prefill = wire.encode(wire.forward_frame(torch.randn(1, 8, C, generator=g), torch.arange(8)[None]))
    steps = [wire.encode(wire.forward_frame(torch.randn(1, 1, C, generator=g), torch.tensor([[8 + i]]))) for i in range(4)]
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        while time.monotonic() < until:
            sid = None
            for what, call in [("open", lambda: http.post("/v1/sessions", json={}, headers=auth))] + \
                    [("step", (lambda b: lambda: http.post(f"/v1/sessions/{sid}/forward", content=b, headers=auth))(b))
                     for b in [prefill, *steps]]:
                t0 = time.perf_counter()
                try:
                    r = await call()
                    ok = r.status_code in (200, 201)
                except httpx.HTTPError as exc:
                    ok, r = False, type(exc).__name__
                lat.append(time.perf_counter() - t0) if ok else fails.append(str(getattr(r, "status_code", r)))
                if not ok:
                    break
                if what == "open":
                    sid = r.json()["session"]
            if sid is not None:
                try:
                    r = await http.delete(f"/v1/sessions/{sid}", headers=auth)
                    if r.status_code != 204:
                        fails.append(str(r.status_code))
                except httpx.HTTPError as exc:
                    fails.append(type(exc).__name__)


async def _legit_stream(base: str, token: str, until: float, lat: list[float], fails: list[str]) -> None:
    """The product's client: prefill over HTTP, 4 decode steps and a speculative verify (cut back
    by 2, 4 positions in one FORWARD_TRIM message) over the WebSocket stream, close."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 16, C, generator=g)
    async with RemoteMiddle(base, token, hidden_size=C, timeout=10, connect_timeout=10) as middle:
        while time.monotonic() < until:
            sid = None
            try:
                t0 = time.perf_counter()
                sid = await middle.open_session()
                await middle.forward(x[:, :8], torch.arange(8)[None], sid)
                lat.append(time.perf_counter() - t0)
                for i in range(8, 12):
                    t0 = time.perf_counter()
                    await middle.forward(x[:, i:i + 1], torch.tensor([[i]]), sid)
                    lat.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await middle.truncate(sid, 10)
                await middle.forward(x[:, 10:14], torch.arange(10, 14)[None], sid)
                lat.append(time.perf_counter() - t0)
            except Exception as exc:  # a failed legitimate call: counted, by kind
                fails.append(f"stream {getattr(exc, 'status', type(exc).__name__)}")
            finally:
                if sid is not None:
                    try:
                        await middle.close(sid)
                    except Exception as exc:
                        fails.append(f"stream close {type(exc).__name__}")


def _metrics(base: str, token: str) -> str:
    return httpx.get(base + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10).text


async def _phase(cloud, mode: str | None, seconds: float, samples: list, attacker: str) -> dict:
    port = int(cloud.base_url.rsplit(":", 1)[1])
    queue, proc = mp.Queue(), None
    if mode is not None:
        proc = mp.Process(target=attack, args=(port, seconds + 2, mode, attacker, queue), daemon=True)
        proc.start()
        await asyncio.sleep(2.0)  # the attackers hold their connections first
    lat, fails = [], []
    until = time.monotonic() + seconds
    task = asyncio.gather(_legit(cloud.base_url, cloud.token, until, lat, fails),
                          _legit_stream(cloud.base_url, cloud.token, until, lat, fails))
    p = psutil.Process(cloud.process.pid)
    while not task.done():
        samples.append((p.memory_info().rss, p.num_fds()))
        await asyncio.sleep(1.0)
    await task
    delays = []
    if proc is not None:
        delays = await asyncio.to_thread(queue.get, True, 60)
        proc.join(10)
    total = len(lat) + len(fails)
    lat.sort()
    return {"mode": mode or "idle (no attackers)", "requests": total, "ok": len(lat) / max(1, total),
            "p95": lat[int(0.95 * (len(lat) - 1))] * 1e3 if lat else float("nan"),
            "worst_close": max((d for d in delays), default=0.0), "refused": len(delays), "fails": sorted(set(fails))}


@dataclass
class Soak:
    """One soak's results: a row per phase (idle first) and the cloud's state over the run."""

    rows: list[dict]
    samples: list[tuple[int, int]]  # (RSS bytes, open fds), once a second while legitimate clients run
    end_rss: int = 0  # after the attackers left and the edge's deadlines passed
    end_fds: int = 0
    fives: float = 0.0  # 5xx answered (umbra_cloud_errors_total)
    aborts: float = 0.0  # client aborts counted (umbra_cloud_client_aborts_total)
    ws_aborts: float = 0.0  # of them, WebSocket streams
    tracebacks: int = 0  # in the cloud's log
    log: str = field(default="", repr=False)


async def soak(seconds: float, body_timeout: float, phases: list[str] = list(PHASES)) -> Soak:
    """The idle phase, then each of `phases` (names of PHASES), `seconds` each, against a real
    service with `body_timeout_seconds` set to `body_timeout`."""
    with tempfile.TemporaryDirectory() as tmp:
        build_tiny_model("qwen2-tied", Path(tmp))
        settings = dict(torch_threads=1, body_timeout_seconds=body_timeout)
        with local_cloud_sync(Path(tmp), settings=settings) as cloud:
            out = Soak(rows=[], samples=[])
            attacker = cloud.add_token("attacker")
            out.rows.append(await _phase(cloud, None, seconds, out.samples, attacker))
            for mode in (PHASES[name] for name in phases):
                out.rows.append(await _phase(cloud, mode, seconds, out.samples, attacker))
            await asyncio.sleep(body_timeout + 3)  # what the attackers left is cut or closed
            p = psutil.Process(cloud.process.pid)
            out.end_rss, out.end_fds = p.memory_info().rss, p.num_fds()
            text = _metrics(cloud.base_url, cloud.token)
            out.fives = sum(float(v) for v in re.findall(r'umbra_cloud_errors_total\{status="5\d\d"\} (\S+)', text))
            out.aborts = sum(float(v) for v in re.findall(r"umbra_cloud_client_aborts_total\{.*\} (\S+)", text))
            out.ws_aborts = sum(float(v) for v in re.findall(r'umbra_cloud_client_aborts_total\{.*route="WS [^"]*"\} (\S+)', text))
            out.log = cloud.log_path.read_text(errors="replace") if cloud.log_path.exists() else ""
            out.tracebacks = out.log.count("Traceback")
    return out


def table(s: Soak) -> str:
    idle = s.rows[0]["p95"]
    lines = ["| phase | legit requests | legit success | legit p95 (ms) | p95 / idle | attacker refusals | worst refusal-to-close (s) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in s.rows:
        lines.append(f"| {r['mode']} | {r['requests']} | {r['ok'] * 100:.1f} % | {r['p95']:.1f} | {r['p95'] / idle:.2f} "
                     f"| {r['refused'] if r['mode'] != 'idle (no attackers)' else '—'} | {r['worst_close']:.2f} |")
    (start_rss, start_fds), peak_rss = s.samples[0], max(x[0] for x in s.samples)
    lines += ["", f"Cloud RSS: start {start_rss / 2**20:.1f} MiB, peak {peak_rss / 2**20:.1f} MiB, end {s.end_rss / 2**20:.1f} MiB "
              f"(drift {100 * (s.end_rss - start_rss) / start_rss:+.1f} %); open fds: start {start_fds}, "
              f"peak {max(x[1] for x in s.samples)}, end {s.end_fds}. 5xx answered: {s.fives:g}; client aborts counted: "
              f"{s.aborts:g} ({s.ws_aborts:g} of them WebSocket streams); tracebacks in the cloud's log: {s.tracebacks}. "
              "Failed legitimate requests by status: "
              + "; ".join(f"{r['mode']}: {', '.join(r['fails']) or 'none'}" for r in s.rows) + "."]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=15.0, help="length of each phase")
    p.add_argument("--body-timeout", type=float, default=10.0, help="the cloud's body_timeout_seconds for the run")
    p.add_argument("--phases", type=lambda v: v.split(","), default=list(PHASES),
                   help=f"attacker phases after the idle one, comma-separated from {','.join(PHASES)} (default: all)")
    p.add_argument("--keep-log", type=Path, help="copy the cloud's log here")
    p.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    p.add_argument("--note", default="", help="a note on the machine's state, written with the table")
    args = p.parse_args()
    if not args.phases or set(args.phases) - set(PHASES):
        p.error(f"--phases: comma-separated names from {','.join(PHASES)}")
    result = asyncio.run(soak(args.seconds, args.body_timeout, args.phases))
    if args.keep_log:
        args.keep_log.write_text(result.log)
    text = table(result)
    print(text)
    if args.write:
        phases = "" if args.phases == list(PHASES) else f" --phases {','.join(args.phases)}"
        cmd = f"python benchmarks/edge_soak.py --seconds {args.seconds:g} --body-timeout {args.body_timeout:g}{phases} --write"
        write_block(_REPO / "docs" / "benchmarks.md", "edge-soak", f"`{cmd}`{' — ' + args.note if args.note else ''}\n\n{text}")


if __name__ == "__main__":
    main()
