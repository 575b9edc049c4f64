"""Repository-level training units: 2-4 small files of one directory packed as one sequence.

A unit renders as

    <file_sep> path_1 \\n text_1 <file_sep> path_2 \\n text_2 ... <file_sep> path_n \\n FIM(text_n)

and the packer ends it with <|endoftext|>. Only the last file may be FIM-transformed (drawn
exactly as a single document's FIM), so the model learns to fill in a file with its neighbours
(same directory: same package) in context. Which documents form units is a pure function of
the epoch's generator; every document still appears exactly once per epoch."""

from __future__ import annotations

import posixpath
from collections import defaultdict

import numpy as np

from umbra.data.corpus import Document
from umbra.training.config import FimConfig, RepoConfig
from umbra.training.fim import fim_transform, render

Item = tuple[int, ...]  # document indices: one for a single document, 2-4 for a unit


def directory_groups(docs: list[Document], max_unit_chars: int) -> list[list[int]]:
    """Indices of the documents small enough for a unit, grouped by (language, directory);
    only directories with at least two such files, in sorted order (deterministic)."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, d in enumerate(docs):
        if len(d.text) <= max_unit_chars:
            groups[(d.lang, posixpath.dirname(d.path))].append(i)
    return [groups[k] for k in sorted(groups) if len(groups[k]) >= 2]


def cut_chunks(docs: list[Document], group: list[int], cfg: RepoConfig,
               rng: np.random.Generator) -> list[Item]:
    """One directory's files, shuffled, cut into chunks of min..max files and at most
    `cfg.max_unit_chars` characters; chunks smaller than `cfg.min_files` are dropped."""
    chunks: list[Item] = []
    chunk: list[int] = []
    total, size = 0, int(rng.integers(cfg.min_files, cfg.max_files + 1))
    for j in rng.permutation(len(group)):
        idx, n = group[j], len(docs[group[j]].text)
        if chunk and (len(chunk) == size or total + n > cfg.max_unit_chars):
            chunks.append(tuple(chunk))
            chunk, total, size = [], 0, int(rng.integers(cfg.min_files, cfg.max_files + 1))
        chunk.append(idx)
        total += n
    chunks.append(tuple(chunk))
    return [c for c in chunks if len(c) >= cfg.min_files]


def draw_units(docs: list[Document], groups: list[list[int]], cfg: RepoConfig,
               rng: np.random.Generator) -> list[Item]:
    """Chunks of every directory, each kept with the probability that puts about `cfg.rate` of
    all documents into units (all of them when fewer documents can form units)."""
    chunks = [c for group in groups for c in cut_chunks(docs, group, cfg, rng)]
    in_chunks = sum(len(c) for c in chunks)
    keep = min(1.0, cfg.rate * len(docs) / in_chunks) if in_chunks else 0.0
    draws = rng.random(len(chunks))
    return [c for c, u in zip(chunks, draws) if u < keep]


def epoch_items(docs: list[Document], groups: list[list[int]], cfg: RepoConfig | None,
                seed: int, epoch: int) -> list[Item]:
    """The epoch's sequence of items (units and single documents), each document exactly once.
    Without repo units (cfg None or rate 0) this is the plain seeded document permutation."""
    if cfg is None or cfg.rate <= 0:
        return [(int(i),) for i in np.random.default_rng([seed, epoch]).permutation(len(docs))]
    units = draw_units(docs, groups, cfg, np.random.default_rng([seed, epoch, 2]))
    grouped = {i for u in units for i in u}
    items = units + [(i,) for i in range(len(docs)) if i not in grouped]
    return [items[j] for j in np.random.default_rng([seed, epoch]).permutation(len(items))]


def render_item(docs: list[Document], item: Item, fim: FimConfig, file_sep: str,
                rng: np.random.Generator) -> list[str]:
    """Segments of one item (sentinel strings are whole segments). A single document renders as
    before repo units existed; a unit gets path headers and FIM on its last file only."""
    if len(item) == 1:
        return render(fim_transform(docs[item[0]].text, fim, rng))
    segments: list[str] = []
    for k, idx in enumerate(item):
        segments += [file_sep, docs[idx].path + "\n"]
        text = docs[idx].text
        segments += render(fim_transform(text, fim, rng)) if k == len(item) - 1 else [text]
    return segments
