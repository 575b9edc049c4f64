"""`umbra train ...`: pretraining (with exact resume), throughput benchmark and export."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from umbra.training.config import ModelConfig, TrainConfig
from umbra.training.hardware import native_bf16

_RUNTIME_ONLY = ("stop_at_step", "threads", "checkpoint_minutes", "compile")  # may change on resume


def _config(args: argparse.Namespace) -> TrainConfig:
    m = ModelConfig(hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                    num_kv_heads=args.kv_heads, intermediate_size=args.intermediate)
    return TrainConfig(out_dir=Path(args.out_dir), corpus_dir=Path(args.corpus_dir),
                       heldout_dir=Path(args.heldout_dir) if args.heldout_dir else None,
                       tokenizer_dir=Path(args.tokenizer), export_dir=Path(args.export_dir),
                       seed=args.seed, batch_size=args.batch_size,
                       total_tokens=args.total_tokens or TrainConfig.total_tokens,
                       lr=args.lr, warmup_steps=args.warmup_steps, bf16=args.bf16 or (not args.fp32 and native_bf16()),
                       threads=args.threads, compile=args.compile, eval_every_steps=args.eval_every,
                       checkpoint_minutes=args.checkpoint_minutes, stop_at_step=args.stop_at_step,
                       model=m)


def _pretrain(args: argparse.Namespace) -> int:
    from umbra.training.checkpoint import CHECKPOINT_NAME, load_checkpoint
    from umbra.training.config import train_config_from_dict
    from umbra.training.runlog import record_schedule_change
    from umbra.training.trainer import pretrain

    cfg = _config(args)
    if args.resume:  # the checkpoint's own settings win, except runtime-only knobs
        payload = load_checkpoint(cfg.out_dir / CHECKPOINT_NAME)
        saved, saved_step = train_config_from_dict(payload["config"]), payload["state"]["step"]
        del payload  # the weights and optimizer state: the trainer loads them itself
        for key in _RUNTIME_ONLY:
            setattr(saved, key, getattr(cfg, key))
        if args.total_tokens:  # explicit: extend (or shorten) the cosine schedule of the run
            record_schedule_change(cfg.out_dir, saved_step, saved.total_tokens, args.total_tokens)
            saved.total_tokens = args.total_tokens
        if args.fp32 and saved.bf16:  # explicit: continue in fp32 (e.g. a CPU without native bf16 matmul)
            saved.bf16 = False
            saved.bf16_until_step = saved_step
        cfg = saved
    result = pretrain(cfg, resume=args.resume)
    print(json.dumps({"step": result.state.step, "tokens_seen": result.state.tokens_seen,
                      "finished": result.finished, "interrupted": result.interrupted}))
    return 0


def _bench(args: argparse.Namespace) -> int:
    from umbra.training.bench import measure_throughput

    print(json.dumps(measure_throughput(_config(args), steps=args.steps)))
    return 0


def _export(args: argparse.Namespace) -> int:
    from umbra.training.export import export_checkpoint

    out = export_checkpoint(Path(args.checkpoint), Path(args.out), Path(args.tokenizer))
    print(f"exported to {out}")
    return 0


def _card(args: argparse.Namespace) -> int:
    from umbra.training.card import CardInputs, write_card

    print(f"model card written to {write_card(CardInputs(Path(args.model), Path(args.summary)))}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser("train", help="pretrain and export the default code model")
    sub = train.add_subparsers(dest="train_command", required=True)
    d, dm = TrainConfig(), ModelConfig()
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out-dir", default=str(d.out_dir), help="checkpoints, logs, plot")
    common.add_argument("--corpus-dir", default=str(d.corpus_dir))
    common.add_argument("--heldout-dir", default="data/heldout",
                        help="the line benchmark's held-out code: training refuses a corpus that overlaps it "
                             "(checked when it exists; '' skips the check)")
    common.add_argument("--tokenizer", default=str(d.tokenizer_dir))
    common.add_argument("--export-dir", default=str(d.export_dir))
    common.add_argument("--seed", type=int, default=d.seed)
    common.add_argument("--batch-size", type=int, default=d.batch_size, help="blocks per step")
    common.add_argument("--total-tokens", type=int, default=None,
                        help=f"training budget (default {d.total_tokens}); with --resume it "
                             "re-targets the cosine schedule of the run")
    common.add_argument("--lr", type=float, default=d.lr)
    common.add_argument("--warmup-steps", type=int, default=d.warmup_steps)
    precision = common.add_mutually_exclusive_group()
    precision.add_argument("--fp32", action="store_true",
                           help="no bfloat16 autocast (with --resume: continue a bf16 run in fp32)")
    precision.add_argument("--bf16", action="store_true",
                           help="bfloat16 autocast even on a CPU without native bf16 matmul (default: autocast "
                                "exactly where the CPU has it: avx512_bf16 or amx_bf16)")
    common.add_argument("--threads", type=int, default=d.threads)
    common.add_argument("--compile", action="store_true",
                        help="torch.compile the training step (needs a C compiler; about a minute to compile, "
                             "then ~1.45x faster steps on the default model on a 2-core AVX2 CPU)")
    common.add_argument("--eval-every", type=int, default=d.eval_every_steps)
    common.add_argument("--checkpoint-minutes", type=float, default=d.checkpoint_minutes)
    common.add_argument("--stop-at-step", type=int, default=None)
    common.add_argument("--hidden", type=int, default=dm.hidden_size)
    common.add_argument("--layers", type=int, default=dm.num_layers)
    common.add_argument("--heads", type=int, default=dm.num_heads)
    common.add_argument("--kv-heads", type=int, default=dm.num_kv_heads)
    common.add_argument("--intermediate", type=int, default=dm.intermediate_size)

    p = sub.add_parser("pretrain", parents=[common], help="pretrain (or --resume) the model")
    p.add_argument("--resume", action="store_true", help="continue from <out-dir>/last.pt")
    p.set_defaults(func=_pretrain)

    b = sub.add_parser("bench", parents=[common], help="measure training tokens/s")
    b.add_argument("--steps", type=int, default=8)
    b.set_defaults(func=_bench)

    e = sub.add_parser("export", help="write safetensors + config + tokenizer from a checkpoint")
    e.add_argument("--checkpoint", default="runs/pretrain/last.pt")
    e.add_argument("--out", default=str(d.export_dir))
    e.add_argument("--tokenizer", default=str(d.tokenizer_dir))
    e.set_defaults(func=_export)

    c = sub.add_parser("card", help="render the model card (README.md) of an exported model")
    c.add_argument("--model", default=str(d.export_dir), help="exported model directory")
    c.add_argument("--summary", default="data/manifest/summary.json", help="corpus summary")
    c.set_defaults(func=_card)
