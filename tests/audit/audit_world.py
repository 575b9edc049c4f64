"""The audit tests' small world: a tiny model with StarCoder FIM tokens, a public corpus (train
split) and a source file to complete, and the `umbra` CLI: its entry point in-process with its own
stdin/stdout/stderr (tests/cli_helpers.py), or the console program in a subprocess."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

from cli_helpers import umbra_in_process, umbra_subprocess
from tiny_models import CODE_SNIPPETS, build_tiny_model_dir

from umbra.data.corpus import Document, write_documents

SOURCE = "import os\n\n\ndef load_settings(path):\n    if os.path.exists(path):\n        return open(path).read()\n"


def make_world(root: Path) -> Path:
    build_tiny_model_dir(root / "model", family="llama", style="starcoder")
    rng = random.Random(0)
    docs = [Document("python", f"{i}.py", "".join(rng.sample(CODE_SNIPPETS, 3))) for i in range(40)]
    write_documents(root / "corpus", "train", "python", docs)
    (root / "src.py").write_text(SOURCE)
    return root


def umbra_cli(*args, env=None, timeout: float = 600, in_process: bool = True) -> subprocess.CompletedProcess:
    """`umbra ARGS` with no cloud or bundle inherited from the environment: in-process, or with
    in_process=False `python -m umbra.cli.main ARGS` in a subprocess."""
    env = {"UMBRA_CLOUD_URL": None, "UMBRA_CLOUD_TOKEN": None, "UMBRA_BUNDLE": None, **(env or {})}
    if in_process:
        return umbra_in_process(*args, env=env)
    return umbra_subprocess(*args, env=env, timeout=timeout)
