"""Well-known locations inside the repository checkout.

The default model ships embedded in the repo at `models/umbra-code-deep` (16 layers; the 8-layer
`models/umbra-code-tiny` it grew from ships beside it for the tests and experiments); every command that
takes `--model DIR` falls back to it. `UMBRA_MODEL_DIR` overrides the default (not an explicit
`--model`)."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_MODEL_NAME = "umbra-code-deep"


def repo_root() -> Path:
    """The checkout that holds this package (umbra/ sits directly under it)."""
    return Path(__file__).resolve().parent.parent


def default_model_dir() -> Path:
    """`$UMBRA_MODEL_DIR` if set, else `<repo>/models/umbra-code-deep`."""
    env = os.environ.get("UMBRA_MODEL_DIR")
    return Path(env) if env else repo_root() / "models" / DEFAULT_MODEL_NAME
