"""Cloud service under load: aggregate decode steps/s and step latency p50/p95/p99 at 1, 8, 32 and 64
(or --sessions ...) concurrent sessions (each a 32-position prefill, then decode steps over its WebSocket; the rate
counts the decode phase, which starts once every session has prefilled), and the
latency of a small client's decode step while another client's 512-token prefill (B=8 x 64)
runs, against its idle latency, and the service's memory high-water mark under the hostile
suite's flood (tests/server/hostile_load.py) against its KV budget. Real service in its own
process (python -m server) on loopback serving the middle blocks of the embedded default model
(or --model DIR, or --tiny: a tiny random model); client and service share this machine's
cores. Frames carry random hidden states of the model's width (the cloud's cost does not depend
on their values).

    python benchmarks/cloud_load.py                 # print the table
    python benchmarks/cloud_load.py --write --note "machine idle"   # and write it into docs/benchmarks.md
    python benchmarks/cloud_load.py --steps 8 --rounds 1   # quick
    python benchmarks/cloud_load.py --device cuda --dtype bf16 --sessions 1 8 64 256 --model DIR   # on a GPU

Under the table: the largest session count whose step p95 is within --p95-goal-ms (50 by default),
and the throughput at the most sessions against one session's (issue 61's accelerator targets)."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch

_REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_REPO), str(_REPO / "tests"), str(_REPO / "tests" / "server"), str(_REPO / "benchmarks")]

from cloud_helpers import metric  # noqa: E402
from hostile_load import ROWS, SLOTS, Flood, vm_hwm  # noqa: E402
from hostile_load import settings as hostile_settings  # noqa: E402
from doc_markers import write_block  # noqa: E402
from server.launch import local_cloud, local_cloud_sync  # noqa: E402
from tiny_models import build_tiny_model  # noqa: E402
from umbra import wire  # noqa: E402
from umbra.model.parts import SplitPlan  # noqa: E402
from umbra.model.spec import load_spec  # noqa: E402
from umbra.paths import default_model_dir  # noqa: E402

C = 64  # hidden size of the model served (set in main_async)
MiB = 1024 * 1024


async def _open(http, token) -> str:
    r = await http.post("/v1/sessions", json={}, headers={"Authorization": f"Bearer {token}"})
    if r.status_code not in (200, 201):
        raise RuntimeError(f"opening a session: HTTP {r.status_code} {r.text}")
    return r.json()["session"]


async def _session(cloud, http, steps: int, lat: list[float], prefill: int = 32,
                   ready: asyncio.Barrier | None = None, decode_times: list[float] | None = None) -> None:
    """Open, prefill, then (after `ready`, when given: every session prefilled) `steps` decode
    steps, each frame built before its clock starts; the decode phase's end goes to decode_times."""
    from websockets.asyncio.client import connect

    sid = await _open(http, cloud.token)
    url = cloud.base_url.replace("http", "ws") + f"/v1/sessions/{sid}/stream"
    frames = [wire.encode(wire.forward_frame(torch.randn(1, 1, C), torch.tensor([[prefill + s]])))
              for s in range(steps)]
    async with connect(url, additional_headers={"Authorization": f"Bearer {cloud.token}"}, max_size=None) as ws:
        await ws.send(wire.encode(wire.forward_frame(torch.randn(1, prefill, C), torch.arange(prefill)[None])))
        await ws.recv()
        if ready is not None:
            await ready.wait()
        for frame in frames:
            t0 = time.perf_counter()
            await ws.send(frame)
            reply = await ws.recv()
            lat.append(time.perf_counter() - t0)
            if wire.decode(reply).kind != wire.Kind.HIDDEN:
                raise RuntimeError("step failed")
        if decode_times is not None:
            decode_times.append(time.perf_counter())
    await http.delete(f"/v1/sessions/{sid}", headers={"Authorization": f"Bearer {cloud.token}"})


async def _slab_counts(cloud, http) -> tuple[float, float]:
    """The service's decode slabs and the steps run in them so far (its /metrics counters)."""
    text = (await http.get("/metrics", headers={"Authorization": f"Bearer {cloud.token}"})).text
    return metric(text, "umbra_cloud_decode_slabs_total"), metric(text, "umbra_cloud_decode_batched_steps_total")


def quantile(ordered: list[float], q: float) -> float:
    """The `q` quantile of sorted latencies (nearest rank below)."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def load(cloud, http, n: int, steps: int) -> tuple[float, float, float, float, float]:
    """Aggregate decode steps/s over the decode phase (every session prefilled first, then all
    decode together), step latency p50, p99 and p95, and the mean steps per decode slab."""
    slabs0, steps0 = await _slab_counts(cloud, http)
    lat: list[float] = []
    ends: list[float] = []
    start: list[float] = []
    ready = asyncio.Barrier(n + 1)

    async def clock():
        await ready.wait()
        start.append(time.perf_counter())

    await asyncio.gather(clock(), *(_session(cloud, http, steps, lat, ready=ready, decode_times=ends)
                                    for _ in range(n)))
    wall = max(ends) - start[0]
    lat.sort()
    slabs1, steps1 = await _slab_counts(cloud, http)
    per_slab = (steps1 - steps0) / max(1.0, slabs1 - slabs0)
    return n * steps / wall, statistics.median(lat), quantile(lat, 0.99), per_slab, quantile(lat, 0.95)


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


def hostile_memory(model: Path, hidden: int) -> tuple[int, int, int]:
    """A service of its own with a KV budget of 7 flooding sessions (3 per client fit), flooded;
    returns its resident memory before the flood, its high-water mark after, and the budget."""
    import httpx

    spec = load_spec(model)
    first, last = SplitPlan.default(spec.num_layers).middle_range(spec.num_layers)  # the service's default split
    slot_bytes = (last - first) * 2 * spec.num_kv_heads * spec.head_dim * 4  # K and V, fp32, per middle layer
    frame_bytes = ROWS * 100 * hidden * 4 + ROWS * 100 * 8 + 4096  # the flood's largest frame
    budget = 7 * ROWS * SLOTS * slot_bytes
    with local_cloud_sync(model, settings=hostile_settings(budget, 2 * frame_bytes)) as cloud:
        with httpx.Client(base_url=cloud.base_url, timeout=120) as http:
            sid = http.post("/v1/sessions", json={}, headers={"Authorization": f"Bearer {cloud.token}"}).json()["session"]
            body = wire.encode(wire.forward_frame(torch.randn(1, 8, hidden), torch.arange(8)[None]))
            http.post(f"/v1/sessions/{sid}/forward", content=body, headers={"Authorization": f"Bearer {cloud.token}"})
            baseline = psutil.Process(cloud.process.pid).memory_info().rss  # loaded and warm
            Flood(http, cloud.token, cloud.add_token("flood-other"), budget, hidden, slot_bytes).run()
            return baseline, vm_hwm(cloud.process.pid), budget


async def main_async(args) -> str:
    import httpx

    global C
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if args.tiny:
            build_tiny_model("qwen2-tied", Path(tmp))
            model = Path(tmp)
        C = load_spec(model).hidden_size
        settings = dict(torch_threads=1, max_sessions_per_client=256)
        if args.decode_width:
            settings["decode_width"] = args.decode_width
        if args.gather_ms is not None:
            settings["decode_gather_ms"] = args.gather_ms
        settings.update(device=args.device, dtype=args.dtype)
        async with local_cloud(model, settings=settings) as cloud:
            async with httpx.AsyncClient(base_url=cloud.base_url, timeout=120) as http:
                rows, one, within = [], None, []
                results: dict[int, list] = {n: [] for n in args.sessions}
                for _ in range(args.rounds):  # interleaved: every concurrency once per round
                    for n in args.sessions:
                        results[n].append(await load(cloud, http, n, args.steps))
                for n in args.sessions:
                    rate = statistics.median(r[0] for r in results[n])
                    p50 = statistics.median(r[1] for r in results[n])
                    p99 = statistics.median(r[2] for r in results[n])
                    per_slab = statistics.median(r[3] for r in results[n])
                    p95 = statistics.median(r[4] for r in results[n])
                    one = one or rate
                    if p95 * 1e3 <= args.p95_goal_ms:
                        within.append(n)
                    rows.append(f"| {n} | {rate:.0f} | {rate / one:.1f}x | {p50 * 1e3:.1f} | {p95 * 1e3:.1f} "
                                f"| {p99 * 1e3:.1f} | {per_slab:.1f} |")
                idle, busy = await during_prefill(cloud, http, args.steps * 2)
        baseline, hwm, budget = await asyncio.to_thread(hostile_memory, model, C)
    shown = args.model.resolve()
    shown = shown.relative_to(_REPO) if shown.is_relative_to(_REPO) else shown
    what = "a tiny random model (qwen2-tied)" if args.tiny else f"`{shown}`"
    width = f"decode width {args.decode_width}" if args.decode_width else "the service's default decode width"
    width += f", device {args.device}, {args.dtype}"
    if args.gather_ms is not None:
        width += f", decode gather {args.gather_ms:g} ms"
    return "\n".join([
        f"Middle blocks of {what} (hidden {C}), {width}, {args.steps} decode steps per session after a "
        f"32-position prefill, medians of {args.rounds} interleaved rounds; service (1 torch thread) and "
        f"clients on this machine's cores. {args.note}".rstrip(),
        "",
        "| sessions | decode steps/s (all) | vs 1 session | step p50 ms | step p95 ms | step p99 ms | steps per slab |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        f"Largest session count with step p95 <= {args.p95_goal_ms:g} ms: "
        + (f"{max(within)}" if within else f"none of {', '.join(map(str, args.sessions))}") + ".",
        "",
        f"Small client's decode step: idle p50 {idle * 1e3:.1f} ms; while 512-token prefills run back to back "
        f"p50 {busy * 1e3:.1f} ms ({busy / idle:.1f}x idle).",
        "",
        f"Memory under the hostile flood (a service of its own, KV budget {budget / MiB:.0f} MiB, each client "
        f"a half): resident {baseline / MiB:.0f} MiB loaded, high-water mark {hwm / MiB:.0f} MiB after; growth "
        f"{(hwm - baseline) / MiB:.0f} MiB = {(hwm - baseline) / budget:.2f}x the budget (goal <= 1.10x).",
    ])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--model", type=Path, default=default_model_dir(), help="model directory (default: the default model)")
    p.add_argument("--tiny", action="store_true", help="a tiny random model instead of --model")
    p.add_argument("--decode-width", type=int, default=None, help="the service's decode_width (default: its own)")
    p.add_argument("--gather-ms", type=float, default=None,
                   help="the service's decode_gather_ms (default: its own; 0: never hold a step back)")
    p.add_argument("--device", default="auto", help="the service's device: auto (its default: CUDA when there is one) | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default="float32", help="the service's compute dtype: fp32 | bf16 | fp16")
    p.add_argument("--p95-goal-ms", type=float, default=50.0, help="the step p95 the largest-count line is held to")
    p.add_argument("--note", default="", help="the machine's state, written under the table")
    p.add_argument("--write", action="store_true")
    args = p.parse_args()
    body = asyncio.run(main_async(args))
    print(body)
    if args.write:
        write_block(_REPO / "docs" / "benchmarks.md", "cloud-load", body, append=True)


if __name__ == "__main__":
    main()
