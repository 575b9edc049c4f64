"""The cloud's throughput with many sessions decoding at once, speculative against step by step.

    python benchmarks/wan_load.py --sessions 8 --rounds 2 [--rtt 30] [--max-tokens 16]

The real cloud service runs as a subprocess on loopback (server.launch.local_cloud_sync, the
default model's middle blocks, one torch thread); this process drives `--sessions` editor
sessions at once through one RemoteMiddle (optionally behind benchmarks/wan_link.py's delaying
proxy, `--rtt`), each completing at its own cursor of the corpus's test split (benchmarks/wan.py's
cursors): a warm-up completion one character earlier (untimed), then all sessions complete at
their cursors together. Modes alternate per round (step by step, speculative, then the other
order), in one run on the same cloud. Reported per mode: generated tokens, the wall time of the
concurrent phase, tokens per wall second, and tokens per second of the cloud process's CPU time
(psutil: what the cloud spends per token, whatever the client's compute costs on this machine),
and the round trips. The greedy texts of the two modes must be identical (counted)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import psutil  # noqa: E402
import torch  # noqa: E402
from doc_markers import write_block  # noqa: E402
from machine import describe  # noqa: E402
from wan import cursors, write_record  # noqa: E402
from wan_link import LinkConfig, WanProxy  # noqa: E402

from server.launch import local_cloud_sync  # noqa: E402
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig  # noqa: E402
from umbra.engine.config import SpeculationConfig  # noqa: E402
from umbra.middle.remote import RemoteMiddle  # noqa: E402
from umbra.paths import default_model_dir  # noqa: E402

MODES = {"step by step": "off", "speculative": "on"}


def _cpu(process: psutil.Process) -> float:
    t = process.cpu_times()
    return t.user + t.system


async def _phase(engine, points, mode: str, args, cloud_process: psutil.Process) -> dict:
    """Every session warms up, then all complete at once; the concurrent phase is measured."""
    cfg = EngineConfig(stop=StopConfig(max_tokens=args.max_tokens, multiline=True),
                       speculation=SpeculationConfig(mode=mode))
    opened = [engine.new_session(cfg) for _ in points]
    try:
        await asyncio.gather(*(s.complete(p[:-1], p[-1:] + x) for s, (_, p, x) in zip(opened, points)))
        cpu0, t0 = _cpu(cloud_process), time.perf_counter()
        results = await asyncio.gather(*(s.complete(p, x) for s, (_, p, x) in zip(opened, points)))
        wall, cpu = time.perf_counter() - t0, _cpu(cloud_process) - cpu0
    finally:
        for s in opened:
            await s.close()
    return {"tokens": sum(r.generated_tokens for r in results), "wall_s": wall, "cloud_cpu_s": cpu,
            "trips": sum(r.round_trips for r in results), "texts": [r.text for r in results]}


async def measure(model: ClientModel, cloud, points, args) -> dict:
    process = psutil.Process(cloud.process.pid)
    totals = {name: {"tokens": 0, "wall_s": 0.0, "cloud_cpu_s": 0.0, "trips": 0} for name in MODES}
    differ = 0
    port = int(cloud.base_url.rsplit(":", 1)[1])
    with WanProxy(("127.0.0.1", port), LinkConfig(one_way_ms=args.rtt / 2)) as proxy:
        async with RemoteMiddle(proxy.url(cloud.base_url), cloud.token, hidden_size=model.spec.hidden_size) as middle:
            engine = CompletionEngine.split(model, middle, context_length=middle.info["max_seq_len"])
            for r in range(args.rounds):
                texts = {}
                for name, mode in (list(MODES.items()) if r % 2 == 0 else list(MODES.items())[::-1]):
                    out = await _phase(engine, points, mode, args, process)
                    texts[name] = out.pop("texts")
                    for key, value in out.items():
                        totals[name][key] += value
                    print(name, json.dumps(out), flush=True)
                differ += sum(a != b for a, b in zip(*texts.values()))
    for row in totals.values():
        row["tokens_per_s"] = row["tokens"] / row["wall_s"]
        row["tokens_per_cloud_cpu_s"] = row["tokens"] / max(row["cloud_cpu_s"], 1e-9)
    return {"sessions": args.sessions, "rtt_ms": args.rtt, "rounds": args.rounds, "texts_differ": differ, **totals}


def table(result: dict) -> str:
    lines = ["| mode | sessions at once | tokens | wall s | tokens / s | cloud CPU s | tokens / cloud CPU s | round trips |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in MODES:
        m = result[name]
        lines.append(f"| {name} | {result['sessions']} | {m['tokens']} | {m['wall_s']:.1f} | {m['tokens_per_s']:.1f} | "
                     f"{m['cloud_cpu_s']:.1f} | {m['tokens_per_cloud_cpu_s']:.1f} | {m['trips']} |")
    spec, plain = result["speculative"], result["step by step"]
    lines += ["", f"Speculative / step by step: {spec['tokens_per_s'] / plain['tokens_per_s']:.2f}× tokens per wall "
                  f"second, {spec['tokens_per_cloud_cpu_s'] / plain['tokens_per_cloud_cpu_s']:.2f}× tokens per cloud "
                  f"CPU second; texts that differ between the modes: {result['texts_differ']}."]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(default_model_dir()), help="model directory (default: the default model)")
    p.add_argument("--sessions", type=int, default=8, help="sessions completing at once (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of both modes (default: %(default)s)")
    p.add_argument("--rtt", type=float, default=0.0, help="round-trip time of the link in ms (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=16, help="tokens per completion at most (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="of the cursors (default: %(default)s)")
    p.add_argument("--json", default=str(ROOT / "benchmarks/results/wan_load.json"), help="results file")
    p.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = p.parse_args()
    torch.set_num_threads(1)
    model = ClientModel.load(args.model)
    points = cursors(args.sessions, args.seed)
    started = time.strftime("%Y-%m-%d %H:%M")
    with local_cloud_sync(args.model, settings={"torch_threads": 1}) as cloud:
        result = asyncio.run(measure(model, cloud, points, args))
    text = table(result)
    print(text)
    write_record(Path(args.json), started, args, result=result)
    if args.write:
        note = (f"Measured {started} UTC by `python benchmarks/wan_load.py --sessions {args.sessions} --rounds "
                f"{args.rounds} --rtt {args.rtt:g} --max-tokens {args.max_tokens}` on {describe()}; link: "
                f"benchmarks/wan_link.py's delaying TCP proxy on 127.0.0.1.")
        write_block(ROOT / "docs/benchmarks.md", "wan-load", note + "\n\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
