"""Time to build an INDVocab table (exact sampling), printed as a markdown table.

    python benchmarks/indvocab_build.py                       # 16k x 256 at three ε, 150k x 4096 at ε = 13
    python benchmarks/indvocab_build.py --skip-large          # only the small tables (seconds)
    python benchmarks/indvocab_build.py --skip-small --large-dtype bfloat16   # a realistic large table
    python benchmarks/indvocab_build.py --model models/umbra-code-tiny   # also the model's real table

Tables are synthetic N(0, 0.02²): float32 values are all distinct (the sampler's worst case:
|S_i| = |V|); bfloat16 tables, like real checkpoints, repeat values and run faster. The time is
INDVocab.randomize alone (not making the table), in one thread; wall time depends on whatever
else the machine runs (the load average is printed), CPU time (process_time) much less so."""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from umbra.privacy.indvocab import INDVocab, INDVocabConfig, num_bands  # noqa: E402


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def synthetic(rows: int, cols: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(rows, cols, dtype=dtype)
    for r0 in range(0, rows, 8192):  # in slices, so float32 scratch stays small
        r1 = min(rows, r0 + 8192)
        out[r0:r1] = (torch.randn(r1 - r0, cols, generator=g) * 0.02).to(dtype)
    return out


def model_table(model_dir: Path) -> torch.Tensor:
    from umbra.model.loader import Checkpoint

    return Checkpoint(model_dir).get("model.embed_tokens.weight")


def time_build(name: str, table: torch.Tensor, epsilon: float, h: float) -> dict:
    d = table.shape[1]
    distinct = float(np.mean([torch.unique(table[:, i]).numel() for i in range(0, d, max(1, d // 16))]))
    t0, c0 = time.perf_counter(), time.process_time()
    INDVocab(INDVocabConfig(epsilon, h)).randomize(table)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return dict(table=name, shape=f"{table.shape[0]} x {d}", dtype=str(table.dtype).replace("torch.", ""),
                distinct=distinct, epsilon=epsilon, eps_i=epsilon / d, bands=num_bands(epsilon / d),
                seconds=seconds, cpu=cpu, cols_per_cpu_s=d / cpu)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epsilons", type=_floats, default=[13.0, 256.0, 2560.0], help="ε for the 16k x 256 table")
    ap.add_argument("--large-epsilons", type=_floats, default=[13.0], help="ε for the 150k x 4096 table")
    ap.add_argument("--large-dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--skip-large", action="store_true", help="only the 16k x 256 tables")
    ap.add_argument("--skip-small", action="store_true", help="only the 150k x 4096 table")
    ap.add_argument("--model", type=Path, help="also time this model directory's own embedding table")
    ap.add_argument("--h", type=float, default=0.25)
    args = ap.parse_args(argv)

    rows = []
    small = {"float32": synthetic(16384, 256, torch.float32), "bfloat16": synthetic(16384, 256, torch.bfloat16)}
    for eps in [] if args.skip_small else args.epsilons:
        for dtype, table in small.items():
            rows.append(time_build("synthetic", table, eps, args.h))
    if args.model is not None:
        table = model_table(args.model)
        for eps in args.epsilons:
            rows.append(time_build(args.model.name, table, eps, args.h))
    if not args.skip_large:
        large = synthetic(150_000, 4096, getattr(torch, args.large_dtype))
        for eps in args.large_epsilons:
            rows.append(time_build("synthetic", large, eps, args.h))

    load = os.getloadavg()
    print(f"INDVocab build time (exact sampling), h={args.h}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, load average {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f} at the end; "
          f"torch {torch.__version__}, numpy {np.__version__}\n")
    print("| table | shape | dtype | mean distinct values / column | ε | ε_i = ε/d | bands K | wall s | CPU s | columns / CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        eps = "∞" if math.isinf(r["epsilon"]) else f"{r['epsilon']:g}"
        print(f"| {r['table']} | {r['shape']} | {r['dtype']} | {r['distinct']:.0f} | {eps} | {r['eps_i']:.3g} | "
              f"{r['bands']} | {r['seconds']:.1f} | {r['cpu']:.1f} | {r['cols_per_cpu_s']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
