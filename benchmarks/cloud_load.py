"""Cloud service under load: aggregate decode steps/s and step latency p50/p99 at 1, 8, 32 and 64
concurrent sessions (each a 32-position prefill, then decode steps over its WebSocket), and the
latency of a small client's decode step while another client's 512-token prefill (B=8 x 64)
runs, against its idle latency. Real service in its own process (python -m server) on loopback,
a tiny random model; client and service share this machine's cores.

    python benchmarks/cloud_load.py                 # print the table
    python benchmarks/cloud_load.py --write         # and write it into docs/benchmarks.md
    python benchmarks/cloud_load.py --steps 8 --rounds 1   # quick"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

_REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_REPO), str(_REPO / "tests"), str(_REPO / "benchmarks")]

from doc_markers import write_block  # noqa: E402
from server.launch import local_cloud  # noqa: E402
from tiny_models import build_tiny_model  # noqa: E402
from umbra import wire  # noqa: E402

C = 64


async def _open(http, token) -> str:
    r = await http.post("/v1/sessions", json={}, headers={"Authorization": f"Bearer {token}"})
    return r.json()["session"]


async def _session(cloud, http, steps: int, lat: list[float], prefill: int = 32) -> None:
    from websockets.asyncio.client import connect

    sid = await _open(http, cloud.token)
    url = cloud.base_url.replace("http", "ws") + f"/v1/sessions/{sid}/stream"
    async with connect(url, additional_headers={"Authorization": f"Bearer {cloud.token}"}, max_size=None) as ws:
        await ws.send(wire.encode(wire.forward_frame(torch.randn(1, prefill, C), torch.arange(prefill)[None])))
        await ws.recv()
        for s in range(steps):
            frame = wire.encode(wire.forward_frame(torch.randn(1, 1, C), torch.tensor([[prefill + s]])))
            t0 = time.perf_counter()
            await ws.send(frame)
            reply = await ws.recv()
            lat.append(time.perf_counter() - t0)
            if wire.decode(reply).kind != wire.Kind.HIDDEN:
                raise RuntimeError("step failed")


async def load(cloud, http, n: int, steps: int) -> tuple[float, float, float]:
    lat: list[float] = []
    t0 = time.perf_counter()
    await asyncio.gather(*(_session(cloud, http, steps, lat) for _ in range(n)))
    wall = time.perf_counter() - t0
    lat.sort()
    return n * steps / wall, statistics.median(lat), lat[min(len(lat) - 1, int(0.99 * len(lat)))]


async def during_prefill(cloud, http, steps: int) -> tuple[float, float]:
    """Median small-client step latency idle, and while 512-token prefills (B=8 x 64) run back to back."""
    idle: list[float] = []
    await _session(cloud, http, steps, idle)
    busy: list[float] = []
    stop = asyncio.Event()

    async def big():
        while not stop.is_set():
            sid = await _open(http, cloud.token)
            body = wire.encode(wire.forward_frame(torch.randn(8, 64, C), torch.arange(64).expand(8, 64).contiguous()))
            await http.post(f"/v1/sessions/{sid}/forward", content=body,
                            headers={"Authorization": f"Bearer {cloud.token}"})
            await http.delete(f"/v1/sessions/{sid}", headers={"Authorization": f"Bearer {cloud.token}"})

    task = asyncio.create_task(big())
    await asyncio.sleep(0.2)
    await _session(cloud, http, steps, busy)
    stop.set()
    await task
    return statistics.median(idle), statistics.median(busy)


async def main_async(args) -> str:
    import httpx

    with tempfile.TemporaryDirectory() as tmp:
        build_tiny_model("qwen2-tied", Path(tmp))
        settings = dict(torch_threads=1, decode_width=64, max_sessions_per_client=256)
        async with local_cloud(Path(tmp), settings=settings) as cloud:
            async with httpx.AsyncClient(base_url=cloud.base_url, timeout=120) as http:
                rows, one = [], None
                results: dict[int, list] = {n: [] for n in args.sessions}
                for _ in range(args.rounds):  # interleaved: every concurrency once per round
                    for n in args.sessions:
                        results[n].append(await load(cloud, http, n, args.steps))
                for n in args.sessions:
                    rate = statistics.median(r[0] for r in results[n])
                    p50 = statistics.median(r[1] for r in results[n])
                    p99 = statistics.median(r[2] for r in results[n])
                    one = one or rate
                    rows.append(f"| {n} | {rate:.0f} | {rate / one:.1f}x | {p50 * 1e3:.1f} | {p99 * 1e3:.1f} |")
                idle, busy = await during_prefill(cloud, http, args.steps * 2)
    return "\n".join([
        "Tiny random model (qwen2-tied, hidden 64), service and clients on this machine's 2 cores, which "
        "two single-threaded background benchmarks also used: absolute numbers are pessimistic.",
        "",
        "| sessions | decode steps/s (all) | vs 1 session | step p50 ms | step p99 ms |",
        "|---:|---:|---:|---:|---:|",
        *rows,
        "",
        f"Small client's decode step: idle p50 {idle * 1e3:.1f} ms; while 512-token prefills run back to back "
        f"p50 {busy * 1e3:.1f} ms ({busy / idle:.1f}x idle).",
    ])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--write", action="store_true")
    args = p.parse_args()
    body = asyncio.run(main_async(args))
    print(body)
    if args.write:
        write_block(_REPO / "docs" / "benchmarks.md", "cloud-load", body, append=True)


if __name__ == "__main__":
    main()
