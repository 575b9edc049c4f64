"""A small world for the adaptive-attack tests (tests/attacks/test_oracle.py,
tests/attack_grid/test_shadow.py): a tiny random model, a templated Python corpus (train split:
public code; test split: the client's code) and the client's prompts, as in
tests/attacks/test_attacks_suite.py."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import numpy as np
from tiny_models import build_tiny_model_dir

from umbra.attack_grid.clients import Defence, build_client
from umbra.attack_grid.traffic import inference_traffic
from umbra.attacks.probe import ProbeConfig
from umbra.attacks.public import CorpusSample, PublicModel
from umbra.attacks.recorder import RecordingMiddle
from umbra.data.corpus import Document, write_documents
from umbra.middle.local import LocalMiddle

NAMES = ["alpha", "beta", "gamma", "delta", "path", "value", "items", "count", "total", "name", "data", "key"]
TEMPLATES = [
    "def {a}({b}, {c}):\n    return {b} + {c}\n",
    "for {a} in range({n}):\n    print({a}, {b})\n",
    "class {A}:\n    def __init__(self, {a}):\n        self.{a} = {a}\n",
    "{a} = [{b} * {b} for {b} in {c} if {b} % 2 == 0]\n",
    "import os\nif os.path.exists({a}):\n    {b} = open({a}).read()\n",
    "{a} = {{}}\n{a}[{b}] = {a}.get({b}, 0) + {n}\n",
]
PROBE = ProbeConfig(hidden=128, epochs=15)


def document(rng: random.Random) -> str:
    """One templated Python file (12 snippets)."""
    parts = []
    for _ in range(12):
        a, b, c = rng.sample(NAMES, 3)
        parts.append(rng.choice(TEMPLATES).format(a=a, b=b, c=c, A=a.title(), n=rng.randint(1, 99)))
    return "\n".join(parts)


def build_world(root: Path) -> tuple[PublicModel, CorpusSample, np.ndarray, np.ndarray]:
    """(public model, the attacker's public sample, the client's prompts, held-out client files)."""
    build_tiny_model_dir(root / "model", family="qwen2-tied")
    rng = random.Random(0)
    for split, n in (("train", 60), ("test", 100)):
        write_documents(root / "corpus", split, "python",
                        [Document("python", f"{split}/{i}.py", document(rng)) for i in range(n)])
    public = PublicModel(root / "model")
    sample = CorpusSample(root / "corpus", langs=("python",), block_length=32, blocks=120)
    test = public.sample_blocks(CorpusSample(root / "corpus", "test", ("python",), 32, 96, seed=1, per_document=1))
    return public, sample, test[:16], test[16:]  # one block per file: prompts and held-out files are disjoint


def prompts_of(public: PublicModel, defence: Defence, prompts: np.ndarray, seed: int = 0):
    """(the client, what the cloud recorded of its prompts, with the truth attached)."""
    client = build_client(public.dir, defence, public.plan, seed=seed)
    return client, recorded(public, client, prompts)


def recorded(public: PublicModel, client, prompts: np.ndarray):
    rec = RecordingMiddle(LocalMiddle(public.middle))
    asyncio.run(inference_traffic(client, rec, prompts))
    return rec.sequences()
