"""The privacy attack grid: a simulated honest-but-curious cloud attacks a client under each
defence configuration and ε, and the tables go into docs/privacy/attacks.md.

    python experiments/privacy_attacks.py --checkpoint runs/pretrain/last.pt      # export, then run
    python experiments/privacy_attacks.py --model models/umbra-code-tiny          # a finished model
    python experiments/privacy_attacks.py ... --configs none,both --epsilons 13,inf  # part of the grid

The table shows every cell cached for the run's parameters, so runs with different --configs /
--epsilons (e.g. the extra defences at a few ε only) add up to one table.

Resumable: every finished cell is stored in <work-dir>/cache.json under a key of (model
weights, attack settings, grid parameters); a rerun with the same parameters skips those cells
and only computes the missing ones. The tables are regenerated from the cache each time and
written between the GENERATED markers of --out (the rest of the file is kept)."""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from umbra.attack_grid.grid import (  # noqa: E402
    CONFIGS, GridCache, GridParams, cell_key, cells, run_cell, run_key, table_rows, tune_config,
)
from umbra.attacks.metrics import GistThresholds  # noqa: E402
from umbra.attacks.probe import ProbeConfig  # noqa: E402
from umbra.attacks.public import CorpusSample, PublicModel  # noqa: E402
from umbra.attacks.suite import (  # noqa: E402
    ATTACKS, NOISE_AWARE, REPORTED, YARDSTICKS, AttackSuite, SuiteConfig,
)
from umbra.errors import ConfigError  # noqa: E402
from umbra.tuning import TuneData  # noqa: E402

BEGIN, END = "<!-- BEGIN GENERATED: experiments/privacy_attacks.py -->", "<!-- END GENERATED -->"
ATTACK_TITLES = {"baseline": "frequency-only baseline", "sampler": "frequency sampler",
                 "nearest": "(a) nearest neighbour", "probe": "(b) probe",
                 "probe_aware": "(b′) noise-aware probe",
                 "frequency": "(c) frequency analysis", "reconstruction": "(d) code reconstruction",
                 "gradient": "(e) gradient labels", "frequency_ceiling": "(c) ceiling: perfect clusters†"}


def _floats(text: str) -> list[float]:
    return [math.inf if x.strip() in ("inf", "∞") else float(x) for x in text.split(",") if x.strip()]


def _args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", type=Path, help="exported Hugging Face model directory (the public model)")
    src.add_argument("--checkpoint", type=Path, help="training checkpoint to export first (umbra train export)")
    p.add_argument("--tokenizer", type=Path, default=Path("models/umbra-code-tiny"), help="tokenizer for --checkpoint")
    p.add_argument("--corpus", type=Path, default=Path("data/corpus"))
    p.add_argument("--work-dir", type=Path, default=Path("runs/privacy_attacks"), help="cache, probe, export")
    p.add_argument("--out", type=Path, default=Path("docs/privacy/attacks.md"))
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--epsilons", default="1,4,13,27,256,1024,4096,16384,inf")
    p.add_argument("--eval-blocks", type=int, default=GridParams.eval_blocks, help="client prompts (test split)")
    p.add_argument("--gradient-steps", type=int, default=GridParams.gradient_steps,
                   help="tuning steps whose gradients the cloud attacks (e)")
    p.add_argument("--tune-steps", type=int, default=GridParams.tune_steps, help="STuning rows: steps before attacking")
    p.add_argument("--batch-size", type=int, default=GridParams.batch_size, help="tuning batch (blocks)")
    p.add_argument("--tune-lr", type=float, default=GridParams.tune_lr)
    p.add_argument("--gradient-noise", type=float, default=GridParams.gradient_noise,
                   help="'+noise' rows: σ of the noise on the sent gradient")
    p.add_argument("--gradient-clip", type=float, default=GridParams.gradient_clip,
                   help="'+noise' rows: per-sequence clip bound C of the sent gradient")
    p.add_argument("--inversion-penalty", type=float, default=GridParams.inversion_penalty,
                   help="'+penalty' rows: λ of the STuning inversion penalty")
    p.add_argument("--block-length", type=int, default=128)
    p.add_argument("--public-blocks", type=int, default=512, help="public code blocks (train split) for the attacker")
    p.add_argument("--probe-epochs", type=int, default=ProbeConfig.epochs)
    p.add_argument("--probe-hidden", type=int, default=ProbeConfig.hidden)
    p.add_argument("--probe-window", type=int, default=ProbeConfig.window)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args(argv)


def _model_dir(args) -> tuple[Path, str]:
    if args.model is not None:
        return args.model, str(args.model)
    from umbra.training.checkpoint import load_checkpoint
    from umbra.training.export import export_checkpoint

    step = load_checkpoint(args.checkpoint)["state"]["step"]
    out = args.work_dir / f"model-step{step}"
    if not (out / "model.safetensors").is_file():
        export_checkpoint(args.checkpoint, out, args.tokenizer)
    return out, f"{args.checkpoint} at step {step} (exported to {out})"


def _progress(step: int, total: int, loss: float) -> None:
    if step % 100 == 0 or step == total:
        print(f"probe: step {step}/{total}, loss {loss:.3f}", flush=True)


def _fmt(v: float) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}"


def render(cache: GridCache, grid: list[tuple[str, float | None]], attacks: list[str], header: str) -> str:
    def eps(e):
        return "—" if e is None else ("∞" if math.isinf(e) else f"{e:g}")

    rec_rows, text_rows = [], []
    for config, e in grid:
        cell = cache.cells.get(cell_key(config, e))
        label = CONFIGS_LABEL[config]
        if cell is None:
            note = "not computed yet"
            rec_rows.append(f"| {label} | {eps(e)} | " + " | ".join(["…"] * len(attacks)) + f" | {note} |")
            continue
        a = cell["attacks"]
        rec_rows.append(f"| {label} | {eps(e)} | " + " | ".join(_fmt(a[k]["recovery"]) if k in a else "—" for k in attacks)
                        + f" | {cell['guess_bound']:.3g} |")
        text_rows.append(f"| {label} | {eps(e)} | " + " | ".join(
            f"{a[k]['rouge1']:.2f} · {a[k]['bleu1']:.2f} · {_fmt(a[k]['clear_gist_rate'])}" if k in a else "—"
            for k in attacks) + " |")
    cols = " | ".join(ATTACK_TITLES[k] for k in attacks)
    sep = "|---|---|" + "---|" * len(attacks)
    return "\n".join([
        header, "", "**Token recovery rate (%)** — position-wise, pooled over all scored positions.", "",
        f"| configuration | ε | {cols} | guess bound e^ε/(e^ε+|V|−1) |", sep + "---|", *rec_rows, "",
        "† not an attack: rank-based frequency analysis given perfect clusters (it reads the truth).", "",
        "**ROUGE-1 · BLEU-1 · clear-gist rate (%)** of the reconstructed text (code lexemes), mean per sequence.", "",
        f"| configuration | ε | {cols} |", sep, *text_rows,
    ])


CONFIGS_LABEL = {"none": "no defence", "indvocab": "INDVocab only", "ltokenizer": "LTokenizer only",
                 "both": "INDVocab + LTokenizer", "both+stuning": "both + STuning",
                 "both+stuning+noise": "both + STuning, noised gradient",
                 "both+stuning-local": "both + STuning, middle run locally",
                 "both+stuning+penalty": "both + STuning, inversion penalty",
                 "both+stuning-local+penalty": "both + STuning, middle run locally, inversion penalty"}


def _noise_eps(params: GridParams) -> float:
    from umbra.tuning.gradient_noise import GradientNoise

    return GradientNoise(params.gradient_noise, params.gradient_clip).message_epsilon(1e-5)


def _write(out: Path, body: str) -> None:
    text = out.read_text() if out.is_file() else ""
    block = f"{BEGIN}\n{body}\n{END}"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text = (text.rstrip() + "\n\n" if text else "") + block + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


def main(argv=None) -> int:
    args = _args(argv)
    torch.set_num_threads(args.threads)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    grid = cells(configs, _floats(args.epsilons))
    model_dir, model_note = _model_dir(args)
    public = PublicModel(model_dir)
    params = GridParams(eval_blocks=args.eval_blocks, gradient_steps=args.gradient_steps, tune_steps=args.tune_steps,
                        batch_size=args.batch_size, context_length=args.block_length, tune_lr=args.tune_lr,
                        gradient_noise=args.gradient_noise, gradient_clip=args.gradient_clip,
                        inversion_penalty=args.inversion_penalty, seed=args.seed)
    corpus = CorpusSample(args.corpus, "train", block_length=args.block_length, blocks=args.public_blocks, seed=args.seed)
    probe = ProbeConfig(window=args.probe_window, hidden=args.probe_hidden, epochs=args.probe_epochs, seed=args.seed)
    suite_cfg = SuiteConfig(corpus=corpus, attacks=ATTACKS + YARDSTICKS, probe=probe)
    cache = GridCache(args.work_dir / "cache.json", run_key(public, repr(suite_cfg), params))
    evaluation = CorpusSample(args.corpus, "test", block_length=args.block_length, blocks=args.eval_blocks,
                              seed=args.seed + 1, per_document=1)
    eval_blocks = public.sample_blocks(evaluation)
    tune_data = TuneData.from_corpus(args.corpus, public.dir, tune_config(params, False), split="test",
                                     cache_dir=args.work_dir / "tune-data", vocab_size=public.vocab_size)
    suite = None
    for config, eps in grid:
        key = cell_key(config, eps)
        if key in cache.cells:
            continue
        if suite is None:
            t0 = time.perf_counter()
            suite = AttackSuite.build(public, suite_cfg, cache_dir=args.work_dir, progress=_progress)
            print(f"attacks ready in {time.perf_counter() - t0:.0f}s", flush=True)
        cache.put(key, run_cell(public, suite, config, eps, eval_blocks, tune_data, params))
        rec = {k: round(v["recovery"], 3) for k, v in cache.cells[key]["attacks"].items()}
        print(f"{key}: {rec} ({cache.cells[key]['seconds']}s)", flush=True)
    cache.add_command("python experiments/privacy_attacks.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])))
    g = GistThresholds()
    header = "\n".join([
        ("Command: " if len(cache.commands) == 1 else "Commands (their cells add up to this table): ")
        + "; ".join(f"`{c}`" for c in cache.commands), "",
        f"Model: {model_note}; fingerprint `{public.fingerprint}`; split E={public.plan.encoder_blocks}, "
        f"D={public.plan.decoder_blocks} of {public.spec.num_layers} layers; hidden size d={public.spec.hidden_size}; "
        f"|V|={public.vocab_size}.",
        f"Client traffic: {len(eval_blocks)} prompts × {args.block_length} tokens (inference, attacks a–d) from "
        f"the held-out `test` split (one block per file), and split fine-tuning (umbra.tuning.tune, lr "
        f"{params.tune_lr:g}) on the `test` split in batches of {params.batch_size} × {args.block_length}: "
        f"attack (e) sees {params.gradient_steps} steps' gradients — the first steps of tuning, or for "
        f"STuning rows the last of {params.tune_steps} steps, after which the tuned client sends the prompts; "
        f"'noised gradient' rows clip each sequence's sent gradient to C = {params.gradient_clip:g} and add "
        f"N(0, (σC)²) with σ = {params.gradient_noise:g} (per message ε = {_noise_eps(params):.3g} at δ = 1e-5), "
        f"'middle run locally' rows tune through the public middle on the client (no gradient sent: (e) —); "
        f"'inversion penalty' rows tune with λ = {params.inversion_penalty:g} · P(attack (a) finds the token); "
        f"attacker's public code: {args.public_blocks} blocks of the `train` split; "
        f"probe: window ±{args.probe_window}, width {args.probe_hidden}, {args.probe_epochs} epochs (the noise-aware "
        f"probe (b′) the same, trained on the attacker's own INDVocab draw of the public table at the cell's ε); "
        f"seed {args.seed}.",
        f"Clear gist: BLEU-1 ≥ {g.bleu} or ROUGE-1 ≥ {g.rouge1}. Cache key `{cache.run_key}`.",
    ])
    columns = [a for a in REPORTED + YARDSTICKS if a in suite_cfg.attacks or (a == NOISE_AWARE and "probe" in suite_cfg.attacks)]
    _write(args.out, render(cache, table_rows(grid, cache.cells), columns, header))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
