"""`umbra eval lm`: utility of a model on held-out code (thin over umbra.evaluation)."""

from __future__ import annotations

import json
from pathlib import Path

from umbra.data.corpus import LANGS
from umbra.paths import default_model_dir


def register(sub) -> None:
    p = sub.add_parser("eval", help="evaluate models").add_subparsers(dest="what", required=True)
    lm = p.add_parser("lm", help="next-token accuracy, perplexity and FIM line exact match per language")
    lm.add_argument("--model", type=Path, default=None, help="model directory (default: embedded model)")
    lm.add_argument("--corpus", type=Path, default=Path("data/corpus"))
    lm.add_argument("--split", default="test")
    lm.add_argument("--langs", default=",".join(LANGS), help="comma-separated languages")
    lm.add_argument("--max-tokens", type=int, default=400_000, help="next-token tokens per language")
    lm.add_argument("--fim-lines", type=int, default=300, help="FIM cases per language")
    lm.add_argument("--seed", type=int, default=0)
    lm.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    lm.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    lm.set_defaults(func=run_lm)


def run_lm(args) -> int:
    import torch

    from umbra.evaluation.lm_report import LmEvalConfig, as_json, evaluate_lm, markdown_table

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = LmEvalConfig(model_dir=args.model or default_model_dir(), corpus_dir=args.corpus, split=args.split,
                       langs=tuple(s for s in args.langs.split(",") if s), max_tokens_per_lang=args.max_tokens,
                       fim_lines=args.fim_lines, seed=args.seed)
    reports, seconds = evaluate_lm(cfg)
    print(markdown_table(reports))
    print(f"\n({seconds:.1f} s; split={cfg.split}, seed={cfg.seed})")
    if args.json:
        args.json.write_text(json.dumps(as_json(reports, seconds, cfg), indent=2))
    return 0
