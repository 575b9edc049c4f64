"""`umbra init --base MODEL_DIR [--epsilon 1024] [--out DIR] [--h 0.25] [--split E,D] [--force]`:
make the client bundle (randomized embedding table, sealed permutation, client weights)."""

from __future__ import annotations

import argparse
import math
import sys

from keys.store import DEFAULT_SERVICE
from umbra.errors import ConfigError
from umbra.privacy.manifest import DEFAULT_EPSILON


def _epsilon(text: str) -> float:
    value = float(text)  # accepts "inf"
    if math.isnan(value) or value < 0:
        raise argparse.ArgumentTypeError("epsilon must be >= 0 or inf")
    return value


def _split(text: str):
    from umbra.model.parts import SplitPlan

    try:
        e, d = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("--split takes E,D (encoder and decoder block counts), e.g. 1,4") from None
    return SplitPlan(e, d)


def register(subparsers) -> None:
    p = subparsers.add_parser("init", help="make the client bundle for a base model")
    p.add_argument("--base", required=True, metavar="MODEL_DIR", help="local Hugging Face model directory")
    p.add_argument("--epsilon", type=_epsilon, default=DEFAULT_EPSILON, metavar="E",
                   help="INDVocab budget per embedding row (sum over features; 'inf' = no noise; "
                        "default: %(default)g, chosen in docs/privacy/utility.md)")
    p.add_argument("--out", metavar="DIR", help="bundle directory (default: $XDG_DATA_HOME/umbra/bundles/<model>)")
    p.add_argument("--h", type=float, default=0.25, help="INDVocab temperature (default: %(default)s)")
    p.add_argument("--split", type=_split, metavar="E,D", help="client encoder,decoder blocks (default: 1,2 or 1,4)")
    p.add_argument("--force", action="store_true", help="replace an existing bundle (its key is deleted)")
    p.add_argument("--service", default=DEFAULT_SERVICE, help="keyring service name (default: %(default)s)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from keys import KeyStore
    from umbra.privacy.bundle import BundleConfig, default_bundle_dir, init_bundle

    if not args.h > 0:
        raise ConfigError("--h must be > 0")
    out = args.out or default_bundle_dir(args.base)

    def progress(done: int, total: int) -> None:
        print(f"\rrandomizing the embedding table: {done}/{total} features", end="", file=sys.stderr, flush=True)

    manifest = init_bundle(args.base, BundleConfig(args.epsilon, args.h, args.split), out, force=args.force,
                           store=KeyStore(args.service), progress=progress)
    print(file=sys.stderr)
    p = manifest.privacy
    print(f"client bundle {manifest.bundle_id} written to {out}")
    print(f"  base {manifest.base['model_id']}  split E={manifest.split['encoder_blocks']} "
          f"D={manifest.split['decoder_blocks']}")
    print(f"  INDVocab epsilon={p['epsilon']} (per feature {p['feature_epsilon']}), h={p['h']}; "
          f"uniform-prior token guess bound {p['guess_bound']:.3g}")
    print(f"  permutation sealed; its key is in the OS keyring (service {args.service!r})")
    return 0
