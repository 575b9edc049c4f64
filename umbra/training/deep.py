"""The deep default model's pretraining run: 16 x 256 up-scaled from umbra-code-tiny.

`start` extends the tiny tokenizer with <file_sep> (vocab_ext.py), builds the 16-layer model
from the trained 8 layers (upscale.py: function-preserving), and trains it with the ordinary
trainer on 1,024-token blocks with repository-level units; `resume` continues from the run
directory's checkpoint with the checkpoint's own settings (runtime knobs excepted).
`start --init scratch` is the control: the same shape, data, order and schedule from random
weights (its own run directory), so the two curves show what up-scaling buys at equal tokens.
Entry point: `python -m umbra.training.deep start|resume|status|probe` (scripts/pretrain-deep)."""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from umbra.errors import ConfigError
from umbra.training.checkpoint import CHECKPOINT_NAME, load_checkpoint
from umbra.training.config import FimConfig, ModelConfig, RepoConfig, TrainConfig, train_config_from_dict
from umbra.training.export import INIT_NAME
from umbra.training.upscale import UpscaleConfig, load_into, upscaled_state
from umbra.training.vocab_ext import VocabExtension, extend_tokenizer

log = logging.getLogger(__name__)

INITS = ("upscaled", "scratch")
RUNTIME_ONLY = ("threads", "compile", "checkpoint_minutes", "stop_at_step")  # may change on resume


@dataclass
class DeepRunConfig:
    base_model: Path = Path("models/umbra-code-tiny")  # trained model and tokenizer (read only)
    out_dir: Path = Path("runs/pretrain-deep")  # checkpoint, logs, token cache, extended tokenizer
    export_dir: Path = Path("models/umbra-code-deep")  # written only when the schedule ends
    corpus_dir: Path = Path("data/corpus")
    heldout_dir: Path | None = Path("data/heldout")  # refused if the corpus overlaps it (when built)
    factor: int = 2  # 8 trained blocks -> 16
    context_length: int = 1024  # RoPE: positions past 512 need no new weights
    batch_size: int = 4  # blocks per step: 4,096 tokens/step, as the tiny run
    total_tokens: int = 12_000_000  # budget (set from the measured tokens/s; see docs/data.md)
    lr: float = 5e-4  # peak lr: continued pretraining from trained weights
    warmup_steps: int = 100
    eval_every_steps: int = 500
    eval_tokens_per_lang: int = 50_000
    threads: int = 1  # leave the machine's other core free
    compile: bool = False
    bf16: bool = True  # autocast (native on avx512_bf16 CPUs)
    checkpoint_minutes: float = 15.0
    stop_at_step: int | None = None
    repo: RepoConfig = field(default_factory=lambda: RepoConfig(rate=0.3))
    init: str = "upscaled"  # "upscaled" (from the tiny model's blocks) or "scratch" (the control)

    @property
    def tokenizer_dir(self) -> Path:
        return self.out_dir / "tokenizer"


def train_config(cfg: DeepRunConfig, vocab_size: int) -> TrainConfig:
    """The trainer's config of the deep run (the tiny model's shape, factor x deeper)."""
    src = json.loads((cfg.base_model / "config.json").read_text())
    model = ModelConfig(vocab_size=vocab_size, hidden_size=src["hidden_size"],
                        num_layers=cfg.factor * src["num_hidden_layers"], num_heads=src["num_attention_heads"],
                        num_kv_heads=src["num_key_value_heads"], intermediate_size=src["intermediate_size"],
                        context_length=cfg.context_length, tie_embeddings=src["tie_word_embeddings"])
    return TrainConfig(corpus_dir=cfg.corpus_dir, heldout_dir=cfg.heldout_dir, tokenizer_dir=cfg.tokenizer_dir,
                       out_dir=cfg.out_dir,
                       export_dir=cfg.export_dir, batch_size=cfg.batch_size, total_tokens=cfg.total_tokens,
                       lr=cfg.lr, warmup_steps=cfg.warmup_steps, bf16=cfg.bf16, threads=cfg.threads,
                       compile=cfg.compile, eval_every_steps=cfg.eval_every_steps,
                       eval_tokens_per_lang=cfg.eval_tokens_per_lang, checkpoint_minutes=cfg.checkpoint_minutes,
                       stop_at_step=cfg.stop_at_step, model=model, fim=FimConfig(), repo=cfg.repo)


def prepare_tokenizer(cfg: DeepRunConfig) -> int:
    """(Re)build the extended tokenizer (deterministic); return the padded vocab size."""
    return extend_tokenizer(VocabExtension(cfg.base_model, cfg.tokenizer_dir,
                                           model_max_length=cfg.context_length))


def start(cfg: DeepRunConfig, enforce_limits: bool = True):
    from umbra.training.trainer import Trainer

    if cfg.init not in INITS:
        raise ConfigError(f"init must be one of {', '.join(INITS)}, not {cfg.init!r}")
    if (cfg.out_dir / CHECKPOINT_NAME).exists():
        raise ConfigError(f"{cfg.out_dir / CHECKPOINT_NAME} exists: use resume")
    vocab = prepare_tokenizer(cfg)
    trainer = Trainer(train_config(cfg, vocab), enforce_limits)
    if cfg.init == "upscaled":
        load_into(trainer.model, upscaled_state(UpscaleConfig(cfg.base_model, cfg.factor, vocab)))
        log.info("up-scaled %s x%d; vocab %d", cfg.base_model, cfg.factor, vocab)
    else:
        log.info("from random weights (the control); vocab %d", vocab)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    (cfg.out_dir / INIT_NAME).write_text(json.dumps({"init": cfg.init, "base_model": str(cfg.base_model)}) + "\n")
    return trainer.run()


def resume(cfg: DeepRunConfig, enforce_limits: bool = True, total_tokens: int | None = None):
    """Continue the run in cfg.out_dir; only cfg's runtime knobs (and an explicit budget) apply."""
    from umbra.training.runlog import record_schedule_change
    from umbra.training.trainer import Trainer

    payload = load_checkpoint(cfg.out_dir / CHECKPOINT_NAME)
    saved, step = train_config_from_dict(payload["config"]), payload["state"]["step"]
    del payload
    for key in RUNTIME_ONLY:
        setattr(saved, key, getattr(cfg, key))
    if total_tokens:
        record_schedule_change(saved.out_dir, step, saved.total_tokens, total_tokens)
        saved.total_tokens = total_tokens
    if not (saved.tokenizer_dir / "tokenizer.json").exists():
        prepare_tokenizer(cfg)
    trainer = Trainer(saved, enforce_limits)
    trainer.resume()
    return trainer.run()


def status(cfg: DeepRunConfig) -> dict:
    """Where the run stands: the checkpoint's step and the last logged training row."""
    out: dict = {"out_dir": str(cfg.out_dir)}
    ckpt = cfg.out_dir / CHECKPOINT_NAME
    if ckpt.exists():
        p = load_checkpoint(ckpt)
        tc = train_config_from_dict(p["config"])
        out |= {"checkpoint_step": p["state"]["step"], "total_steps": tc.total_steps(),
                "checkpoint_tokens": p["state"]["tokens_seen"]}
    log_path = cfg.out_dir / "train_log.csv"
    if log_path.exists():
        lines = log_path.read_text().splitlines()
        if len(lines) > 1:
            out["last_logged"] = dict(zip(lines[0].split(","), lines[-1].split(",")))
    return out


def probe(cfg: DeepRunConfig, steps: int) -> dict:
    """Training tokens/s of the deep shape (random tokens), as configured (threads/bf16/compile)."""
    from umbra.training.bench import measure_throughput

    tc = train_config(cfg, 8256)
    return {"threads": cfg.threads, "bf16": cfg.bf16, "compile": cfg.compile,
            **measure_throughput(tc, steps=steps, warmup=3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m umbra.training.deep")
    p.add_argument("command", choices=("start", "resume", "status", "probe", "compare"))
    p.add_argument("--out-dir", default=str(DeepRunConfig.out_dir))
    p.add_argument("--total-tokens", type=int, default=None, help="start: budget; resume: re-target it")
    p.add_argument("--threads", type=int, default=DeepRunConfig.threads)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--fp32", action="store_true", help="no bf16 autocast")
    p.add_argument("--stop-at-step", type=int, default=None)
    p.add_argument("--steps", type=int, default=20, help="probe: measured steps")
    p.add_argument("--init", choices=INITS, default="upscaled", help="start: the weights it begins from")
    p.add_argument("--against", default="runs/pretrain-deep-scratch", help="compare: the control's run dir")
    p.add_argument("--plot", default=None, help="compare: also write the two curves as a PNG here")
    args = p.parse_args(argv)
    if args.command == "compare":
        from umbra.training.curve_compare import compare_runs

        print(compare_runs(Path(args.out_dir), Path(args.against), Path(args.plot) if args.plot else None))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = DeepRunConfig(out_dir=Path(args.out_dir), threads=args.threads, compile=args.compile,
                        bf16=not args.fp32, stop_at_step=args.stop_at_step, init=args.init)
    if args.command == "start" and args.total_tokens:
        cfg.total_tokens = args.total_tokens
    if args.command == "start":
        r = start(cfg)
    elif args.command == "resume":
        r = resume(cfg, total_tokens=args.total_tokens)
    elif args.command == "status":
        print(json.dumps(status(cfg), indent=2))
        return 0
    else:
        print(json.dumps(probe(cfg, args.steps)))
        return 0
    print(json.dumps({"step": r.state.step, "finished": r.finished, "interrupted": r.interrupted}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
