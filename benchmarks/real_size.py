"""A real-size model split between this process and the real cloud on loopback: what each side's
memory peaks at against the bytes of its parts, and what the split costs per decoded token.

    python benchmarks/synthetic_model.py runs/syn-1.5b          # Qwen2.5-Coder-1.5B's shape, bf16
    python benchmarks/real_size.py runs/syn-1.5b [--dtype bfloat16] [--steps 16] [--reps 3]

1. Client: `benchmarks/part_memory.py DIR client DTYPE` in a fresh process (tokenizer and both
   client parts, as `umbra complete` loads them): its peak RSS against the parts' bytes.
   A weight checkpointed in the asked dtype stays mapped from its shard until first read, so the
   peak is taken after a 32-position forward through both parts (every weight read once).
2. Cloud: the real service (`python -m server`, --device cpu --dtype DTYPE, --kv-budget-bytes)
   serving the run below; its peak RSS (VmHWM) at the end against the middle's bytes + the budget.
3. Decode: ms per token of (a) monolithic (the three parts in this process, MonolithicRunner) and
   (c) split (client parts here, the middle in the cloud, WebSocket on loopback, the wire in DTYPE),
   interleaved repetitions of a greedy run after a short prompt, the order alternating; the ratio
   is per repetition (median reported). One torch thread per process. Prints markdown."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from server.launch import local_cloud
from umbra.engine import ClientModel
from umbra.engine.runner import MonolithicRunner, SplitRunner
from umbra.middle.remote import RemoteMiddle

HERE = Path(__file__).resolve().parent


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"no VmHWM for process {pid}")


def client_memory(model_dir: Path, dtype: str) -> dict:
    out = subprocess.run([sys.executable, str(HERE / "part_memory.py"), str(model_dir), "client", dtype, "--forward", "32"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


async def per_token(runner, prompt: list[int], steps: int) -> float:
    logits = await runner.run(prompt)
    t0 = time.perf_counter()
    for _ in range(steps):
        logits = await runner.run([int(logits.reshape(-1, logits.shape[-1])[-1].argmax())])
    seconds = (time.perf_counter() - t0) / steps
    await runner.close()
    return seconds


async def decode_run(args, model: ClientModel, middle_bytes: list[int]) -> dict:
    dtype = getattr(torch, args.dtype)
    middle = model.load_middle()
    middle_bytes.append(sum(t.numel() * t.element_size() for t in middle.state_dict().values()))
    prompt = torch.randint(10, model.tokenizer.size, (args.prompt,), generator=torch.Generator().manual_seed(0)).tolist()
    settings = {"torch_threads": 1, "device": "cpu", "dtype": args.dtype, "kv_budget_bytes": args.kv_budget_bytes,
                **dict(kv.split("=", 1) for kv in args.cloud_setting)}
    times: dict[str, list[float]] = {"a": [], "c": []}
    async with local_cloud(model.model_dir, model.plan, settings=settings, startup_timeout=600) as cloud:
        remote = RemoteMiddle(cloud.base_url, cloud.token, wire_dtype=dtype, hidden_size=model.spec.hidden_size)
        runners = {"a": lambda: MonolithicRunner(model.encoder, middle, model.decoder),
                   "c": lambda: SplitRunner(model.encoder, model.decoder, remote)}
        for make in runners.values():  # warm-up
            await per_token(make(), prompt, 2)
        for rep in range(args.reps):
            for key in ("a", "c") if rep % 2 == 0 else ("c", "a"):
                times[key].append(await per_token(runners[key](), prompt, args.steps))
        await remote.aclose()
        cloud_peak = peak_rss(cloud.process.pid)
        widths = [line.split("decode slab widths", 1)[1].strip() for line in cloud.log_path.read_text().splitlines()
                  if "decode slab widths" in line]
    return {"times": times, "cloud_peak": cloud_peak, "widths": widths}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", type=Path)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--steps", type=int, default=16, help="decode steps per timed run")
    p.add_argument("--prompt", type=int, default=32, help="prompt tokens before the timed steps")
    p.add_argument("--reps", type=int, default=3, help="interleaved repetitions")
    p.add_argument("--kv-budget-bytes", type=int, default=256 * 2**20, help="the cloud's KV budget")
    p.add_argument("--cloud-setting", action="append", default=[], metavar="FIELD=VALUE",
                   help="another CloudSettings field for the cloud (e.g. decode_min_width=1); repeatable")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    client = client_memory(args.model, args.dtype)
    model = ClientModel.load(args.model, dtype=getattr(torch, args.dtype))
    middle_bytes: list[int] = []
    run = asyncio.run(decode_run(args, model, middle_bytes))
    mb = 2**20
    c_target = 1.25 * client["part_bytes"] + 300e6
    m_target = 1.25 * middle_bytes[0] + args.kv_budget_bytes
    a, c = run["times"]["a"], run["times"]["c"]
    ratios = [y / x for x, y in zip(a, c)]
    print(f"model {args.model} ({model.spec.num_layers} x {model.spec.hidden_size}, vocab {model.spec.vocab_size}), "
          f"split E={model.plan.encoder_blocks} D={model.plan.decoder_blocks}, {args.dtype}, 1 thread per process, "
          f"cloud settings {' '.join(args.cloud_setting) or 'default'}; the cloud's decode slab widths "
          f"{' '.join(run['widths']) or '(not logged)'}\n")
    print("| side | parts' bytes | peak RSS | target | holds |\n|---|---:|---:|---:|---|")
    print(f"| client (loaded, then 32 positions) | {client['part_bytes'] / mb:.0f} MiB | {client['peak'] / mb:.0f} MiB | "
          f"{c_target / mb:.0f} MiB (1.25 x parts + 300 MB) | {client['peak'] <= c_target} |")
    print(f"| cloud (after the decode runs) | {middle_bytes[0] / mb:.0f} MiB | {run['cloud_peak'] / mb:.0f} MiB | {m_target / mb:.0f} MiB "
          f"(1.25 x middle + {args.kv_budget_bytes / mb:.0f} MiB KV budget) | {run['cloud_peak'] <= m_target} |\n")
    print("| decode (ms/token) | reps | median | min | max |\n|---|---:|---:|---:|---:|")
    for name, xs in (("(a) monolithic", a), ("(c) split, cloud on loopback", c)):
        print(f"| {name} | {len(xs)} | {statistics.median(xs) * 1e3:.0f} | {min(xs) * 1e3:.0f} | {max(xs) * 1e3:.0f} |")
    print(f"\nsplit / monolithic per repetition: {', '.join(f'{r:.3f}' for r in ratios)}; "
          f"median {statistics.median(ratios):.3f} (target <= 1.15)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
