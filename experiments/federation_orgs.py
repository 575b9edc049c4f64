"""The organizations of the federation benchmark (experiments/federation.py): natural, non-IID splits
of the private code (docs/data.md, "Private domains") — one organization = one PyPI project of the
private Python domain (code the default model never saw), with its own canaries.

Projects with enough files shorter than `max_chars` are ordered by sha256(seed, project) and the
first N taken, so the 3 organizations are among the 10, and the 10 among the 30; when fewer projects
have enough short files than N asks (30 organizations at 3,000 characters: 24 do), the others follow
in the same order, topped up with their shortest longer files. In each project, its files are ordered
by sha256(seed, path): the first `heldout` are its ordinary held-out code (never trained on, no
canary), the next `query` its query set Q (fusion, eq. 7), the next `files` its training code.
Canaries (umbra/evaluation/canaries.py: API keys, internal hosts `*.corp.<org>.internal`, e-mails
`*@<org>.example`, which the scrubber removes, and project codenames and account numbers, which no
rule-based scrubber finds; each planted 1, 4 and 16 times) go into the training and query files, as in
experiments/securegate.py (Q holds the organization's secrets at their natural rate)."""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from umbra.data.corpus import Document
from umbra.evaluation.canaries import ALL_KINDS, CanaryConfig, PlantedCorpus, plant_canaries

CORPUS = Path(__file__).resolve().parents[1] / "data/corpus/private/train/python.jsonl"


@dataclass(frozen=True)
class OrgSpec:
    files: int = 16  # training files per organization (>= 16: a canary is planted in 16 of them)
    query: int = 2  # files of its query set Q
    heldout: int = 2  # files of its ordinary held-out code
    max_chars: int = 4000  # only files shorter than this
    per_group: int = 2  # canaries per (kind, repeats) group: 30 per organization with the 5 kinds
    kinds: tuple[str, ...] = ALL_KINDS  # canary kinds planted (canaries.KINDS: only those the scrubber removes)

    def __post_init__(self) -> None:
        CanaryConfig(kinds=tuple(self.kinds), per_group=self.per_group).validate()  # ConfigError if not
        object.__setattr__(self, "kinds", tuple(self.kinds))


@dataclass(frozen=True)
class Org:
    name: str  # a DNS label: the project's name ("scikit-learn")
    project: str  # the corpus directory ("scikit-learn-1.9.1")
    planted: PlantedCorpus  # the training and query files with the canaries, and the ground truth
    train: tuple[Document, ...]  # the raw training files (canaries in)
    query: tuple[Document, ...]  # the raw query files (canaries in)
    heldout: tuple[Document, ...]  # ordinary code, never trained on


def _project(path: str) -> str:
    return path.split("/")[1]


def org_name(project: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", project.rsplit("-", 1)[0].lower()).strip("-")[:31]


def _order(seed: int, key: str) -> bytes:
    return hashlib.sha256(f"{seed}:{key}".encode()).digest()


_CACHE: dict = {}


def _projects(max_chars: int) -> dict[str, list[Document]]:
    if max_chars not in _CACHE:
        by = defaultdict(list)
        with CORPUS.open(encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                if len(r["text"]) < max_chars:
                    by[_project(r["path"])].append(Document("python", r["path"], r["text"]))
        _CACHE[max_chars] = dict(by)
    return _CACHE[max_chars]


def organizations(n: int, spec: OrgSpec, seed: int) -> list[Org]:
    """The first `n` organizations (ValueError if the corpus has fewer projects big enough)."""
    need = spec.files + spec.query + spec.heldout
    small = {p: d for p, d in _projects(spec.max_chars).items() if len(d) >= need}
    chosen = sorted(small, key=lambda p: _order(seed, p))[:n]
    if len(chosen) < n:  # too few projects have enough short files: top others up with their shortest ones
        every = _projects(1 << 30)
        more = sorted((p for p, d in every.items() if p not in small and len(d) >= need), key=lambda p: _order(seed, p))
        if len(chosen) + len(more) < n:
            raise ValueError(f"only {len(chosen) + len(more)} projects have {need} files")
        for p in more[: n - len(chosen)]:
            chosen.append(p)
            short = [d for d in every[p] if len(d.text) < spec.max_chars]
            longer = sorted((d for d in every[p] if len(d.text) >= spec.max_chars), key=lambda d: len(d.text))
            small[p] = short + longer[: need - len(short)]
    out = []
    for i, project in enumerate(chosen):
        docs = sorted(small[project], key=lambda d: _order(seed, d.path))[:need]
        held, query, train = docs[: spec.heldout], docs[spec.heldout: spec.heldout + spec.query], docs[-spec.files:]
        name = org_name(project)
        planted = plant_canaries(train + query, CanaryConfig(org=name, kinds=spec.kinds,
                                                             per_group=spec.per_group, seed=seed * 1000 + i))
        in_query = {d.path for d in query}
        out.append(Org(name, project, planted, tuple(d for d in planted.documents if d.path not in in_query),
                       tuple(d for d in planted.documents if d.path in in_query), tuple(held)))
    return out
