"""Does the decipherment (umbra/attacks/decipher.py) read a frontier cell's traffic the same way
whichever k-means seed and EM restarts it uses? The cell is tuned exactly as experiments/private_mode.py
tunes it (and stored in its work directory, so the grid reuses it); the attack then runs on the
client's own code at each volume (multiples of the grid's prompts) with each configuration.

    python experiments/decipher_stability.py --variant noir+path+noise1 --epsilon 1024 --seed 0 \\
        --volumes 10 100 --attack-seeds 0 1 2 --restarts 4 [--fit-positions 0 81920]

One JSON line per (volume, attack seed, restarts): recovery, clusters, pairs, final EM log-likelihood
(what an attacker without the truth can rank its runs by). Results: docs/privacy/frontier.md."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments import private_mode  # noqa: E402
from umbra.attack_grid.frontier import VARIANTS, Cell, FrontierParams, tuned_cell  # noqa: E402
from umbra.attacks.decipher import DecipherConfig, Decipherment  # noqa: E402
from umbra.attacks.volume import times, volume_traffic  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", default="noir+path+noise1", choices=sorted(VARIANTS))
    p.add_argument("--epsilon", type=float, default=1024.0)
    p.add_argument("--seed", type=int, default=0, help="the cell's seed (its client)")
    p.add_argument("--volumes", type=int, nargs="+", default=[10, 100])
    p.add_argument("--attack-seeds", type=int, nargs="+", default=[0, 1, 2], help="k-means / EM seeds")
    p.add_argument("--restarts", type=int, nargs="*", default=[4], help="EM restarts also tried at attack seed 0")
    p.add_argument("--fit-positions", type=int, nargs="+", default=[0], help="the attack fitted on a part of at most "
                   "this many received positions, every position labelled (0: on all), at each attack seed")
    p.add_argument("--corpus", type=Path, default=ROOT / "data" / "corpus")
    p.add_argument("--work", type=Path, default=ROOT / "runs" / "private_mode")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    grid = private_mode._args(["--corpus", str(args.corpus), "--work", str(args.work), "--device", "cpu"])
    bench = private_mode.Bench(grid, FrontierParams())
    variant = VARIANTS[args.variant]
    cell = Cell(variant, args.epsilon if variant.needs_epsilon else None, args.seed)
    tuned = tuned_cell(bench.public, cell, bench.params, bench.data(cell), bench.work)
    client = tuned.client
    configs = ([DecipherConfig(seed=s, fit_positions=f or None) for f in args.fit_positions for s in args.attack_seeds]
               + [DecipherConfig(restarts=r) for r in args.restarts])
    for k in args.volumes:
        traffic = volume_traffic(client.encoder, client.permutation, times(bench.volume, k), client.private_path,
                                 dtype=torch.float16)
        for config in configs:
            t0 = time.perf_counter()
            attack = Decipherment(bench.suite.blocks, config, vocab=bench.public.vocab_size)
            score = bench.suite.run(traffic, only=(), extra={"decipher": attack}).to_json().get("decipher")
            fit = attack.last_fit
            print(json.dumps({"cell": cell.key, "volume": k, "attack_seed": config.seed, "restarts": config.restarts,
                              "fit_positions": config.fit_positions,
                              "recovery": None if score is None else score["recovery"], "clusters": fit.get("clusters"),
                              "pairs": fit.get("pairs"), "log_likelihood": (fit.get("log_likelihood") or [None])[-1],
                              "seconds": round(time.perf_counter() - t0)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
