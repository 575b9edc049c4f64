"""`umbra lsp` — the language server on stdin/stdout (lsp/server.py; also `python -m lsp`).

Editors start it and send their settings as LSP initializationOptions (see lsp/options.py).
Completions always run split: the middle blocks in the cloud (`cloud.url`), or in the real
cloud service started on 127.0.0.1 for the server's lifetime when no URL is configured."""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("lsp", help="run the language server on stdio (for editors)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=run)


def run(args) -> int:
    from lsp.server import run_stdio

    return run_stdio()
