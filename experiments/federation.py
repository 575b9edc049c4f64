"""SecureGate's federation measured (seed 003 Table 1, Fig. 2, Fig. 5 / Table 5) on organizations
made of the private Python domain's projects (experiments/federation_orgs.py), with the embedded
default model on this CPU. Run with the federation environment (Flower):

    .venv-federation/bin/python experiments/federation.py [--quick] [--seed 0] [--write] [--pool-seeds 0 1 2]
    .venv-federation/bin/python experiments/federation.py --seed 0 --org-files 96 --org-heldout 8 \
        --cells t1:SecureFedNesterov f2:dp          # larger organizations (their own settings key)

Cells (each appended to experiments/results/federation.jsonl, committed, when done; a rerun skips the cells already
there for the same seed and settings, and `--write` alone rewrites the docs from that file):

  t1:<strategy>  3 organizations, T rounds of K local epochs on each one's scrubbed view, for Flower's
                 FedAvg, FedAdagrad, FedAdam, FedYogi, FedAvgM and our SecureFedNesterov (eqs. 3-5) at
                 η = 1 (where eqs. 4-5 reduce to FedAvg whatever m) and η = 0.5
  f2:raw, f2:dp  SecureFedNesterov without scrubbing (a control: the secure side trained on the raw
                 view) and with scrubbing + document-level DP-SGD at ε (org_training.py's DP option);
                 with t1:SecureFedNesterov (scrubbing alone) they are Fig. 2, for the canaries the scrubber
                 removes and those it misses (`--pool-seeds`: also pooled over seeds)
  f5:<N>         SecureFedNesterov with N = 3, 10, 30 smaller organizations (Fig. 5, non-IID: one
                 project each)

The rounds run Flower's own strategy loop (`Strategy.start`) over `LocalGrid` (umbra/federation/
local_grid.py): real Flower Messages, each organization answering with the ClientApp's reply, all in
this process, organizations one after another; the multi-process SuperLink/SuperNode path is
tests/federation/test_server_app.py's, and Flower's simulation engine (Ray; umbra/federation/
simulation.py) is checked to end where LocalGrid ends in tests/federation/test_simulation.py.

Per organization, as `umbra securegate train --global` does: its own secure adapter (scrubbed view)
and revealing adapter (raw view), each trained T·K epochs from the federation's Δw^0, fused with the
global adapter (eqs. 6-8, α on its scrubbed Q, β on its raw Q). Routes: right key = the fused
revealing adapter; wrong key and no key = the fused secure adapter (what `unlock()` gives them:
experiments/securegate.py measures that routing at 100 %, so one row stands for both here); other
organizations' keys = their fused revealing adapters; and the global adapter alone, which every
member holds. Utility: perplexity and top-1 of the global adapter and of each organization's local
secure adapter on its own held-out code and on the other organizations'."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.federation_cells import Bench, STRATEGIES  # noqa: E402
from experiments.federation_orgs import OrgSpec  # noqa: E402

RESULTS = ROOT / "experiments/results/federation.jsonl"  # committed: the tables' raw rows
WORK = ROOT / "runs/federation"  # caches and the --quick rows


def settings(args) -> dict:
    keys = ("rounds", "epochs", "rank", "lr", "block_len", "batch_size", "fim_rate", "dp_epsilon", "dp_delta",
            "dp_clip", "dp_batch", "scale_rounds", "fusion_iters", "exposure_sample", "samples", "context_tokens", "threads")
    return {"seed": args.seed, **{k: getattr(args, k) for k in keys}, "spec": asdict(args.spec),
            "scale_spec": asdict(args.scale_spec), "quick": args.quick}


def settings_key(s: dict) -> str:
    return hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest()[:12]


def done_cells(path: Path, key: str) -> set[str]:
    if not path.exists():
        return set()
    return {r["cell"] for r in map(json.loads, path.read_text().splitlines()) if r["key"] == key}


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a small run to check the script (own results file; "
                                                       "never written to the docs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=2, help="T, communication rounds of the 3-organization cells")
    p.add_argument("--epochs", type=int, default=1, help="K, local epochs per round")
    p.add_argument("--scale-rounds", type=int, default=1, help="T of the scaling cells")
    p.add_argument("--scales", type=int, nargs="+", default=[3, 10, 30])
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--block-len", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--fim-rate", type=float, default=0.5)
    p.add_argument("--dp-epsilon", type=float, default=8.0, help="ε of the f2:dp cell, per organization, "
                                                                 "for the whole federation")
    p.add_argument("--dp-delta", type=float, default=1e-5)
    p.add_argument("--dp-clip", type=float, default=1.0)
    p.add_argument("--dp-batch", type=int, default=4, help="expected files per DP step")
    p.add_argument("--fusion-iters", type=int, default=6, help="proximal-gradient iterations of eq. 7 at most")
    p.add_argument("--exposure-sample", type=int, default=50, help="same-format values a canary is ranked among")
    p.add_argument("--context-tokens", type=int, default=32, help="attack context before a canary, in tokens "
                                                                  "(experiments/securegate.py: 128)")
    p.add_argument("--samples", type=int, default=4, help="extraction samples per canary prefix")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--org-files", type=int, default=OrgSpec.files,
                   help="training files per organization of the 3-organization cells (larger: DP has data to work with)")
    p.add_argument("--org-heldout", type=int, default=OrgSpec.heldout,
                   help="held-out files per organization of the 3-organization cells (its utility's test code)")
    p.add_argument("--cells", nargs="+", help="run only these cells (default: all)")
    p.add_argument("--write", action="store_true", help="write the tables into docs/securegate.md")
    p.add_argument("--pool-seeds", type=int, nargs="+", default=[], help="also print Fig. 2, Table 1 and Fig. 5 pooled over these seeds' "
                                                                        "results (those with its three cells done)")
    args = p.parse_args()
    args.spec = OrgSpec(files=args.org_files, heldout=args.org_heldout)
    args.scale_spec = OrgSpec(files=16, query=2, heldout=1, max_chars=3000, per_group=1)
    if args.quick:
        args.spec = OrgSpec(files=16, query=2, heldout=1, max_chars=2500, per_group=1)
        args.scale_spec = replace(args.spec)
        args.rounds, args.scale_rounds, args.scales = 2, 1, [3, 4]
        args.fusion_iters, args.exposure_sample, args.samples = 2, 20, 1
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    s = settings(args)
    key = settings_key(s)
    results = WORK / "quick.jsonl" if args.quick else RESULTS
    cells = [f"t1:{n}" for n in STRATEGIES] + ["f2:raw", "f2:dp"] + [f"f5:{n}" for n in args.scales]
    todo = [c for c in cells if (not args.cells or c in args.cells) and c not in done_cells(results, key)]
    if todo:
        bench = Bench(args, WORK / f"cache-{key}")
        for cell in todo:
            t0 = time.perf_counter()
            print(f"[federation] {cell} ...", file=sys.stderr, flush=True)
            row = await bench.run(cell)
            row.update(cell=cell, key=key, settings=s, seconds=round(time.perf_counter() - t0, 1))
            results.parent.mkdir(parents=True, exist_ok=True)
            with results.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            print(f"[federation] {cell} done in {row['seconds'] / 60:.1f} min", file=sys.stderr, flush=True)
    from experiments.federation_report import report

    rows = [r for r in map(json.loads, results.read_text().splitlines()) if r["key"] == key] if results.exists() else []
    text = report(rows, s)
    if args.pool_seeds:
        from experiments.federation_report import pooled_fig2, pooled_tables

        every = [json.loads(ln) for ln in results.read_text().splitlines()] if results.exists() else []
        keys = {seed: settings_key(settings(argparse.Namespace(**{**vars(args), "seed": seed})))
                for seed in args.pool_seeds}
        by_seed = {seed: [r for r in every if r["key"] == k] for seed, k in keys.items()}
        text += "\n" + "\n".join(pooled_fig2(by_seed, s) + pooled_tables(by_seed))
    print(text)
    if args.write and not args.quick:
        from benchmarks.doc_markers import write_block

        write_block(ROOT / "docs/securegate.md", "federation-benchmark", text, append=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
