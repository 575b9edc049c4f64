"""The package DAG of docs/ARCHITECTURE.md ("Layers") holds: import-linter checks the contracts in
pyproject.toml ([tool.importlinter]) on the real import graph, lazy imports inside functions
included. A broken contract fails this test with import-linter's report, which names the
offending import chain. The product never imports benchmarks/ or experiments/, and benchmarks/
never imports experiments/: import-linter checks the package imports (`benchmarks.machine`), and
a scan here the bare-name ones the scripts make after putting their folder on sys.path, which
import-linter cannot attribute."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRODUCT = ("umbra", "lsp", "server", "keys")
PACKAGES = PRODUCT + ("benchmarks", "experiments")  # root_packages of the contracts


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


def test_research_code_is_imported_one_way(tmp_path):
    """On copies of the packages, a product module importing a benchmark, and a benchmark importing
    an experiment (both lazily), break the contracts, each named in the report."""
    for name in PACKAGES:
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    edge = tmp_path / "umbra" / "edge.py"
    edge.write_text(edge.read_text() + "\n\ndef _bad():\n    from benchmarks.machine import describe\n")
    machine = tmp_path / "benchmarks" / "machine.py"
    machine.write_text(machine.read_text() + "\n\ndef _bad():\n    from experiments.seed_stats import mean_ci\n")
    status, report = lint_imports(tmp_path)
    assert status != 0, report
    assert "umbra.edge -> benchmarks.machine" in report
    assert "benchmarks.machine -> experiments.seed_stats" in report


def bare_imports(path: Path) -> set[str]:
    """The top-level names a module imports absolutely (`import a.b`, `from a import b`: "a"),
    lazy imports included."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_bare_name_import_crosses_the_line():
    """The scripts of benchmarks/ and experiments/ also import by bare name (`from machine import
    describe`, with the folder on sys.path), which import-linter cannot see: no product module
    imports a benchmark or an experiment by any name, and no benchmark imports an experiment."""
    benchmarks = {p.stem for p in (REPO / "benchmarks").glob("*.py")} - {"__init__"}
    experiments = {p.stem for p in (REPO / "experiments").glob("*.py")} - {"__init__"}
    assert benchmarks and experiments and not benchmarks & experiments
    crossings = []
    for package in PRODUCT:
        for path in sorted((REPO / package).rglob("*.py")):
            crossings += [f"{path.relative_to(REPO)} imports {name}"
                          for name in bare_imports(path) & (benchmarks | experiments | {"benchmarks", "experiments"})]
    for path in sorted((REPO / "benchmarks").glob("*.py")):
        crossings += [f"{path.relative_to(REPO)} imports {name}"
                      for name in bare_imports(path) & (experiments | {"experiments"})]
    assert not crossings, crossings

