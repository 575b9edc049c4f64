"""The package DAG of docs/ARCHITECTURE.md ("Layers") holds: import-linter checks the contracts in
pyproject.toml ([tool.importlinter]) on the real import graph, lazy imports inside functions
included. A broken contract fails this test with import-linter's report, which names the
offending import chain."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("umbra", "lsp", "server", "keys")  # root_packages of the contracts


def lint_imports(root: Path = REPO) -> tuple[int, str]:
    """`lint-imports` on the packages under `root` with its pyproject.toml, in a fresh interpreter
    (no cache written into the tree). Returns the exit status and the report."""
    cmd = [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
           "--no-cache"]
    env = os.environ | {"PYTHONPATH": str(root), "NO_COLOR": "1", "COLUMNS": "200"}
    run = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    return run.returncode, run.stdout + run.stderr


def test_every_import_contract_is_kept():
    status, report = lint_imports()
    assert status == 0, f"an import contract is broken (pyproject.toml [tool.importlinter]):\n{report}"
    assert "0 broken" in report


def test_a_forbidden_import_breaks_the_contracts(tmp_path):
    """The check is live: on a copy of the packages where keys imports the privacy layer (lazily,
    inside a function), the same contracts are reported broken, naming the import."""
    for name in PACKAGES:
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    cli = tmp_path / "keys" / "cli.py"
    cli.write_text(cli.read_text() + "\n\ndef _bad():\n    from umbra.privacy.bundle import rotate_bundle_key\n")
    status, report = lint_imports(tmp_path)
    assert status != 0, report
    assert "keys.cli -> umbra.privacy.bundle" in report and "BROKEN" in report
