"""The VS Code extension's own test suite, run from pytest so `./scripts/test` covers it.

`npm test` in vscode-extension/ compiles the TypeScript and runs the unit tests and the
integration test, which starts the real language server (`python -m lsp`, this interpreter)
with a tiny random model and drives it over stdio the way the extension does. Node.js 20+ and
npm are required; their absence is a failure, not a skip."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_models import build_tiny_model_dir

EXTENSION = Path(__file__).resolve().parents[2] / "vscode-extension"


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("`npm` is not on PATH: the VS Code extension tests need Node.js 20+ and npm")
    return npm


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> None:
    proc = subprocess.run(cmd, cwd=EXTENSION, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"`npm {' '.join(cmd[1:])}` failed with exit status {proc.returncode}:\n"
                    f"{proc.stdout}", pytrace=False)


def _needs_install() -> bool:
    installed = EXTENSION / "node_modules" / ".package-lock.json"
    lock = EXTENSION / "package-lock.json"
    return not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_vscode_extension(tmp_path):
    npm = _npm()
    model = tmp_path / "tiny-llama"
    build_tiny_model_dir(model, family="llama")
    env = {
        **os.environ,
        "UMBRA_TEST_MODEL_DIR": str(model),
        # JSON array: survives spaces in the interpreter's path
        "UMBRA_LSP_COMMAND": json.dumps([sys.executable, "-m", "lsp"]),
        "NO_UPDATE_NOTIFIER": "1",
    }
    if _needs_install():
        _run([npm, "ci", "--no-audit", "--no-fund"], env, timeout=600)
    _run([npm, "test"], env, timeout=1500)
