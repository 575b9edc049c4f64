"""The access gate's false accepts (umbra/securegate/gate.py): the MLP alone, with mining Gaussian
hard negatives, and with mining and anchors (a revealing route needs the state on one of its keys'
states), over many key sets: how many training rounds the check needs, how often a key set would
exhaust the default 6 rounds (`umbra keys access create` failing) or never pass (20 rounds), the
share of fresh random keys sent to a revealing class, and the training time.

    python experiments/gate_false_accepts.py [--key-sets 16] [--keys 2] [--models tiny default] [--write]

Models: `tiny` is the tests' random Llama (64-dim states, tests/tiny_models.py), `default` the
embedded default model (256-dim). Key set i of model m: `--keys` secrets and the bundle id from
sha256(seed, m, i); every variant trains on the same sets with `max_rounds` 20, so a set that needs
more than 6 is counted rather than lost (one that fails all 20 is counted as failing). False
accepts: `--probe` fresh random keys (numpy seed 99), routed by the trained gate. One torch thread."""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from umbra.engine import ClientModel  # noqa: E402
from umbra.securegate.errors import GateError  # noqa: E402
from umbra.securegate.gate import GateConfig, KeyEncoder, train_gate  # noqa: E402

VARIANTS = {"check only": dict(mine_passes=0, anchor_cos=0.0), "check + mining": dict(anchor_cos=0.0),
            "check + mining + anchors (default)": {}}
MAX_ROUNDS = 20
DEFAULT_ROUNDS = GateConfig().max_rounds


def encoder(model: str, work: Path):
    if model == "tiny":
        from tiny_models import build_tiny_model_dir

        build_tiny_model_dir(work / "tiny", family="llama", style="starcoder")
        return ClientModel.load(work / "tiny").encoder
    from umbra.paths import default_model_dir

    return ClientModel.load(default_model_dir()).encoder


def cell(enc, model: str, i: int, keys: int, variant: str, probe: int, seed: int) -> dict:
    h = lambda label: hashlib.sha256(f"{seed}:{model}:{i}:{label}".encode()).digest()  # noqa: E731
    ke = KeyEncoder(enc, h("bundle").hex()[:32])
    t0 = time.perf_counter()
    row = {"model": model, "set": i, "keys": keys, "variant": variant, "probe": probe}
    try:
        gate, report = train_gate(ke, {"team": [h(f"key{k}") for k in range(keys)]},
                                  GateConfig(max_rounds=MAX_ROUNDS, **VARIANTS[variant]))
    except GateError:  # no check passed in MAX_ROUNDS rounds: `keys access create` fails on this set
        return {**row, "rounds": None, "failed": True, "seconds": round(time.perf_counter() - t0, 2)}
    seconds = time.perf_counter() - t0
    rng = np.random.default_rng(99)
    routed = gate.route(ke.key_states([rng.bytes(32) for _ in range(probe)]))
    return {**row, "rounds": report.rounds, "mined": report.mined, "seconds": round(seconds, 2),
            "false_accepts": int((routed != 0).sum())}


def table(rows: list[dict]) -> str:
    out = [f"| model | keys | variant | key sets | rounds: mean / max | sets needing > 6 rounds | never passing "
           f"({MAX_ROUNDS}) | false accepts per 100 000 random keys: mean / max | training s, mean |",
           "|---|---:|---|---:|---|---:|---:|---|---:|"]
    groups = {}
    for r in rows:
        groups.setdefault((r["model"], r["keys"], r["variant"]), []).append(r)
    for (model, keys, variant), rs in groups.items():
        ok = [r for r in rs if not r.get("failed")]
        per = [r["false_accepts"] * 100_000 / r["probe"] for r in ok]
        rounds = [r["rounds"] for r in ok]
        failed = len(rs) - len(ok)
        out.append(f"| {model} | {keys} | {variant} | {len(rs)} | "
                   + (f"{statistics.mean(rounds):.1f} / {max(rounds)}" if ok else "–") + " | "
                   f"{sum(x > DEFAULT_ROUNDS for x in rounds) + failed} | {failed} | "
                   + (f"{statistics.mean(per):.1f} / {max(per):.0f}" if ok else "–")
                   + f" | {statistics.mean(r['seconds'] for r in rs):.1f} |")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--key-sets", type=int, default=16)
    p.add_argument("--keys", type=int, nargs="+", default=[2])
    p.add_argument("--models", nargs="+", choices=("tiny", "default"), default=["tiny", "default"])
    p.add_argument("--probe", type=int, default=100_000, help="fresh random keys routed by each trained gate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results", type=Path, default=ROOT / "experiments/results/gate_false_accepts.jsonl")
    p.add_argument("--write", action="store_true", help="write the table into docs/securegate.md")
    args = p.parse_args()
    torch.set_num_threads(1)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    done = [json.loads(line) for line in args.results.read_text().splitlines()] if args.results.exists() else []
    have = {(r["model"], r["set"], r["keys"], r["variant"]) for r in done if r.get("seed") == args.seed}
    with tempfile.TemporaryDirectory() as work:
        for model in args.models:
            enc = encoder(model, Path(work))
            for keys in args.keys:
                for i in range(args.key_sets):
                    for variant in VARIANTS:
                        if (model, i, keys, variant) in have:
                            continue
                        row = {**cell(enc, model, i, keys, variant, args.probe, args.seed), "seed": args.seed}
                        done.append(row)
                        with args.results.open("a") as f:
                            f.write(json.dumps(row) + "\n")
                        print(json.dumps(row), flush=True)
    rows = [r for r in done if r.get("seed") == args.seed and r["model"] in args.models and r["keys"] in args.keys
            and r["set"] < args.key_sets]
    text = (f"Command: `python experiments/gate_false_accepts.py --key-sets {args.key_sets} --keys "
            f"{' '.join(map(str, args.keys))} --models {' '.join(args.models)}` (seed {args.seed}, "
            f"{args.probe:,} probe keys per gate, 1 torch thread, on the shared 2-core machine).\n\n" + table(rows))
    print(text)
    if args.write:
        from benchmarks.doc_markers import write_block

        write_block(ROOT / "docs/securegate.md", "gate-false-accepts", text, append=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
