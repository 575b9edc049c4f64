"""The cost of a document-level DP-SGD step against a non-private step, per shared-parameter family.

    python benchmarks/dp_step.py [--batch 32] [--physical-batch 8] [--block-len 128] [--rounds 5]
        [--threads 1] [--write]

Both variants run umbra.tuning.noesis.dp_step on the same sampled documents (private code of
`umbra data private`, every language), the same equal-shaped chunks, through LocalMiddle with the
embedded default model: the private step takes per-document gradients (vmap over the client's
blocks, the middle's backward batched per document), clips, sums and adds CSPRNG noise; the
non-private step (ε = ∞) is one backward of the summed loss. Variants are interleaved within each
round (order alternating), the first round is warm-up, and medians are reported with their ratio —
the ratio is what to read, the machine is shared. --write puts the table into docs/benchmarks.md."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from doc_markers import write_block  # noqa: E402
from umbra.data.corpus import LANGS, read_documents  # noqa: E402
from umbra.engine import ClientModel  # noqa: E402
from umbra.middle.local import LocalMiddle  # noqa: E402
from umbra.tuning.doc_blocks import DocumentBlocks  # noqa: E402
from umbra.tuning.dp_sgd import DPRandom, plan_run  # noqa: E402
from umbra.tuning.noesis import dp_step  # noqa: E402
from umbra.tuning.noesis_config import DPConfig, SharedConfig, StageOneConfig  # noqa: E402
from umbra.tuning.shared_params import SharedParams  # noqa: E402

FAMILIES = ("soft_prompt", "deep_prompt", "lora", "bottleneck", "full")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "models" / "umbra-code-tiny")
    p.add_argument("--corpus-dir", type=Path, default=ROOT / "data" / "corpus" / "private")
    p.add_argument("--documents", type=int, default=512, help="documents the step samples from")
    p.add_argument("--batch", type=int, default=32, help="documents in the step (both variants)")
    p.add_argument("--physical-batch", type=int, default=8)
    p.add_argument("--block-len", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5, help="rounds per family (the first is warm-up)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    p.add_argument("--write", action="store_true", help="put the table into docs/benchmarks.md")
    return p.parse_args(argv)


def documents(corpus_dir: Path, count: int):
    docs = [d for lang in LANGS for d in read_documents(corpus_dir, "train", lang)]
    return sorted(docs, key=lambda d: hashlib.sha256(d.path.encode()).digest())[:count]


def config(family: str, epsilon: float, args) -> StageOneConfig:
    shared = SharedConfig(family)
    prompt = shared.prompt_length if family == "soft_prompt" else 0
    return StageOneConfig(shared, DPConfig(epsilon, expected_batch=args.batch, epochs=1.0, noise_seed=0),
                          context_length=args.block_len + prompt, physical_batch=args.physical_batch)


async def measure(model, middle, docs, family: str, args) -> dict:
    variants = {"private": config(family, 1.0, args), "non-private": config(family, math.inf, args)}
    blocks = DocumentBlocks(docs, model.tokenizer, args.block_len, fim_rate=0.5)
    plans = {k: plan_run(c.dp, len(blocks)) for k, c in variants.items()}
    shared = SharedParams(model, variants["private"].shared)
    chosen = list(range(args.batch))
    times = {k: [] for k in variants}
    shared.train()
    session = await middle.open_session(training=True)
    try:
        for r in range(args.rounds):
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for k in order:
                rng = DPRandom(r)
                t0 = time.perf_counter()
                await dp_step(shared, middle, session, blocks, chosen, plans[k], variants[k], rng)
                if r > 0:
                    times[k].append(time.perf_counter() - t0)
    finally:
        await middle.close(session)
        shared.freeze()
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"family": family, "parameters": shared.parameter_count, "private": med["private"],
            "non-private": med["non-private"], "ratio": med["private"] / med["non-private"],
            "sigma": plans["private"].noise_multiplier}


def table(rows: list[dict], args) -> str:
    lines = [f"Step of {args.batch} documents × {args.block_len} tokens (physical batch {args.physical_batch}), "
             f"{args.rounds - 1} timed rounds, torch threads {args.threads}, {platform.machine()} "
             f"({torch.__version__}).", "",
             "| shared parameters | trainable | non-private step (s) | DP step (s) | DP / non-private |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['family']} | {r['parameters']:,} | {r['non-private']:.2f} | {r['private']:.2f} | "
                     f"{r['ratio']:.2f}× |")
    return "\n".join(lines)


async def main_async(args) -> str:
    torch.set_num_threads(args.threads)
    model = ClientModel.load(args.model)
    middle = LocalMiddle(model.load_middle())
    docs = documents(args.corpus_dir, args.documents)
    rows = []
    for family in args.families:
        fam_model = ClientModel.load(args.model) if family == "full" else model  # full tunes the blocks in place
        rows.append(await measure(fam_model, middle, docs, family, args))
        print(rows[-1], flush=True)
    return table(rows, args)


def main(argv=None) -> int:
    args = parse_args(argv)
    text = asyncio.run(main_async(args))
    print(text)
    if args.write:
        write_block(ROOT / "docs" / "benchmarks.md", "dp-step", text, append=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
