"""The audit tests' small world: a tiny model with StarCoder FIM tokens, a public corpus (train
split) and a source file to complete, and the `umbra` CLI run for real in a subprocess."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

from tiny_models import CODE_SNIPPETS, build_tiny_model_dir

from umbra.data.corpus import Document, write_documents
from umbra.paths import repo_root

SOURCE = "import os\n\n\ndef load_settings(path):\n    if os.path.exists(path):\n        return open(path).read()\n"


def make_world(root: Path) -> Path:
    build_tiny_model_dir(root / "model", family="llama", style="starcoder")
    rng = random.Random(0)
    docs = [Document("python", f"{i}.py", "".join(rng.sample(CODE_SNIPPETS, 3))) for i in range(40)]
    write_documents(root / "corpus", "train", "python", docs)
    (root / "src.py").write_text(SOURCE)
    return root


def umbra_cli(*args, env=None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m umbra.cli.main ARGS` with no cloud or bundle inherited from the environment."""
    env = {**os.environ, **(env or {})}
    for name in ("UMBRA_CLOUD_URL", "UMBRA_CLOUD_TOKEN", "UMBRA_BUNDLE"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "umbra.cli.main", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=repo_root())
