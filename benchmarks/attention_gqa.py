"""One decode step's grouped-query attention: SDPA reading the KV heads directly (`enable_gqa`, what
umbra/model/layers.py does) against first copying the cache once per head group
(`repeat_interleave`, what it did before), at several cache lengths.

    python benchmarks/attention_gqa.py [--lengths 128,300,1000,2000] [--reps 5]

Shapes: the default model's heads and those of Qwen2.5-0.5B and Qwen2.5-Coder-1.5B. One query
token, batch 1, fp32, one torch thread. The two are interleaved per repetition and the ratio is
paired; prints a markdown table of medians (µs per layer)."""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from umbra.model.spec import load_spec
from umbra.paths import default_model_dir

# name -> (query heads, kv heads, head dim)
SHAPES = {"qwen2.5-0.5b": (14, 2, 64), "qwen2.5-coder-1.5b": (12, 2, 128)}


def _time(fn, calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls * 1e6


def measure(heads: int, kv_heads: int, head_dim: int, length: int, reps: int) -> tuple[float, float, float]:
    """(copy µs, gqa µs, paired median ratio gqa/copy) for one step attending to `length` positions."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, heads, 1, head_dim, generator=g)  # [B,H,1,hd]
    k = torch.randn(1, kv_heads, length, head_dim, generator=g)  # [B,KV,S,hd]
    v = torch.randn(1, kv_heads, length, head_dim, generator=g)
    groups = heads // kv_heads

    def copy():
        return F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1))

    def gqa():
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    if not torch.allclose(copy(), gqa(), atol=1e-6):
        raise RuntimeError("the two attentions disagree")
    calls = max(20, int(2e5 / length))
    a, b = [], []
    for _ in range(reps):
        a.append(_time(copy, calls))
        b.append(_time(gqa, calls))
    return statistics.median(a), statistics.median(b), statistics.median(y / x for x, y in zip(a, b))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="128,300,1000,2000", help="cached positions, comma-separated")
    p.add_argument("--reps", type=int, default=5, help="interleaved repetitions")
    args = p.parse_args()
    torch.set_num_threads(1)
    spec = load_spec(default_model_dir())
    shapes = {"default model": (spec.num_heads, spec.num_kv_heads, spec.head_dim), **SHAPES}
    print("| heads (query/kv × dim) | cached positions | copy, µs | enable_gqa, µs | ratio |")
    print("|---|---:|---:|---:|---:|")
    for name, (h, kv, hd) in shapes.items():
        for length in (int(x) for x in args.lengths.split(",")):
            copy_us, gqa_us, ratio = measure(h, kv, hd, length, args.reps)
            print(f"| {name} ({h}/{kv} × {hd}) | {length} | {copy_us:.1f} | {gqa_us:.1f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
