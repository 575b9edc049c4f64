"""What adapters cost per decoded token: one expert LoRA + one access LoRA on the client's decoder
blocks (the default placement, every attention and MLP projection) against no adapters, on the
same split runner, model and machine, in one run.

    python benchmarks/adapter_overhead.py [--model DIR | --synthetic SHAPE] [--reps 11] [--steps 32]

Each repetition decodes the same fixed token sequence after the same prompt once per variant, in
rotating order, and the ratio is paired per repetition; the table gives the median ratio with a
distribution-free confidence interval (split_overhead.py's order-statistic interval). The middle
runs in-process (LocalMiddle) so that the cloud's transport, which adapters do not touch, adds
no noise; `--cloud` runs it through the real service on loopback instead. Prints markdown."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from machine import describe
from split_overhead import SYNTHETIC_SHAPES, build_synthetic, median_ci_ranks
from umbra.engine import ClientModel
from umbra.engine.runner import SplitRunner
from umbra.middle.local import LocalMiddle
from umbra.model.adapters import AdapterSet, LoraConfig, build_adapter
from umbra.paths import default_model_dir

VARIANTS = {"none": "no adapters", "expert+access": "expert LoRA + access LoRA (decoder)"}


def adapters(model: ClientModel, rank: int, merge: bool = True) -> dict[str, AdapterSet]:
    spec, shape = model.spec, model.plan.shape(model.spec.num_layers)
    made = []
    for i, name in enumerate(("python", "access")):
        a = build_adapter(name, LoraConfig(rank=rank, init_seed=i), spec, shape, dtype=model.dtype)
        with torch.no_grad():  # trained-like output weights (the cost does not depend on their values)
            for n, p in a.named_parameters():
                if n.endswith(".b"):
                    p.normal_(0, 0.01, generator=torch.Generator().manual_seed(i))
        made.append(a)
    kept = AdapterSet(made) if merge else AdapterSet(made, merge_bytes=0)
    return {"none": AdapterSet(), "expert+access": kept}


async def decode_ms(model, middle, aset: AdapterSet, prompt: list[int], tokens: list[int]) -> float:
    runner = SplitRunner(model.encoder, model.decoder, middle)
    try:
        await runner.use(aset)
        await runner.run(prompt)
        t0 = time.perf_counter()
        for t in tokens:
            await runner.run([t])
        return (time.perf_counter() - t0) / len(tokens) * 1e3
    finally:
        await runner.close()


async def measure(model, middle, sets, prompt, tokens, reps: int) -> dict[str, list[float]]:
    names = list(sets)
    times: dict[str, list[float]] = {n: [] for n in names}
    await decode_ms(model, middle, sets[names[-1]], prompt, tokens[:4])  # warm-up
    for r in range(reps):
        for n in names[r % len(names):] + names[: r % len(names)]:
            times[n].append(await decode_ms(model, middle, sets[n], prompt, tokens))
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--synthetic", choices=sorted(SYNTHETIC_SHAPES), default=None)
    p.add_argument("--reps", type=int, default=11)
    p.add_argument("--steps", type=int, default=32, help="decoded tokens per measurement")
    p.add_argument("--prompt", type=int, default=256, help="prompt tokens before decoding")
    p.add_argument("--rank", type=int, default=16, help="rank of each LoRA")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cloud", action="store_true", help="the middle through the real cloud service on loopback")
    p.add_argument("--no-merge", action="store_true",
                   help="price the per-token low-rank path even where the set would merge its LoRAs")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="umbra-adapter-bench-"))
    try:
        model_dir = args.model or default_model_dir()
        if args.synthetic:
            model_dir = build_synthetic(args.synthetic, default_model_dir(), work / args.synthetic)
        model = ClientModel.load(model_dir)
        sets = adapters(model, args.rank, merge=not args.no_merge)
        gen = torch.Generator().manual_seed(0)
        ids = torch.randint(10, model.tokenizer.size, (args.prompt + args.steps,), generator=gen).tolist()
        times = asyncio.run(_run(model, sets, ids[: args.prompt], ids[args.prompt :], args))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = sorted(b / a for a, b in zip(times["none"], times["expert+access"]))
    lo, hi, cover = median_ci_ranks(len(ratios))
    params = sum(a.parameter_count for a in sets["expert+access"].adapters)
    print(describe())
    print(f"\nModel `{args.synthetic or Path(model_dir).name}` ({model.spec.num_layers} layers, hidden "
          f"{model.spec.hidden_size}, split E={model.plan.encoder_blocks} D={model.plan.decoder_blocks}); two LoRAs "
          f"of rank {args.rank} on every projection of the {model.plan.decoder_blocks} decoder blocks ({params:,} "
          f"parameters); prompt {args.prompt} tokens, {args.steps} decoded tokens per measurement, {args.reps} "
          f"repetitions, middle {'through the cloud on loopback' if args.cloud else 'in-process'}, LoRAs "
          f"{'merged into per-set weights' if sets['expert+access'].merge else 'applied per token (low rank)'}, "
          f"{args.threads} thread(s).\n")
    print(f"| variant | decode ms/token (median) | ratio to none, median [{cover:.0%} interval] |")
    print("|---|---:|---:|")
    print(f"| {VARIANTS['none']} | {statistics.median(times['none']):.2f} | 1.000 |")
    print(f"| {VARIANTS['expert+access']} | {statistics.median(times['expert+access']):.2f} | "
          f"{statistics.median(ratios):.3f} [{ratios[lo]:.3f}, {ratios[hi]:.3f}] |")


async def _run(model, sets, prompt, tokens, args):
    async with contextlib.AsyncExitStack() as stack:
        if args.cloud:
            from server.launch import local_cloud
            from umbra.middle.remote import RemoteMiddle

            cloud = await stack.enter_async_context(
                local_cloud(model.check_base(), model.plan, settings={"torch_threads": args.threads}))
            middle = RemoteMiddle(cloud.base_url, cloud.token, hidden_size=model.spec.hidden_size, verify=cloud.verify,
                                  layers=model.plan.middle_range(model.spec.num_layers))
            await middle.connect()
            stack.push_async_callback(middle.aclose)
        else:
            middle = LocalMiddle(model.load_middle())
        return await measure(model, middle, sets, prompt, tokens, args.reps)


if __name__ == "__main__":
    main()
