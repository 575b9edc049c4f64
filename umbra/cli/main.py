"""`umbra` console script: a thin dispatcher over per-command modules.

Each module in COMMAND_MODULES exposes `register(subparsers)`, which adds its sub-commands and
sets `func` (a callable taking the parsed namespace and returning an exit status)."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from umbra.errors import UmbraError

COMMAND_MODULES = [
    "umbra.cli.complete_cmd",
    "umbra.cli.cloud_cmd",
    "umbra.cli.data_cmd",
    "umbra.cli.train_cmd",
    "umbra.cli.eval_cmd",
    "umbra.cli.init_cmd",
    "umbra.cli.keys_cmd",
    "umbra.cli.adapters_cmd",
    "umbra.cli.tune_cmd",
    "umbra.cli.audit_cmd",
    "umbra.cli.lsp_cmd",
    "umbra.cli.serve_cmd",
    "umbra.cli.scrub_cmd",
    "umbra.cli.securegate_cmd",
    "umbra.cli.federation_cmd",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="umbra", description="Private code completion.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except UmbraError as exc:
        print(f"umbra: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
