"""The privacy-utility frontier (docs/privacy/frontier.md): every private-mode variant against the
controls, utility and attacks measured on the same tuned client, at several seeds.

    python experiments/private_mode.py --variants base,fclean,client_alone,noir+stuning+noise \
        --epsilons 1024 --seeds 0 1 2                     # tune + measure what is missing
    python experiments/private_mode.py --write             # tables, plot, umbra/privacy/measured.json

Resumable: a cell's tuning checkpoints every 250 steps in WORK/tuning/ (the shadow client's beside
it), its tuned client is kept in WORK/tuned/ and each (cell, measurement) result is a
line of RESULTS (experiments/results/private_mode.jsonl, committed: the tables' raw rows outlive the
machine) under the run key (model fingerprint + FrontierParams); a rerun skips what is there. Cells
are tuned on the corpus train split; prompts and utility come from the test split
(umbra/attack_grid/frontier.py). --threads 1 by default (the machine is shared)."""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from umbra.attack_grid.frontier import VARIANTS, CellData, FrontierParams, cells, tuned_cell  # noqa: E402
from umbra.attack_grid import measures  # noqa: E402
from umbra.attacks.probe import ProbeConfig, training_device  # noqa: E402
from umbra.model.device import resolve_device  # noqa: E402
from umbra.model.parts import SplitPlan  # noqa: E402
from umbra.attacks.public import CorpusSample, PublicModel  # noqa: E402
from umbra.attacks.suite import ATTACKS, AttackSuite, SuiteConfig  # noqa: E402
from umbra.data.corpus import LANGS, corpus_file, read_documents  # noqa: E402
from umbra.training.packing import eval_blocks, load_raw_tokenizer  # noqa: E402
from umbra.tuning import TuneData  # noqa: E402

MEASURES = ("utility", "attacks", "shadow", "oracle", "decipher")
PROMPT_SEED = 1  # the test-split prompts are the same for every cell (the seed varies the client)


def _args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=Path("models/umbra-code-tiny"))
    p.add_argument("--split", type=split_plan, default=None, metavar="E,D",
                   help="the client's encoder and decoder blocks (default: the model's default split); "
                        "part of the run key, so each split's rows and tuned clients stay apart")
    p.add_argument("--corpus", type=Path, default=Path("data/corpus"))
    p.add_argument("--work", type=Path, default=Path("runs/private_mode"))
    p.add_argument("--results", type=Path, default=Path("experiments/results/private_mode.jsonl"),
                   help="the measured rows (committed; tuned clients stay under --work)")
    p.add_argument("--variants", default="base,fclean,client_alone,noir,noir+stuning+noise",
                   help=f"comma-separated, from: {', '.join(VARIANTS)}")
    p.add_argument("--epsilons", default="1024", help="INDVocab ε of the NOIR variants")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--measures", default=",".join(MEASURES))
    p.add_argument("--tune-steps", type=int, default=FrontierParams.tune_steps)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="auto",
                   help="where STuning runs (the cell's and the shadow's): auto (a CUDA accelerator when there is "
                        "one), cpu, cuda, cuda:N; the measures run on the CPU, probes on the accelerator if any")
    p.add_argument("--write", action="store_true", help="write docs/privacy/frontier.md and measured.json, run nothing")
    p.add_argument("--doc", type=Path, default=Path("docs/privacy/frontier.md"))
    return p.parse_args(argv)


class Results:
    """The results file: one line per (run, cell, measure); re-read on every lookup."""

    def __init__(self, path: Path, run: str):
        self.path, self.run = path, run

    def rows(self) -> list[dict]:
        if not self.path.is_file():
            return []
        return [r for r in map(json.loads, self.path.read_text().splitlines()) if r["run"] == self.run]

    def has(self, cell: str, measure: str) -> bool:
        return any(r["cell"] == cell and r["measure"] == measure for r in self.rows())

    def adopt_from_another_seed(self, cell, todo: list[str]) -> list[str]:
        """For a seed-invariant cell (the base model): add, as this seed's, the rows of `todo`
        measured (not themselves copied) at another seed, marked `same_as`; the measures left."""
        if not cell.variant.seed_invariant:
            return todo
        eps, left = _eps(cell.epsilon), []
        for measure in todo:
            twin = next((r for r in self.rows() if r["variant"] == cell.variant.name and r["epsilon"] == eps
                         and r["seed"] != cell.seed and r["measure"] == measure and "same_as" not in r), None)
            if twin is None:
                left.append(measure)
            else:
                self.add({**{k: v for k, v in twin.items() if k != "run"}, "cell": cell.key, "seed": cell.seed,
                          "same_as": twin["cell"]})
        return left

    def add(self, row: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as fh:
            fh.write(json.dumps({"run": self.run, **row}) + "\n")


def run_key(public: PublicModel, params: FrontierParams) -> str:
    return hashlib.sha256(f"{public.fingerprint}|{json.dumps(params.key(), sort_keys=True)}".encode()).hexdigest()[:12]


class Bench:
    def __init__(self, args, params: FrontierParams):
        self.args, self.params = args, params
        self.device = resolve_device(args.device)
        self.public = PublicModel(args.model, getattr(args, "split", None))
        self.work = args.work / run_key(self.public, params)
        self.results = Results(args.results, run_key(self.public, params))
        self._data = CellData(args.corpus, self.public.dir, self.work / "tune-data", self.public.vocab_size)
        self._suite = self._prompts = self._evals = self._held = self._volume = None

    def data(self, cell) -> TuneData:
        return self._data(cell, self.params)

    @property
    def public_code(self) -> CorpusSample:
        """The attacker's public code: the train split (probes, codebooks, the shadow's tuning)."""
        return CorpusSample(self.args.corpus, "train", block_length=self.params.prompt_length,
                            blocks=self.params.public_blocks, seed=0)

    @property
    def held_out(self):
        """The oracle's held-out files: the valid split (never the test split the prompts come from)."""
        if self._held is None:
            self._held = self.public.sample_blocks(CorpusSample(self.args.corpus, "valid", block_length=self.params.prompt_length,
                                                                blocks=self.params.public_blocks, seed=PROMPT_SEED))
        return self._held

    @property
    def volume(self):
        """The client's own code for 1×, 10×, 100× the prompts' traffic: test then valid blocks."""
        if self._volume is None:
            n = self.params.prompt_blocks * max(measures.VOLUMES)
            parts = [self.public.sample_blocks(CorpusSample(self.args.corpus, split, block_length=self.params.prompt_length,
                                                            blocks=n, seed=PROMPT_SEED, per_document=10_000))
                     for split in ("test", "valid")]
            self._volume = np.concatenate(parts)[:n]
        return self._volume

    @property
    def suite(self) -> AttackSuite:
        if self._suite is None:
            config = SuiteConfig(corpus=self.public_code, attacks=ATTACKS, probe=ProbeConfig(seed=0))
            self._suite = AttackSuite.build(self.public, config, self.args.work / "probes")
        return self._suite

    @property
    def prompts(self):
        if self._prompts is None:
            sample = CorpusSample(self.args.corpus, "test", block_length=self.params.prompt_length,
                                  blocks=self.params.prompt_blocks, seed=PROMPT_SEED, per_document=1)
            self._prompts = self.public.sample_blocks(sample)
        return self._prompts

    @property
    def evals(self) -> dict:
        if self._evals is None:
            tok, self._evals = load_raw_tokenizer(self.public.dir), {}
            for lang in LANGS:
                if corpus_file(self.args.corpus, "test", lang).exists():
                    docs = list(read_documents(self.args.corpus, "test", lang))
                    self._evals[lang] = eval_blocks(docs, tok, self.params.context_length, self.params.eval_tokens)
        return self._evals

    def run(self, cell, wanted: list[str]) -> None:
        todo = self.results.adopt_from_another_seed(cell, [m for m in wanted if not self.results.has(cell.key, m)])
        if not todo:
            return
        t0 = time.perf_counter()
        if not (self.work / "tuned" / f"{cell.key}.pt").is_file():  # a new client: no earlier one's oracle layers
            shutil.rmtree(self.work / "oracle" / cell.key, ignore_errors=True)
        tuned = tuned_cell(self.public, cell, self.params, self.data(cell), self.work, self.device)
        print(f"{cell.key}: tuned ({tuned.seconds:.0f} s of tuning)", flush=True)
        for measure in todo:
            t1 = time.perf_counter()
            if measure == "utility":
                value = measures.utility(self.public, tuned, self.evals)
            elif measure == "attacks":
                value = measures.attacks(self.public, self.suite, tuned, self.prompts)
            elif measure == "shadow":
                value = measures.shadow(self.public, self.suite, tuned, self.prompts, self.params, self.public_code,
                                        self.args.work / "shadows", self.device)
            elif measure == "oracle":
                value = measures.oracle(self.public, self.suite, tuned, self.prompts, self.held_out,
                                        self.work / "oracle" / cell.key)
            else:
                value = measures.decipher(self.public, self.suite, tuned, self.volume)
            self.results.add({"cell": cell.key, "variant": cell.variant.name, "epsilon": _eps(cell.epsilon),
                              "seed": cell.seed, "measure": measure, "value": value,
                              "tune_seconds": tuned.seconds, "seconds": round(time.perf_counter() - t1, 1),
                              "probes_on": training_device().type,
                              **({} if tuned.tuned_on == "cpu" else {"tuned_on": tuned.tuned_on}),
                              **({} if tuned.data_seed is None else {"data_seed": tuned.data_seed})})
            print(f"{cell.key}: {measure} done in {time.perf_counter() - t1:.0f} s", flush=True)
        print(f"{cell.key}: {time.perf_counter() - t0:.0f} s", flush=True)


def split_plan(text: str) -> SplitPlan:
    """"E,D" -> SplitPlan (argparse type: a malformed value is a usage error)."""
    try:
        e, d = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--split takes E,D (two integers), got {text!r}") from None
    return SplitPlan(e, d)


def _eps(e):
    return None if e is None else ("inf" if e == float("inf") else e)


def _floats(text: str) -> list[float]:
    return [float("inf") if x.strip() in ("inf", "∞") else float(x) for x in text.split(",") if x.strip()]


def main(argv=None) -> int:
    args = _args(argv)
    torch.set_num_threads(args.threads)
    params = replace(FrontierParams(), tune_steps=args.tune_steps)
    bench = Bench(args, params)
    if args.write:
        from experiments.private_mode_report import write_report

        write_report(bench.results.rows(), params, args.doc)
        return 0
    wanted = [m.strip() for m in args.measures.split(",") if m.strip()]
    unknown = set(wanted) - set(MEASURES)
    if unknown:
        raise SystemExit(f"unknown measures {sorted(unknown)} (known: {', '.join(MEASURES)})")
    for cell in cells([v.strip() for v in args.variants.split(",") if v.strip()], _floats(args.epsilons), args.seeds):
        bench.run(cell, wanted)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
