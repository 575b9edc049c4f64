"""Privacy-utility table: next-token top-1 and FIM line exact match of the defended model (INDVocab
at ε + LTokenizer π) before and after STuning, against NOIR's fClean (the same client blocks
tuned on the same data for the same steps WITHOUT INDVocab and LTokenizer) and the untuned base.

    python experiments/privacy_utility.py [--model DIR | --checkpoint runs/pretrain/last.pt]
        [--epsilons 1,4,13,27,256,1024,inf] [--steps 300] [--batch-size 4] [--context-length 256]
        [--lr 1e-3] [--train-docs 0] [--eval-tokens 20000] [--fim-lines 30] [--threads 1]
        [--work runs/privacy_utility] [--out docs/privacy/utility.md] [--label preliminary]

Incremental: every grid cell's figures are cached in WORK/<run key>/results.json as soon as the
cell is done (the key hashes the base weights and every parameter), and a cell's tuning run
checkpoints (umbra/tuning/checkpoint.py, public row order) so a killed run resumes mid-cell.
Evaluation is in each client's own id space (labels π(t); tuning/evaluate.py). The defended
clients are built in memory with the functions `umbra init` uses (INDVocab seeded per ε, a fresh
uniform π — utility is invariant to π); tuning runs through LocalMiddle, which tests/tuning
shows bit-identical to the cloud service. Writes the table between markers in --out."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.doc_markers import replace_block  # noqa: E402
from umbra.data.corpus import LANGS, corpus_file, read_documents, read_split  # noqa: E402
from umbra.evaluation.fim_lines import sample_cases  # noqa: E402
from umbra.middle.local import LocalMiddle  # noqa: E402
from umbra.model.loader import load_middle  # noqa: E402
from umbra.model.spec import load_spec  # noqa: E402
from umbra.privacy.indvocab import guess_bound  # noqa: E402
from umbra.privacy.manifest import sha256_file  # noqa: E402
from umbra.training.packing import eval_blocks, load_raw_tokenizer  # noqa: E402
from umbra.tuning import TuneConfig, TuneData, clean_client, defended_client, tune  # noqa: E402
from umbra.tuning.evaluate import fim_exact_match, next_token  # noqa: E402
from umbra.tuning.gradient_noise import DEFAULT_SIGMA, GradientNoise  # noqa: E402
from umbra.tuning.inversion_penalty import InversionPenalty, own_codebook  # noqa: E402



def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=Path("models/umbra-code-tiny"))
    p.add_argument("--checkpoint", type=Path, default=Path("runs/pretrain/last.pt"),
                   help="exported when --model has no weights")
    p.add_argument("--corpus-dir", type=Path, default=Path("data/corpus"))
    p.add_argument("--epsilons", default="1,4,13,27,256,1024,inf")
    p.add_argument("--noise-epsilons", default="",
                   help="also STune at these ε with the sent gradient clipped and noised (defence against (e))")
    p.add_argument("--gradient-noise", type=float, default=DEFAULT_SIGMA, help="σ of the noised-gradient rows (umbra tune's default)")
    p.add_argument("--gradient-clip", type=float, default=GradientNoise.clip_norm, help="C of the noised-gradient rows")
    p.add_argument("--penalty-epsilons", default="",
                   help="also STune at these ε with the inversion penalty (umbra/tuning/inversion_penalty.py)")
    p.add_argument("--inversion-penalty", type=float, default=10.0, help="λ of the inversion-penalty rows")
    p.add_argument("--h", type=float, default=0.25)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--context-length", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0, help="tuning data order, FIM draws and INDVocab seeds")
    p.add_argument("--train-docs", type=int, default=0, help="tune on a seeded sample of this many docs (0: all)")
    p.add_argument("--eval-split", default="test")
    p.add_argument("--eval-tokens", type=int, default=20_000, help="next-token tokens per language")
    p.add_argument("--fim-lines", type=int, default=30, help="FIM cases per language")
    p.add_argument("--fim-max-tokens", type=int, default=48)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--work", type=Path, default=Path("runs/privacy_utility"))
    p.add_argument("--out", type=Path, default=Path("docs/privacy/utility.md"))
    p.add_argument("--label", default="preliminary", help="printed in the heading of the table")
    return p.parse_args(argv)


def resolve_base(args) -> tuple[Path, str]:
    """(model dir, description); exports the pretraining checkpoint when the model has no weights."""
    if (args.model / "model.safetensors").is_file():
        return args.model, f"{args.model}"
    from umbra.training.checkpoint import load_checkpoint
    from umbra.training.export import export_checkpoint

    step = load_checkpoint(args.checkpoint)["state"]["step"]
    out = args.work / f"base-step{step}"
    if not (out / "model.safetensors").is_file():
        export_checkpoint(args.checkpoint, out, args.model)
    return out, f"`umbra train export` of {args.checkpoint} at pretraining step {step}"


def run_key(base: Path, args) -> str:
    params = {k: str(v) for k, v in sorted(vars(args).items()) if k not in ("work", "out", "label", "threads",
                                                                          "model", "checkpoint", "epsilons",
                                                                          "noise_epsilons", "penalty_epsilons")}
    params["base"] = sha256_file(base / "model.safetensors")
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]


class Results:
    def __init__(self, path: Path):
        self.path = path
        self.cells: dict = json.loads(path.read_text())["cells"] if path.is_file() else {}

    def put(self, name: str, value: dict) -> None:
        self.cells[name] = value
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"cells": self.cells}, indent=1))
        os.replace(tmp, self.path)


class Bench:
    def __init__(self, args, base: Path, work: Path):
        self.args, self.base, self.work = args, base, work
        self.middle_blocks = load_middle(base)
        self.spec = load_spec(base)
        self.config = TuneConfig(steps=args.steps, batch_size=args.batch_size, context_length=args.context_length,
                                 lr=args.lr, warmup_steps=args.warmup_steps, seed=args.seed, checkpoint_every=25)
        tok = load_raw_tokenizer(base)
        docs = read_split(args.corpus_dir, "train")
        if args.train_docs:
            pick = np.random.default_rng(args.seed).choice(len(docs), min(args.train_docs, len(docs)), replace=False)
            docs = [docs[i] for i in sorted(pick)]
        self.data = TuneData(docs, tok, self.config, work / "data", self.spec.vocab_size)
        self.evals = {}
        for lang in LANGS:
            if corpus_file(args.corpus_dir, args.eval_split, lang).exists():
                test = list(read_documents(args.corpus_dir, args.eval_split, lang))
                blocks = eval_blocks(test, tok, min(512, self.spec.max_position_embeddings), args.eval_tokens)
                self.evals[lang] = (blocks, sample_cases(test, args.fim_lines, args.seed))

    def evaluate(self, client) -> dict:
        per, correct, tokens, exact, cases = {}, 0.0, 0, 0, 0
        for lang, (blocks, fim_cases) in self.evals.items():
            nt = next_token(client, self.middle_blocks, blocks)
            fim = asyncio.run(fim_exact_match(client, self.base, fim_cases, self.args.fim_max_tokens,
                                              self.middle_blocks))
            per[lang] = {"tokens": nt.tokens, "top1": nt.top1, "loss": nt.loss, "fim_cases": fim.cases,
                         "fim_exact": fim.exact}
            correct, tokens = correct + nt.top1 * nt.tokens, tokens + nt.tokens
            exact, cases = exact + fim.exact, cases + fim.cases
        loss = sum(v["loss"] * v["tokens"] for v in per.values()) / max(tokens, 1)
        return {"top1": correct / max(tokens, 1), "perplexity": math.exp(loss), "fim_em": exact / max(cases, 1),
                "fim_cases": cases, "tokens": tokens, "languages": per}

    def tune(self, client, cell: str, noised: bool = False, penalized: bool = False) -> dict:
        config, codebook = self.config, None
        if noised:
            config = replace(config, gradient_noise=GradientNoise(self.args.gradient_noise, self.args.gradient_clip))
        if penalized:
            config = replace(config, inversion_penalty=InversionPenalty(weight=self.args.inversion_penalty))
            codebook = own_codebook(self.base, self.data, config.inversion_penalty)
        out = self.work / "ckpt" / cell
        resume = (out / "tune.pt").is_file()
        t0 = time.perf_counter()

        def progress(r):
            if r.step % 25 == 0:
                print(f"  {cell}: step {r.step}/{config.steps} loss {r.loss:.3f} {r.seconds:.2f} s/step",
                      file=sys.stderr, flush=True)

        middle = LocalMiddle(self.middle_blocks)
        result = asyncio.run(tune(client, middle, self.data, config, out_dir=out, resume=resume,
                                  on_step=progress, noise_seed=self.args.seed if noised else None,
                                  codebook=codebook))
        losses = [float(r["loss"]) for r in _csv(out / "tune_log.csv")]
        return {"steps": result.state.step, "tokens": result.state.tokens_seen, "tune_seconds": result.state.elapsed_s,
                "wall_seconds_this_run": time.perf_counter() - t0,
                "final_loss": float(np.mean(losses[-10:])), "first_loss": float(np.mean(losses[:10]))}


def _csv(path: Path) -> list[dict]:
    import csv

    with path.open() as fh:
        return list(csv.DictReader(fh))


def _eps_name(e: float) -> str:
    return "inf" if math.isinf(e) else f"{e:g}"


def run(args) -> None:
    torch.set_num_threads(args.threads)
    epsilons = [float(x) for x in args.epsilons.split(",")]
    base, base_desc = resolve_base(args)
    key = run_key(base, args)
    work = args.work / key
    work.mkdir(parents=True, exist_ok=True)
    (work / "params.json").write_text(json.dumps({k: str(v) for k, v in vars(args).items()} | {"base": str(base)},
                                                 indent=1))
    results = Results(work / "results.json")
    bench = Bench(args, base, work)
    print(f"run {key}: base {base_desc}; results in {work}", file=sys.stderr)
    if "base" not in results.cells:
        results.put("base", bench.evaluate(clean_client(base)))
    if "fclean" not in results.cells:
        client = clean_client(base)
        tuning = bench.tune(client, "fclean")
        results.put("fclean", bench.evaluate(client) | {"tuning": tuning})
        shutil.rmtree(work / "ckpt" / "fclean")  # only once the cell's figures are saved
    for i, eps in enumerate(epsilons):
        name = f"noir-{_eps_name(eps)}"
        if name in results.cells:
            continue
        print(f"ε = {_eps_name(eps)}", file=sys.stderr, flush=True)
        client = defended_client(base, eps, args.h, seed=f"utility-{args.seed}-{_eps_name(eps)}")
        if f"{name}-untuned" not in results.cells:
            results.put(f"{name}-untuned", bench.evaluate(client))
        tuning = bench.tune(client, name)
        results.put(name, bench.evaluate(client) | {"tuning": tuning})
        shutil.rmtree(work / "ckpt" / name)
    noise_epsilons = [float(x) for x in args.noise_epsilons.split(",") if x.strip()]
    penalty_epsilons = [float(x) for x in args.penalty_epsilons.split(",") if x.strip()]
    for variant, eps_list, what in (("noised", noise_epsilons, "noised gradient"),
                                    ("penalty", penalty_epsilons, "inversion penalty")):
        for eps in eps_list:  # the plain cell's table (same seed), tuned with the variant's defence
            name = f"noir-{_eps_name(eps)}-{variant}"
            if name in results.cells:
                continue
            print(f"ε = {_eps_name(eps)}, {what}", file=sys.stderr, flush=True)
            client = defended_client(base, eps, args.h, seed=f"utility-{args.seed}-{_eps_name(eps)}")
            tuning = bench.tune(client, name, noised=variant == "noised", penalized=variant == "penalty")
            results.put(name, bench.evaluate(client) | {"tuning": tuning})
            shutil.rmtree(work / "ckpt" / name)
    write_markdown(args, base_desc, key, epsilons, results.cells, bench, noise_epsilons, penalty_epsilons)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def write_markdown(args, base_desc: str, key: str, epsilons, cells: dict, bench: Bench,
                   noise_epsilons=(), penalty_epsilons=()) -> None:
    v, d = bench.spec.vocab_size, bench.spec.hidden_size
    cmd = "python experiments/privacy_utility.py " + " ".join(sys.argv[1:])
    lines = [f"### Results ({args.label}; run `{key}`)", "",
             f"Command: `{cmd.strip()}`", "",
             f"Base: {base_desc} (|V| = {v}, d = {d}). STuning / fClean: {args.steps} steps × {args.batch_size} "
             f"blocks × {args.context_length} tokens, lr {args.lr:g} (warmup {args.warmup_steps}, cosine), "
             f"seed {args.seed}, train docs {'all' if not args.train_docs else args.train_docs}. "
             f"Eval: {args.eval_split} split, {args.eval_tokens:,} next-token tokens and {args.fim_lines} FIM lines "
             f"per language ({', '.join(bench.evals)}); greedy, ≤ {args.fim_max_tokens} tokens. "
             f"INDVocab h = {args.h}, ε_i = ε/{d}."
             + (f" Noised-gradient rows: the same STuning with each sequence's sent gradient clipped to "
                f"C = {args.gradient_clip:g} and N(0, (σC)²) added, σ = {args.gradient_noise:g}." if noise_epsilons else ""),
             "",
             "| model | ε | ε_i = ε/d | guess bound | next-token top-1 | perplexity | FIM line EM | tuning loss (first → last 10 steps) |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]

    def row(label, eps, cell):
        if cell is None:
            return
        e = "—" if eps is None else _eps_name(eps)
        ei = "—" if eps is None else ("∞" if math.isinf(eps) else f"{eps / d:.3g}")
        gb = "—" if eps is None else f"{guess_bound(eps, v):.3g}"
        t = cell.get("tuning")
        loss = f"{t['first_loss']:.2f} → {t['final_loss']:.2f}" if t else "—"
        lines.append(f"| {label} | {e} | {ei} | {gb} | {_pct(cell['top1'])} | {cell['perplexity']:.1f} "
                     f"| {_pct(cell['fim_em'])} | {loss} |")

    row("base, untuned", None, cells.get("base"))
    row("fClean (tuned, no INDVocab / LTokenizer)", None, cells.get("fclean"))
    for eps in sorted(set(epsilons) | set(noise_epsilons) | set(penalty_epsilons)):
        row("NOIR untuned", eps, cells.get(f"noir-{_eps_name(eps)}-untuned"))
        row("**NOIR + STuning**", eps, cells.get(f"noir-{_eps_name(eps)}"))
        if eps in noise_epsilons:
            row(f"NOIR + STuning, noised gradient (σ = {args.gradient_noise:g})", eps,
                cells.get(f"noir-{_eps_name(eps)}-noised"))
        if eps in penalty_epsilons:
            row(f"NOIR + STuning, inversion penalty (λ = {args.inversion_penalty:g})", eps,
                cells.get(f"noir-{_eps_name(eps)}-penalty"))
    text = args.out.read_text() if args.out.is_file() else ""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(replace_block(text, "utility-table", "\n".join(lines), append=True))
    print("\n".join(lines))


if __name__ == "__main__":
    run(parse_args())
