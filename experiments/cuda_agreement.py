"""Does a run on an accelerator compute what the same run computes on the CPU? (~2 min on a GPU machine)

    python experiments/cuda_agreement.py --corpus-dir data/corpus/private            # cuda against cpu
    python experiments/cuda_agreement.py --corpus-dir data/corpus/private --device cpu  # the check itself

1. NOESIS (`experiments/noesis.py --quick`, Table 2's prompt-only, NOESIS, monolithic and common-LoRA
   rows: both stages, DP-SGD, evaluation) once on DEVICE and once on the CPU: per-language accuracies.
2. Two frontier cells (the clean residual with keyed noise, and the default bundle with the in-loop
   adversary), STuning for a few steps on DEVICE and on the CPU: the tuned encoders' weights.
The CSPRNG's draws are made on the CPU in both runs, so only the kernels differ: accuracies must agree
within TOL_POINTS and weights within TOL_WEIGHT. Exit status 0 only when every comparison agrees;
--json writes the figures. Timings printed are wall clock on whatever else the machine is running."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from umbra.model.device import resolve_device  # noqa: E402

NOESIS_ROWS = ("prompt_only_dp", "noesis", "monolithic_dp", "common_lora_dp")
FRONTIER_VARIANTS = ("noir+clean+noise1", "noir+stuning+noise+adversary")
TOL_POINTS = 0.5    # accuracy, percentage points (one flipped argmax in --quick's test set moves less)
TOL_WEIGHT = 1e-3   # largest absolute difference in any tuned encoder weight


def noesis_quick(corpus: Path, device: str, out: Path) -> tuple[dict, float]:
    """{row: {lang: accuracy}} of the --quick rows trained and evaluated on `device`, and seconds."""
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "experiments/noesis.py", "--quick", "--table", "2", "--seeds", "0",
                          "--rows", *NOESIS_ROWS, "--device", device, "--out", str(out), "--corpus-dir", str(corpus)],
                         cwd=ROOT, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"noesis --quick on {device} failed:\n{run.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "quick.jsonl").read_text().splitlines()]
    for r in rows:
        if r.get("device", "cpu") != device.split(":")[0]:
            raise RuntimeError(f"row {r['row']} says it ran on {r.get('device', 'cpu')}, not {device}")
    return {r["row"]: r["accuracy"] for r in rows}, time.perf_counter() - t0


def frontier_weights(corpus: Path, variant: str, device: torch.device, work: Path, steps: int):
    """The encoder state and losses of `variant` tuned `steps` steps on `device`, and seconds."""
    from umbra.attack_grid.frontier import VARIANTS, Cell, FrontierParams, tune_config, tuned_cell
    from umbra.attacks.public import PublicModel
    from umbra.tuning import TuneData
    params = replace(FrontierParams(), tune_steps=steps)
    public = PublicModel(ROOT / "models" / "umbra-code-tiny")
    cell = Cell(VARIANTS[variant], 1024.0, 0)
    data = TuneData.from_corpus(corpus, public.dir, tune_config(cell, params), split="train", langs=("python",),
                                vocab_size=public.vocab_size)
    t0 = time.perf_counter()
    tuned = tuned_cell(public, cell, params, data, work, device)
    if tuned.tuned_on != device.type:
        raise RuntimeError(f"{variant} says it was tuned on {tuned.tuned_on}, not {device.type}")
    return tuned.client.encoder.state_dict(), tuned.losses, time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus-dir", type=Path, required=True, help="the private corpus (umbra data private)")
    p.add_argument("--device", default="cuda", help="the device compared with the CPU (cpu: check this script)")
    p.add_argument("--steps", type=int, default=5, help="STuning steps per frontier cell")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    a = p.parse_args()
    device = resolve_device(a.device)
    print(f"torch {torch.__version__}; comparing {device} with cpu", flush=True)
    report: dict = {"torch": torch.__version__, "device": str(device), "noesis": {}, "frontier": {}}
    ok = True
    with tempfile.TemporaryDirectory(prefix="cuda-agreement-") as tmp:
        work = Path(tmp)
        (dev_rows, dev_s), (cpu_rows, cpu_s) = (noesis_quick(a.corpus_dir, d, work / f"noesis-{i}")
                                                for i, d in enumerate((str(device), "cpu")))
        print(f"noesis --quick: {device} {dev_s:.0f} s, cpu {cpu_s:.0f} s")
        for row in NOESIS_ROWS:
            diff = max(abs(dev_rows[row][k] - cpu_rows[row][k]) for k in cpu_rows[row])
            ok &= diff <= TOL_POINTS
            report["noesis"][row] = {"cpu": cpu_rows[row], str(device): dev_rows[row], "largest_difference": diff}
            print(f"  {row:16} largest accuracy difference {diff:.4f} points  (cpu {cpu_rows[row]})")
        for variant in FRONTIER_VARIANTS:
            (a_w, a_l, a_s), (b_w, b_l, b_s) = (frontier_weights(a.corpus_dir, variant, d, work / f"{variant}-{i}",
                                                                 a.steps)
                                                for i, d in enumerate((device, torch.device("cpu"))))
            worst = max((a_w[k].cpu() - b_w[k]).abs().max().item() for k in b_w)
            ok &= worst <= TOL_WEIGHT
            report["frontier"][variant] = {"largest_weight_difference": worst, "losses_cpu": b_l,
                                           f"losses_{device}": a_l, "seconds_cpu": b_s, f"seconds_{device}": a_s}
            print(f"  {variant}: {device} {a_s:.1f} s, cpu {b_s:.1f} s; largest encoder weight difference {worst:.2e}")
    report["agrees"] = ok
    if a.json:
        a.json.write_text(json.dumps(report, indent=1) + "\n")
    print("AGREES" if ok else "DISAGREES", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
