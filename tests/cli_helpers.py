"""Run the `umbra` CLI for a test: in-process through umbra.cli.main's main(argv), or as the real
console program in a subprocess.

`umbra_in_process` calls the same entry point the console script calls, with what a subprocess
would see: its own stdin (a pipe: never a terminal, so keys are read from it, not prompted for),
its own stdout and stderr (the logging handler `main` installs writes to that stderr, as it would
in a fresh process), the environment given, the repository as working directory, and the exit
status a process would have (argparse's SystemExit code; an uncaught exception is a traceback on
stderr and status 1). It saves a Python start-up and the import of torch per command, which is
most of a command's time on the tiny test models. Each command group keeps one test that runs it
as a real subprocess (`umbra_subprocess`): the console entry point, exit status and pipes for real.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def umbra_subprocess(*args, stdin: str | None = None, env: dict | None = None,
                     timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m umbra.cli.main ARGS` in a subprocess; env entries set to None are removed. Torch
    runs one intra-op thread there too (OMP_NUM_THREADS=1 unless `env` says otherwise), as in the
    test process (tests/conftest.py): on a loaded machine OpenMP's spinning threads make the tiny
    models' steps an order of magnitude slower, and the results are the same."""
    full = dict(os.environ, OMP_NUM_THREADS="1")
    for name, value in (env or {}).items():
        if value is None:
            full.pop(name, None)
        else:
            full[name] = str(value)
    return subprocess.run([sys.executable, "-m", "umbra.cli.main", *map(str, args)], input=stdin,
                          capture_output=True, text=True, cwd=ROOT, env=full, timeout=timeout)


@contextlib.contextmanager
def _environment(env: dict | None):
    saved = {name: os.environ.get(name) for name in (env or {})}
    try:
        for name, value in (env or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = str(value)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _own_root_logger():
    """`main` calls logging.basicConfig, which configures the root logger only when it has no
    handler: take pytest's away for the call so the command logs to its own stderr, as it would
    in a fresh process, then give them back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers = []
    try:
        yield
    finally:
        for h in root.handlers:
            h.close()
        root.handlers = handlers
        root.setLevel(level)


def umbra_in_process(*args, stdin: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """main([ARGS]) in this process, with its own stdin/stdout/stderr; returns what a subprocess
    run of the same command returns (args, returncode, stdout, stderr)."""
    from umbra.cli.main import main

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        with _environment(env), contextlib.chdir(ROOT), _own_root_logger(), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as exc:  # argparse: usage errors (2) and --help (0)
                code = exc.code
                if code is None:
                    rc = 0
                elif isinstance(code, int):
                    rc = code
                else:
                    print(code, file=sys.stderr)
                    rc = 1
            except Exception:  # what the interpreter prints for an uncaught exception
                traceback.print_exc()
                rc = 1
            sys.stdout.flush()
            sys.stderr.flush()
    finally:
        sys.stdin = saved_stdin
    return subprocess.CompletedProcess([sys.executable, "-m", "umbra.cli.main", *argv], rc, out.getvalue(),
                                       err.getvalue())


# `umbra complete` tests (tests/cli): the source file they complete in and the generation flags
COMPLETE_SOURCE = "def add(a, b):\n    return a\n\n\nprint(add(1, 2))\n"
COMPLETE_GEN = ["--max-tokens", "6", "--multiline", "--threads", "1"]


def umbra_complete(*args, env=None, in_process=True) -> subprocess.CompletedProcess:
    """`umbra complete ARGS`; UMBRA_CLOUD_URL/TOKEN come from `env` only (None or absent: unset)."""
    env = {"UMBRA_CLOUD_URL": None, "UMBRA_CLOUD_TOKEN": None, **(env or {})}
    run = umbra_in_process if in_process else umbra_subprocess
    return run("complete", *args, env=env)
