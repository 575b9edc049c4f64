"""Contamination check: the held-out set (`umbra data heldout`) shares nothing with the code the
models here train on -- neither a source project (any version) nor a file.

The reference is everything that is at hand:
- the committed manifests (`data/manifest/**/*.tsv`, the held-out's own `heldout*` files
  excepted): every file's source id and the sha256 of its text -- the pretraining splits
  (train / valid / test / reserved) and the private domains;
- the corpus text (`data/corpus/**/<lang>.jsonl`) where it has been built: each file's source id,
  exact text, whitespace-stripped text and, with `near_dup`, its MinHash signature
  (umbra/data/near_dup.py, the settings the private domains are deduplicated with);
- optionally, extra reference text (`umbra data heldout` passes the files of the private
  domains' pinned archives when data/corpus/private/ is not built).

A held-out file overlaps when its text is an exact copy, a whitespace variant or a MinHash near
duplicate of a reference file; a held-out source overlaps when a reference source is the same
project (`project_key`: name without version and without Debian packaging affixes)."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from umbra.data.config import MinHashConfig
from umbra.data.corpus import LANGS, Document, corpus_file, read_documents
from umbra.data.dedup import content_sha256, normalized_sha256
from umbra.data.manifest import read_rows
from umbra.data.near_dup import MinHasher, MinHashIndex
from umbra.errors import ConfigError

log = logging.getLogger(__name__)

HELDOUT_PREFIX = "heldout"  # manifests named heldout* describe the held-out set itself
_PYPI = re.compile(r"pypi/(?P<name>.+)-(?P<version>[^-/]+)")
_DEB = re.compile(r"deb/(?P<name>[a-z0-9][a-z0-9+.-]*?)-(?P<version>\d[^/]*)")
_OTHER = re.compile(r"(?P<name>[^/]+?)(?:-\d[^/]*)?")
_DEB_PREFIXES = ("golang-", "python3-", "lib")
_DEB_SUFFIXES = ("-dev", "-java")
_SHOWN = 3  # overlaps named in the error message
_KIND_TEXT = {"project": "the same project as", "exact": "an exact copy of",
              "whitespace": "a whitespace variant of", "minhash": "a near duplicate (MinHash) of"}


@dataclass(frozen=True)
class Overlap:
    kind: str  # "project" | "exact" | "whitespace" | "minhash"
    heldout: str  # held-out source id ("project") or file path
    reference: str  # the reference source id or file path it overlaps
    where: str  # the manifest or corpus file the reference was read from

    def describe(self) -> str:
        return f"{self.heldout} is {_KIND_TEXT[self.kind]} {self.reference} ({self.where})"


def source_of(path: str) -> str:
    """The source id a corpus path is prefixed with: `pypi/<name>-<version>` and
    `deb/<package>-<version>` span two components, standard-library ids (`go-1.19`) one."""
    parts = path.split("/")
    return "/".join(parts[:2]) if parts[0] in ("pypi", "deb") and len(parts) > 1 else parts[0]


def project_key(source: str) -> str:
    """The project a source id stands for, version dropped: `pypi/Mako-1.4.3` -> `mako`,
    `deb/libcommons-jexl3-java-3.1-3` -> `commons-jexl3`, `deb/golang-github-x-y-dev-1.0-1` ->
    `github-x-y`, `go-1.19` -> `go`. Names are lower-cased with runs of `-_.` folded to `-`."""
    if (m := _PYPI.fullmatch(source)) is not None:
        name = m["name"]
    elif (m := _DEB.fullmatch(source)) is not None:
        name = m["name"]
        for prefix in _DEB_PREFIXES:
            name = name.removeprefix(prefix)
        for suffix in _DEB_SUFFIXES:
            name = name.removesuffix(suffix)
    else:
        name = _OTHER.fullmatch(source)["name"]
    return re.sub(r"[-_.]+", "-", name.lower())


def read_heldout(heldout_dir: Path) -> list[Document]:
    """Every held-out document (`<heldout_dir>/<lang>.jsonl`, all languages); ConfigError when the
    set is missing, lacks a language or has an empty language file."""
    hint = "run `umbra data heldout`"
    present = [lang for lang in LANGS if corpus_file(heldout_dir.parent, heldout_dir.name, lang).exists()]
    if not present:
        raise ConfigError(f"no held-out set in {heldout_dir} (no <lang>.jsonl files): {hint}")
    missing = [lang for lang in LANGS if lang not in present]
    if missing:
        raise ConfigError(f"the held-out set in {heldout_dir} lacks {', '.join(missing)}: {hint}")
    docs = []
    for lang in LANGS:
        these = list(read_documents(heldout_dir.parent, heldout_dir.name, lang))
        if not these:
            raise ConfigError(f"the held-out set in {heldout_dir} is empty ({lang}.jsonl has no files): {hint}")
        docs += these
    return docs


class _Heldout:
    """The held-out documents indexed by project, exact hash, whitespace hash and MinHash."""

    def __init__(self, docs: list[Document], hasher: MinHasher | None) -> None:
        self.projects: dict[str, str] = {project_key(source_of(d.path)): source_of(d.path) for d in docs}
        self.exact = {content_sha256(d.text): d.path for d in docs}
        self.whitespace = {normalized_sha256(d.text): d.path for d in docs}
        self.hasher = hasher
        self.minhash: dict[str, tuple[MinHashIndex, list[str]]] = {}
        if hasher is not None:
            for d in docs:
                index, paths = self.minhash.setdefault(d.lang, (MinHashIndex(hasher.cfg), []))
                index.add(hasher.signature(d.text))
                paths.append(d.path)


class _Found:
    """Overlaps collected so far: one per held-out source (projects) and per held-out file."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str], Overlap] = {}

    def add(self, overlap: Overlap) -> None:
        key = ("project" if overlap.kind == "project" else "file", overlap.heldout)
        self.by_key.setdefault(key, overlap)


def _check_source(held: _Heldout, found: _Found, source: str, where: str) -> None:
    mine = held.projects.get(project_key(source))
    if mine is not None:
        found.add(Overlap("project", mine, source, where))


def _check_text(held: _Heldout, found: _Found, doc: Document, where: str) -> None:
    for kind, table, digest in (("exact", held.exact, content_sha256(doc.text)),
                                ("whitespace", held.whitespace, normalized_sha256(doc.text))):
        if digest in table:
            found.add(Overlap(kind, table[digest], doc.path, where))
            return
    if held.hasher is not None and doc.lang in held.minhash:
        index, paths = held.minhash[doc.lang]
        match = index.best_match(held.hasher.signature(doc.text))
        if match is not None and match[1] >= held.hasher.cfg.threshold:
            found.add(Overlap("minhash", paths[match[0]], doc.path, where))


def _check_texts(held: _Heldout, found: _Found, docs: Iterable[Document], where: str) -> int:
    """Check every reference document (its source once); return how many there were."""
    seen: set[str] = set()
    n = 0
    for doc in docs:
        source = source_of(doc.path)
        if source not in seen:
            seen.add(source)
            _check_source(held, found, source, where)
        _check_text(held, found, doc, where)
        n += 1
    return n


def _reference_files(root: Path, pattern: str, exclude: Path) -> list[Path]:
    if not root.is_dir():
        return []
    skip = exclude.resolve()
    return [p for p in sorted(root.rglob(pattern))
            if not p.name.startswith(HELDOUT_PREFIX) and skip not in p.resolve().parents]


def find_overlaps(docs: list[Document], corpus_dir: Path, manifest_dir: Path, heldout_dir: Path, *,
                  near_dup: bool = True, minhash: MinHashConfig | None = None,
                  extra: tuple[str, Iterable[Document]] | None = None) -> tuple[list[Overlap], dict]:
    """Overlaps of `docs` with the manifests under `manifest_dir`, the corpus text under
    `corpus_dir` (files under `heldout_dir` excepted) and the `extra` (name, documents) reference
    text, and what was checked. ConfigError when there is no reference at all."""
    if not docs:
        raise ConfigError("the held-out set is empty: nothing to check")
    held = _Heldout(docs, MinHasher(minhash or MinHashConfig()) if near_dup else None)
    found = _Found()
    stats: dict = {"manifests": [], "manifest_rows": 0, "corpus_files": [], "corpus_documents": 0,
                   "extra": None, "extra_documents": 0, "near_dup": near_dup}
    for tsv in _reference_files(manifest_dir, "*.tsv", heldout_dir):
        rows = read_rows(tsv)
        for row in rows:
            _check_source(held, found, row.source, str(tsv))
            if row.sha256 in held.exact:
                found.add(Overlap("exact", held.exact[row.sha256], row.path, str(tsv)))
        stats["manifests"].append(str(tsv))
        stats["manifest_rows"] += len(rows)
    for jsonl in _reference_files(corpus_dir, "*.jsonl", heldout_dir):
        if jsonl.stem not in LANGS:
            continue
        stats["corpus_documents"] += _check_texts(held, found, read_documents(jsonl.parent.parent, jsonl.parent.name,
                                                                              jsonl.stem), str(jsonl))
        stats["corpus_files"].append(str(jsonl))
    if extra is not None:
        stats["extra"] = extra[0]
        stats["extra_documents"] = _check_texts(held, found, extra[1], extra[0])
    if stats["manifest_rows"] + stats["corpus_documents"] + stats["extra_documents"] == 0:
        raise ConfigError(f"nothing to check the held-out set against: no corpus manifests in {manifest_dir} "
                          f"and no corpus text in {corpus_dir} (run `umbra data build`)")
    log.info("contamination check: %d manifest rows, %d corpus documents, near_dup=%s, %d overlaps",
             stats["manifest_rows"], stats["corpus_documents"], near_dup, len(found.by_key))
    return list(found.by_key.values()), stats


def overlap_error(overlaps: list[Overlap], heldout_dir: Path) -> ConfigError:
    """One line: how many overlaps of each kind, and the first few named."""
    counts = Counter(o.kind for o in overlaps)
    shown = "; ".join(o.describe() for o in overlaps[:_SHOWN])
    more = f"; and {len(overlaps) - _SHOWN} more" if len(overlaps) > _SHOWN else ""
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
    return ConfigError(f"the held-out set in {heldout_dir} overlaps the training data ({kinds}): {shown}{more}; "
                       "replace the overlapping pins in umbra/data/heldout_sources.py")


def check_disjoint(corpus_dir: Path, heldout_dir: Path, *, manifest_dir: Path | None = None,
                   near_dup: bool = True, minhash: MinHashConfig | None = None) -> None:
    """Raise ConfigError unless the held-out set in `heldout_dir` is disjoint from the corpus:
    no shared project, no exact / whitespace / (with `near_dup`) MinHash duplicate file. The
    reference is the corpus text under `corpus_dir` (every `<lang>.jsonl` below it) and the
    manifests under `manifest_dir` (default: `manifest` beside `corpus_dir`, i.e. data/manifest
    for data/corpus). A missing or empty held-out set is a ConfigError too."""
    corpus_dir, heldout_dir = Path(corpus_dir), Path(heldout_dir)
    manifest_dir = corpus_dir.parent / "manifest" if manifest_dir is None else Path(manifest_dir)
    docs = read_heldout(heldout_dir)
    overlaps, _ = find_overlaps(docs, corpus_dir, manifest_dir, heldout_dir, near_dup=near_dup, minhash=minhash)
    if overlaps:
        raise overlap_error(overlaps, heldout_dir)
