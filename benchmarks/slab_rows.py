"""What a decode slab's width costs on this CPU, and which widths give a row the widest slab's bits:
the projections of one Qwen2.5-Coder-1.5B block (q/o 1536 -> 1536, k/v 1536 -> 256, MLP 1536 -> 8960
and back), random weights, one torch thread, per dtype. For each width: ms per call (median of
--reps), whether every row equals the same row in a slab of 64, and "8 apart": 8 rows each run
alone (a GEMV each: row-by-row decoding, the other way to make a step's bits independent of its
company). Prints markdown.

    python benchmarks/slab_rows.py [--reps 10] [--dtypes bfloat16,float32]"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

SHAPES = {"q/o": (1536, 1536), "k/v": (1536, 256), "gate/up": (1536, 8960), "down": (8960, 1536)}
WIDTHS = (1, 2, 4, 8, 16, 64)


def ms(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


@torch.no_grad()
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--dtypes", default="bfloat16,float32")
    args = p.parse_args()
    torch.set_num_threads(1)
    print("| dtype | matmul | " + " | ".join(f"{w} rows ms" for w in WIDTHS) + " | 8 apart ms | widths with the 64-row bits |")
    print("|---|---|" + "---:|" * (len(WIDTHS) + 1) + "---|")
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        for label, (i, o) in SHAPES.items():
            g = torch.Generator().manual_seed(0)
            lin = torch.nn.Linear(i, o, bias=False).to(dtype)
            x = torch.randn(64, 1, i, generator=g).to(dtype)
            wide = lin(x)
            same = [w for w in WIDTHS if torch.equal(lin(x[:w]), wide[:w])]
            cost = [ms(lambda w=w: lin(x[:w]), args.reps) for w in WIDTHS]
            apart = ms(lambda: [lin(x[j: j + 1]) for j in range(8)], args.reps)
            print(f"| {name} | {label} {i}->{o} | " + " | ".join(f"{c:.2f}" for c in cost)
                  + f" | {apart:.2f} | {', '.join(map(str, same))} |")


if __name__ == "__main__":
    main()
