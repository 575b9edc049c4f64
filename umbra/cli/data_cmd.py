"""`umbra data ...`: build the corpus, the private domains and the held-out set, train the tokenizer,
report token counts."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from umbra.data.config import DataConfig


def _cfg(args: argparse.Namespace) -> DataConfig:
    return DataConfig(root=Path(args.root), seed=args.seed)


def _build(args: argparse.Namespace) -> int:
    from umbra.data.build import build_corpus

    summary = build_corpus(_cfg(args), install_missing=not args.no_install)
    print(json.dumps({lang: v["splits"] for lang, v in summary["languages"].items()}, indent=1))
    return 0


def _private(args: argparse.Namespace) -> int:
    from umbra.data.private import build_private_domains

    summary = build_private_domains(_cfg(args))
    print(json.dumps({lang: v["splits"] for lang, v in summary["languages"].items()}, indent=1))
    return 0


def _heldout(args: argparse.Namespace) -> int:
    from umbra.data.contamination import check_disjoint
    from umbra.data.heldout import HeldoutConfig, build_heldout

    cfg = _cfg(args)
    if args.corpus_dir is not None:
        cfg.corpus_dir = Path(args.corpus_dir)
    hcfg = HeldoutConfig(near_dup=not args.no_near_dup, private_archives=not args.no_private_archives)
    if args.check_only:
        check_disjoint(cfg.path(cfg.corpus_dir), cfg.path(hcfg.out_dir), manifest_dir=cfg.path(cfg.manifest_dir),
                       near_dup=hcfg.near_dup, minhash=cfg.private.minhash)
        print(f"the held-out set in {cfg.path(hcfg.out_dir)} is disjoint from the corpus")
        return 0
    summary = build_heldout(cfg, hcfg)
    print(json.dumps({lang: {"files": v["files"], "bytes": v["bytes"]} for lang, v in summary["languages"].items()},
                     indent=1))
    return 0


def _tokenizer(args: argparse.Namespace) -> int:
    from umbra.data.tokenizer import TokenizerConfig, train_tokenizer

    tcfg = TokenizerConfig(vocab_size=args.vocab_size, sample_bytes=args.sample_bytes)
    out = train_tokenizer(_cfg(args), tcfg, Path(args.out))
    print(f"tokenizer written to {out}")
    return 0


def _stats(args: argparse.Namespace) -> int:
    from umbra.data.stats import token_stats

    print(json.dumps(token_stats(_cfg(args), Path(args.tokenizer)), indent=1))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data", help="corpus and tokenizer")
    sub = data.add_subparsers(dest="data_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", default=".", help="repository root (default: .)")
    common.add_argument("--seed", type=int, default=DataConfig.seed, help="split seed")

    b = sub.add_parser("build", parents=[common], help="collect, filter, dedup and split the corpus")
    b.add_argument("--no-install", action="store_true", help="never apt-get install missing sources")
    b.set_defaults(func=_build)

    p = sub.add_parser("private", parents=[common],
                       help="build the per-language private domains (needs the pretraining corpus for dedup)")
    p.set_defaults(func=_private)

    h = sub.add_parser("heldout", parents=[common],
                       help="build the held-out third-party set (data/heldout) and check it is disjoint from the corpus")
    h.add_argument("--corpus-dir", default=None,
                   help="corpus text to check against besides the manifests (default: data/corpus, if built)")
    h.add_argument("--no-near-dup", action="store_true", help="skip the MinHash check against the corpus text")
    h.add_argument("--no-private-archives", action="store_true",
                   help="without data/corpus/private, do not check against the private domains' pinned archives")
    h.add_argument("--check-only", action="store_true",
                   help="only check the existing held-out set against the manifests and corpus text")
    h.set_defaults(func=_heldout)

    t = sub.add_parser("tokenizer", parents=[common], help="train the byte-level BPE tokenizer")
    t.add_argument("--vocab-size", type=int, default=8192)
    t.add_argument("--sample-bytes", type=int, default=40_000_000,
                   help="bytes of the training split used to learn merges")
    t.add_argument("--out", default="models/umbra-code-tiny", help="tokenizer directory")
    t.set_defaults(func=_tokenizer)

    s = sub.add_parser("stats", parents=[common], help="tokens per language and split")
    s.add_argument("--tokenizer", default="models/umbra-code-tiny")
    s.set_defaults(func=_stats)
