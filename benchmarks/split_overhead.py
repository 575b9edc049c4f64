"""Split-inference overhead, measured in one run on one model and machine.

    python benchmarks/split_overhead.py [--model DIR | --synthetic SHAPE] [--threads 1]

Variants: (a) monolithic lean loop (our blocks, no seam), (b) split with LocalMiddle,
(c) split through the real cloud service on loopback (uvicorn subprocess, WebSocket decode),
(d) transformers `generate` / forward on the same weights, (e) the control: split with the middle
in a second process behind a bare pipe (bare_split.py), which prices the two-process split
itself, so that (c)/(e) is the product's own overhead and (e)/(a) the machine's. Reports ms per decoded token,
ms for a long prefill, wire bytes per token, and a typing run (50 requests, one more character
each) through the split engine showing tokens recomputed per request. On big shapes
`--prefill-reps` times the long prefill in the first repetitions only and `--typing-max-tokens`
bounds what each typing request generates, so that a run with a 1k-token prefill and 50
keystrokes still fits in a session. Repetitions of all
variants are interleaved (the order rotating) and ratios are paired per repetition, with a
distribution-free confidence interval of their median, because this machine is noisy. Prints markdown.

`--synthetic qwen2.5-0.5b` builds random weights with Qwen2.5-0.5B's block shapes (24 layers,
hidden 896, GQA 14/2, MLP 4864) and the embedded tokenizer's vocabulary, for a model whose
per-token compute resembles a real code LLM's; `--synthetic qwen2.5-coder-1.5b` those of
Qwen2.5-Coder-1.5B (28 layers, hidden 1536, GQA 12/2, MLP 8960).

`--cpu-latency-us 0` holds a PM QoS request for the whole run (benchmarks/machine.py): idle CPUs
poll instead of halting, as on a latency-tuned server. Every variant runs under it, (a) included."""

from __future__ import annotations

import argparse
import asyncio
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from bare_split import PipeMiddle
from machine import cpu_latency, describe
from server.launch import local_cloud
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig
from umbra.engine.runner import MonolithicRunner, SplitRunner
from umbra.middle.local import LocalMiddle
from umbra.middle.remote import RemoteMiddle
from umbra.paths import default_model_dir, repo_root


# Block shapes of real code LLMs (Qwen2 family, tied embeddings), with random weights.
SYNTHETIC_SHAPES = {
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2),
    "qwen2.5-coder-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                               num_attention_heads=12, num_key_value_heads=2),
}


VARIANTS = {"a": "(a) monolithic lean loop", "b": "(b) split, LocalMiddle", "e": "(e) split, bare pipe (control)",
            "c": "(c) split, cloud on loopback", "d": "(d) transformers generate"}


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int, float]:
    """0-based ranks (lo, hi) of the sorted sample that bound its median with at least `confidence`
    (the order-statistic interval: the count of values below the median is Binomial(n, 1/2)),
    and the coverage they reach; with too few values, the whole range and its coverage."""
    def coverage(k: int) -> float:  # of [k-th, (n-1-k)-th]: 1 - 2 P(Binomial(n, 1/2) <= k)
        return 1 - 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    k = 0
    while k + 1 < (n - 1) / 2 and coverage(k + 1) >= confidence:
        k += 1
    return k, n - 1 - k, coverage(k)


def build_synthetic(shape: str, tokenizer_dir: Path, out: Path) -> Path:
    from transformers import AutoModelForCausalLM, Qwen2Config

    if shape not in SYNTHETIC_SHAPES:
        raise SystemExit(f"unknown synthetic shape {shape} (known: {', '.join(SYNTHETIC_SHAPES)})")
    vocab = len(__import__("json").loads((tokenizer_dir / "tokenizer.json").read_text())["model"]["vocab"])
    cfg = Qwen2Config(vocab_size=max(vocab, 8192), max_position_embeddings=4096, tie_word_embeddings=True,
                      rms_norm_eps=1e-6, **SYNTHETIC_SHAPES[shape])
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tokenizer_dir / name).exists():
            shutil.copy(tokenizer_dir / name, out / name)
    return out


async def time_runner(runner, prompt: list[int], steps: int) -> tuple[float, float]:
    """(prefill seconds, seconds per decoded token) for one greedy run on a fresh runner."""
    t0 = time.perf_counter()
    logits = await runner.run(prompt)
    t1 = time.perf_counter()
    for _ in range(steps):
        logits = await runner.run([int(logits.argmax())])
    t2 = time.perf_counter()
    await runner.close()
    return t1 - t0, (t2 - t1) / steps


def time_transformers(hf, prompt: list[int], steps: int) -> tuple[float, float]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        t0 = time.perf_counter()
        hf(ids, use_cache=True)
        t1 = time.perf_counter()
        hf.generate(ids, max_new_tokens=1, min_new_tokens=1, do_sample=False)
        t2 = time.perf_counter()
        hf.generate(ids, max_new_tokens=steps + 1, min_new_tokens=steps + 1, do_sample=False)
        t3 = time.perf_counter()
    return t1 - t0, ((t3 - t2) - (t2 - t1)) / steps


async def typing_run(engine: CompletionEngine, text: str, requests: int) -> list[tuple[int, int, float]]:
    """(prompt tokens, recomputed tokens, seconds) per request while a user types `requests`
    characters in the middle of `text`: the file grows by one character per request, the cursor
    after it, the text after the cursor unchanged (as an editor sends it on each keystroke)."""
    cut = text.index("\n", len(text) // 2) + 1  # start of a line in the middle of the file
    typed, rest = text[cut : cut + requests], text[cut + requests :]
    out = []
    async with engine.session() as session:
        for i in range(requests + 1):
            t0 = time.perf_counter()
            r = await session.complete(text[:cut] + typed[:i], rest)
            if i:  # the first request fills the caches; the run is the keystrokes after it
                out.append((r.prompt_tokens, r.recomputed_tokens, time.perf_counter() - t0))
    return out


def _stream_seconds(metrics_text: str) -> tuple[float, float]:
    """(sum, count) of the cloud's stream-step histogram in its Prometheus text."""
    out = [0.0, 0.0]
    for line in metrics_text.splitlines():
        if "stream" in line and not line.startswith("#") and ("_sum{" in line or "_count{" in line):
            out["_count{" in line] += float(line.rsplit(" ", 1)[1])
    return out[0], out[1]


async def step_anatomy(cloud, remote: RemoteMiddle, local: LocalMiddle, hidden: int, split_decode_ms: float,
                       steps: int = 200) -> dict[str, float]:
    """Median ms of one single-token middle step: LocalMiddle, and through the cloud back to back
    and after the client-side busy work of a split decode step (`split_decode_ms` minus the
    LocalMiddle step: what the client's own blocks take per token, reported as "client") — each
    cloud row with the cloud's own time for the step (receive to reply, from its /metrics)."""
    import httpx

    gen = torch.Generator().manual_seed(1)
    out = {}
    async with httpx.AsyncClient(base_url=cloud.base_url, headers={"Authorization": f"Bearer {cloud.token}"}) as http:
        for name, middle in (("local", local), ("cloud", remote), ("cloud_gap", remote)):
            gap = out["client"] / 1000 if name == "cloud_gap" else 0.0
            sid = await middle.open_session()
            await middle.forward(torch.randn(1, 8, hidden, generator=gen), torch.arange(8)[None], sid)
            before = _stream_seconds((await http.get("/metrics")).text)
            times = []
            for i in range(steps):
                x, pos = torch.randn(1, 1, hidden, generator=gen), torch.tensor([[8 + i]])
                start = time.perf_counter()
                while time.perf_counter() - start < gap:  # the client busy with its own blocks
                    pass
                t0 = time.perf_counter()
                await middle.forward(x, pos, sid)
                times.append(time.perf_counter() - t0)
            after = _stream_seconds((await http.get("/metrics")).text)
            await middle.close(sid)
            out[name] = statistics.median(times) * 1000
            if name == "local":
                out["client"] = max(0.0, split_decode_ms - out["local"])
            else:
                out[name + "_server"] = (after[0] - before[0]) / max(1.0, after[1] - before[1]) * 1000
    return out


async def main_async(args) -> None:
    torch.set_num_threads(args.threads)
    model_dir = args.model
    model = ClientModel.load(model_dir)
    spec = model.spec
    context = spec.max_position_embeddings
    prefill_len = min(args.prefill, context - args.steps - 8)
    prefill_reps = args.reps if args.prefill_reps is None else args.prefill_reps
    if not 1 <= prefill_reps <= args.reps:
        raise SystemExit("--prefill-reps must be between 1 and --reps")
    gen = torch.Generator().manual_seed(0)
    n_vocab = model.tokenizer.size
    long_prompt = torch.randint(0, n_vocab, (prefill_len,), generator=gen).tolist()
    short_prompt = long_prompt[:32]
    middle_blocks = model.load_middle()

    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    results: dict[str, dict[str, list[float]]] = {k: {"prefill": [], "decode": []} for k in VARIANTS}
    settings = {"torch_threads": args.threads}
    plan = model.plan
    pipe = PipeMiddle(model_dir, plan.encoder_blocks, plan.decoder_blocks, spec.hidden_size, args.threads)
    async with local_cloud(model_dir, plan, settings=settings) as cloud:
        remote = RemoteMiddle(cloud.base_url, cloud.token, hidden_size=spec.hidden_size)
        info = await remote.connect()
        local = LocalMiddle(middle_blocks)
        runners = {
            "a": lambda: MonolithicRunner(model.encoder, middle_blocks, model.decoder),
            "b": lambda: SplitRunner(model.encoder, model.decoder, local),
            "e": lambda: SplitRunner(model.encoder, model.decoder, pipe),
            "c": lambda: SplitRunner(model.encoder, model.decoder, remote),
        }
        for make in runners.values():  # warm up sockets, pipes and caches
            await time_runner(make(), short_prompt, 4)
        order = list(VARIANTS)
        for rep in range(args.reps):
            for key in order[rep % len(order):] + order[: rep % len(order)]:  # rotate: no variant always first
                prefill = rep < prefill_reps  # the long prefill only in the first repetitions
                if key == "d":
                    if prefill:
                        results["d"]["prefill"].append(time_transformers(hf, long_prompt, 1)[0])
                    results["d"]["decode"].append(time_transformers(hf, short_prompt, args.steps)[1])
                    continue
                if prefill:
                    results[key]["prefill"].append((await time_runner(runners[key](), long_prompt, 1))[0])
                results[key]["decode"].append((await time_runner(runners[key](), short_prompt, args.steps))[1])
        # bytes of a whole short run (1-token prompt + steps), reported per decoded token below
        remote.stats.reset()
        await time_runner(runners["c"](), short_prompt[:1], args.steps)
        per_token_bytes = (remote.stats.bytes_sent + remote.stats.bytes_received) / (args.steps + 1)
        sample = (repo_root() / "examples" / "sample.py").read_text()
        typing_config = EngineConfig(stop=StopConfig(max_tokens=args.typing_max_tokens))
        engine = CompletionEngine.split(model, remote, typing_config, context_length=info["max_seq_len"])
        typing = await typing_run(engine, sample, args.typing)
        anatomy = await step_anatomy(cloud, remote, local, spec.hidden_size,
                                     statistics.median(results["b"]["decode"]) * 1000)
        await remote.aclose()
    await pipe.aclose()

    # distinct tensors: a tied head is one tensor shared by the client's encoder and decoder
    n_params = sum(p.numel() for p in {id(p): p for part in (model.encoder, middle_blocks, model.decoder)
                                       for p in part.parameters()}.values())
    print(f"machine: {describe(args.cpu_latency_us)}\n")
    print(f"model: {model_dir.name if not args.synthetic else args.synthetic} ({spec.family}, {spec.num_layers} layers, "
          f"hidden {spec.hidden_size}, {n_params / 1e6:.1f}M parameters loaded: a tied embedding is held by both client parts), split E={plan.encoder_blocks} "
          f"D={plan.decoder_blocks}, fp32, torch threads={args.threads}, {args.reps} interleaved repetitions of "
          f"{args.steps} decoded tokens, and one {prefill_len}-token prefill per variant in "
          f"{'each' if prefill_reps == args.reps else f'the first {prefill_reps} only'}\n")
    lo, hi, coverage = median_ci_ranks(args.reps)
    ci = f"{coverage:.0%} confidence interval of the median, ranks {lo + 1} and {hi + 1} of {args.reps}"
    if prefill_reps < 3:
        ci += f"; the prefill is timed {prefill_reps}× per variant, too few for an interval"
    elif prefill_reps < args.reps:
        ci += f"; the prefill's, over its {prefill_reps} repetitions: {median_ci_ranks(prefill_reps)[2]:.0%}"
    print(f"Medians; ratios are paired (each repetition's variant over that repetition's (a)), given as median "
          f"[{ci}].\n")
    print(f"| variant | decode ms/token | decode ratio to (a) | prefill {prefill_len} tokens, ms | prefill ratio to (a) |")
    print("|---|---:|---:|---:|---:|")
    def paired(metric: str, over: str, key: str) -> str:
        """median [low, high] of the per-repetition ratios key/over (the interval for their count)"""
        ratios = sorted(x / y for x, y in zip(results[key][metric], results[over][metric]))
        if len(ratios) < 3:
            return f"{statistics.median(ratios):.3f}"
        low, high, _ = median_ci_ranks(len(ratios))
        return f"{statistics.median(ratios):.3f} [{ratios[low]:.3f}, {ratios[high]:.3f}]"

    for k, name in VARIANTS.items():
        row = [name]
        for metric in ("decode", "prefill"):
            row += [f"{statistics.median(results[k][metric]) * 1000:.2f}", paired(metric, "a", k)]
        print("| " + " | ".join(row) + " |")
    print(f"\nthe product's own decode overhead, (c)/(e) paired: {paired('decode', 'e', 'c')}; "
          f"the machine's price of two processes, (e)/(a): see the table")
    print(f"\nwire bytes per decoded token (both directions, fp32 payloads): {per_token_bytes:,.0f} "
          f"(hidden size {spec.hidden_size} × 4 bytes × 2 directions = {spec.hidden_size * 8:,} + framing)")
    a = anatomy
    print(f"\nanatomy of one decode step's middle (median ms): LocalMiddle {a['local']:.2f}; through the cloud "
          f"back to back {a['cloud']:.2f} (the cloud's own receive-to-reply time {a['cloud_server']:.2f}); through "
          f"the cloud after {a['client']:.1f} ms of client work, as in (c), {a['cloud_gap']:.2f} (cloud's own "
          f"{a['cloud_gap_server']:.2f})")
    recomputed = [r for _, r, _ in typing]
    request_ms = [s * 1000 for _, _, s in typing]
    print(f"\ntyping run: {len(typing)} requests, each one more character, through the cloud: prompt "
          f"{typing[0][0]}–{typing[-1][0]} tokens; tokens recomputed per request: min {min(recomputed)}, "
          f"median {statistics.median(recomputed):.0f}, max {max(recomputed)} "
          f"(re-running the prompt would be {statistics.median(p for p, _, _ in typing):.0f}); "
          f"request latency median {statistics.median(request_ms):.1f} ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=None, help="model directory (default: the embedded model)")
    p.add_argument("--synthetic", default=None, help="random weights of a real model's shape: " + ", ".join(SYNTHETIC_SHAPES))
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads, client and cloud alike")
    p.add_argument("--steps", type=int, default=64, help="decode steps per timed run")
    p.add_argument("--prefill", type=int, default=1024, help="long prompt length (capped by the context)")
    p.add_argument("--reps", type=int, default=5, help="interleaved repetitions (medians reported)")
    p.add_argument("--prefill-reps", type=int, default=None,
                   help="time the long prefill in only the first N repetitions (default: all)")
    p.add_argument("--typing", type=int, default=50, help="requests in the typing run")
    p.add_argument("--typing-max-tokens", type=int, default=EngineConfig().stop.max_tokens,
                   help="tokens generated per typing-run request at most")
    p.add_argument("--cpu-latency-us", type=int, default=None,
                   help="hold this PM QoS CPU latency bound for the run (0: idle CPUs poll; needs root)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="umbra-bench-") as tmp, cpu_latency(args.cpu_latency_us):
        if args.synthetic:
            args.model = build_synthetic(args.synthetic, args.model or default_model_dir(), Path(tmp) / "m")
        else:
            args.model = args.model or default_model_dir()
        asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
