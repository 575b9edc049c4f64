"""`umbra lsp` — the language server on stdin/stdout (lsp/stdio.py, lsp/server.py; also `python -m lsp`).

Editors start it and send their settings as LSP initializationOptions (see lsp/options.py).
Completions always run split: the middle blocks in the cloud (`cloud.url`), or in the real
cloud service started on 127.0.0.1 for the server's lifetime when no URL is configured. A cloud
not on this machine receives only a defended privacy mode, unless the editor's
`allowUndefendedRemoteCloud`, --allow-undefended-remote-cloud or
UMBRA_ALLOW_UNDEFENDED_REMOTE_CLOUD=1 opts in (docs/privacy/mode.md)."""

from __future__ import annotations

import argparse

from umbra.cli.cloud_args import add_opt_in_arg


def register(sub) -> None:
    p = sub.add_parser("lsp", help="run the language server on stdio (for editors)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_opt_in_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from lsp.stdio import run_stdio

    return run_stdio(args.allow_undefended_remote_cloud)
