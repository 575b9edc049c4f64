"""umbra/cli/main.py: building the whole parser (every `umbra …` does) stays free of torch and the
model code, which load only when a command runs a model."""

import subprocess
import sys

import pytest

from umbra.cli.main import COMMAND_MODULES, build_parser

PROBE = """
import sys
from umbra.cli.main import build_parser
build_parser()
print(sorted(m for m in ("torch", "transformers", "umbra.model.parts", "umbra.engine.engine") if m in sys.modules))
"""


def test_building_the_parser_imports_no_torch():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_command_module_registers():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name in ("complete", "cloud", "keys", "tune", "serve", "lsp"):
        assert name in commands
    assert len(COMMAND_MODULES) == len(set(COMMAND_MODULES))


@pytest.mark.parametrize("package, name", [("umbra.engine", "CompletionEngine"), ("umbra.tuning", "tune")])
def test_lazy_exports_resolve_and_refuse_unknown_names(package, name):
    module = __import__(package, fromlist=[name])
    assert getattr(module, name).__name__ == name
    assert name in module.__all__
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        getattr(module, "nope")
