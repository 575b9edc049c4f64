"""`python -m lsp`: the Umbra language server on stdin/stdout (same as `umbra lsp`)."""

import logging
import sys

from lsp.stdio import run_stdio

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(run_stdio())
