"""`umbra lsp` / `python -m lsp`: the language server (lsp/server.py) on stdin/stdout, for the
life of the process — the protocol owns the real stdout, a signal or the end of input stops it,
and a self-started cloud never outlives it."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

from pygls.io_ import StdoutWriter

from lsp.protocol import chunk_reader, read_frames
from lsp.server import UmbraLanguageServer, create_server


async def _serve(ls: UmbraLanguageServer, stdin, stdout) -> None:
    ls.protocol.set_writer(StdoutWriter(stdout))
    try:
        await read_frames(chunk_reader(stdin, ls.thread_pool), ls.protocol)
    finally:  # end of input, `exit`, or a signal: the self-started cloud must not outlive us
        if ls.backend is not None:
            await ls.backend.aclose()


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def run_stdio(allow_undefended_remote_cloud: bool = False) -> int:
    """Serve LSP on stdin/stdout until `exit`, end of input or SIGTERM, then exit the process.
    Anything else writing to stdout (a library's print, a child process) goes to stderr: the
    protocol has the real stdout to itself."""
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    logging.getLogger("pygls").setLevel(logging.WARNING)  # its debug logs carry document text
    signal.signal(signal.SIGTERM, _terminate)
    ls = create_server(allow_undefended_remote_cloud)
    code = 0
    try:
        asyncio.run(_serve(ls, sys.stdin.buffer, protocol_out))
    except SystemExit as exc:  # `exit` (0 after shutdown, else 1) or SIGTERM
        code = exc.code if isinstance(exc.code, int) else 0
    except (KeyboardInterrupt, BrokenPipeError):
        code = 1
    finally:
        if ls.backend is not None:
            ls.backend.stop_cloud()  # no-op after a clean aclose
    logging.shutdown()
    sys.stderr.flush()
    # Not a plain return: the stdin reader thread may block on a pipe the editor keeps open, and
    # the interpreter would wait for it. Everything of ours is closed by now.
    os._exit(code)
