"""STuning step time: the same split fine-tuning step through LocalMiddle and through the real
cloud service on loopback (RemoteMiddle over HTTP), plus the no-seam reference (autograd
straight through the middle blocks, no recompute). Prints a markdown table.

    python benchmarks/stuning_step.py [--model DIR | --checkpoint runs/pretrain/last.pt]
        [--batch-size 4] [--context-length 256] [--steps 4] [--rounds 5] [--threads 1] [--epsilon 13]

A step = encoder forward, middle forward, decoder forward + loss + backward, middle backward
(the cloud recomputes its forward), encoder backward, clip, AdamW. Variants are interleaved
over --rounds (each round runs --steps steps per variant and drops its first as warm-up) and
medians are reported, because this machine is shared. The cloud is `python -m server` with the
same torch thread count; wire bytes are payload bytes (fp32 frames)."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from server.launch import local_cloud  # noqa: E402
from umbra.data.corpus import read_split  # noqa: E402
from umbra.middle.local import LocalMiddle  # noqa: E402
from umbra.middle.remote import RemoteMiddle  # noqa: E402
from umbra.model.loader import load_middle  # noqa: E402
from umbra.model.parts import SplitPlan  # noqa: E402
from umbra.model.spec import load_spec  # noqa: E402
from umbra.training.packing import load_raw_tokenizer  # noqa: E402
from umbra.tuning import TuneConfig, TuneData, defended_client, tune  # noqa: E402
from umbra.tuning.client import select_trainable  # noqa: E402
from umbra.tuning.loop import make_optimizer, model_ids  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=Path("models/umbra-code-tiny"))
    p.add_argument("--checkpoint", type=Path, default=Path("runs/pretrain/last.pt"))
    p.add_argument("--work", type=Path, default=Path("runs/stuning_step"), help="export of --checkpoint, data cache")
    p.add_argument("--corpus-dir", type=Path, default=Path("data/corpus"))
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--context-length", type=int, default=256)
    p.add_argument("--steps", type=int, default=4, help="steps per variant per round (the first is warm-up)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--epsilon", type=float, default=13.0)
    return p.parse_args(argv)


def resolve_base(args) -> tuple[Path, str]:
    if (args.model / "model.safetensors").is_file():
        return args.model, str(args.model)
    from umbra.training.checkpoint import load_checkpoint
    from umbra.training.export import export_checkpoint

    step = load_checkpoint(args.checkpoint)["state"]["step"]
    out = args.work / f"base-step{step}"
    if not (out / "model.safetensors").is_file():
        export_checkpoint(args.checkpoint, out, args.model)
    return out, f"export of {args.checkpoint} (pretraining step {step})"


class NoSeam:
    """The same trainable parameters and optimizer, with autograd through the middle blocks."""

    def __init__(self, client, middle_blocks, config: TuneConfig):
        self.client, self.middle = client, middle_blocks
        self.trainable = select_trainable(client, False)
        self.optimizer = make_optimizer(self.trainable, config)

    def step(self, ids: torch.Tensor) -> float:
        select_trainable(self.client, False)  # tune() leaves the parts frozen when it returns
        t0 = time.perf_counter()
        b, t = ids.shape
        pos = torch.arange(t).expand(b, t)
        logits = self.client.decoder(self.middle(self.client.encoder(ids, pos), pos), pos)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(self.trainable.values()), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - t0


async def main(args) -> None:
    torch.set_num_threads(args.threads)
    base, desc = resolve_base(args)
    spec = load_spec(base)
    plan = SplitPlan.default(spec.num_layers)
    config = TuneConfig(steps=args.steps, batch_size=args.batch_size, context_length=args.context_length,
                        warmup_steps=0, checkpoint_every=10**6)
    docs = read_split(args.corpus_dir, "train")
    pick = np.random.default_rng(0).choice(len(docs), min(300, len(docs)), replace=False)
    data = TuneData([docs[i] for i in sorted(pick)], load_raw_tokenizer(base), config, args.work / "data")
    client = defended_client(base, args.epsilon, plan=plan, seed="stuning-step")
    middle_blocks = load_middle(base, plan)
    local = LocalMiddle(middle_blocks)
    noseam = NoSeam(client, middle_blocks, config)
    ids = model_ids(client, data.batch(0, 0, args.batch_size)[0])
    times: dict[str, list[float]] = {"no seam (autograd through the middle)": [], "LocalMiddle": [],
                                     "cloud service (loopback)": []}
    bytes_per_step = 0.0
    async with local_cloud(base, plan, settings={"torch_threads": args.threads}) as cloud:
        remote = RemoteMiddle(cloud.base_url, cloud.token, hidden_size=spec.hidden_size)
        try:
            await remote.connect()
            for r in range(args.rounds):
                times["no seam (autograd through the middle)"] += [noseam.step(ids) for _ in range(args.steps)][1:]
                res = await tune(client, local, data, config)
                times["LocalMiddle"] += res.step_seconds[1:]
                remote.stats.reset()
                res = await tune(client, remote, data, config)
                times["cloud service (loopback)"] += res.step_seconds[1:]
                bytes_per_step = (remote.stats.bytes_sent + remote.stats.bytes_received) / args.steps
                print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        finally:
            await remote.aclose()
    tokens = args.batch_size * args.context_length
    ref = statistics.median(times["LocalMiddle"])
    print(f"STuning step, {desc}: split E={plan.encoder_blocks} D={plan.decoder_blocks} of {spec.num_layers}, "
          f"batch {args.batch_size} × {args.context_length} tokens, ε = {args.epsilon:g}, {args.threads} torch "
          f"thread(s) per side, {args.rounds} rounds × {args.steps - 1} timed steps; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.\n")
    print("| variant | median s/step | tokens/s | ratio vs LocalMiddle | wire bytes/step |")
    print("|---|---:|---:|---:|---:|")
    for name, ts in times.items():
        med = statistics.median(ts)
        wire = f"{bytes_per_step / 1e6:.2f} MB" if name.startswith("cloud") else "—"
        print(f"| {name} | {med:.3f} | {tokens / med:,.0f} | {med / ref:.2f}× | {wire} |")


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
