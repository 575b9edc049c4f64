"""`umbra data heldout`: a held-out set of third-party code that no model here trained on, for
the line-completion benchmark.

Pipeline: fetch the pinned sources (umbra/data/heldout_sources.py; sha256 verified, the readers
of the private domains: vendored trees and Go testdata skipped), drop the pinned exclusions,
tests and docs, the files the corpus filters reject (umbra/data/filters.py), files with fewer
than `min_functions` function definitions and exact / whitespace duplicates within the set;
check every language keeps `min_files`; run the contamination check
(umbra/data/contamination.py) against the corpus manifests, the corpus text where built and,
without built private text, the private domains' pinned archives -- any overlap refuses the
set; write
`data/heldout/<lang>.jsonl` (the corpus format) and the committed manifest
`data/manifest/heldout.tsv` + `heldout_summary.json` (paths, sha256, counts; no code)."""

from __future__ import annotations

import logging
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from umbra.data import heldout_sources, private, private_sources, sources
from umbra.data.config import DataConfig, MinHashConfig
from umbra.data.contamination import find_overlaps, overlap_error, project_key, source_of
from umbra.data.corpus import LANGS, Document, write_documents
from umbra.data.dedup import Deduplicator, content_sha256
from umbra.data.filters import reject_reason
from umbra.data.manifest import ManifestRow, write_rows, write_summary
from umbra.data.private import FetchedSource
from umbra.errors import ConfigError

log = logging.getLogger(__name__)

_SHA256 = re.compile(r"[0-9a-f]{64}")
_TEST_DIRS = frozenset({"test", "tests", "testing", "testdata", "testutil", "testutils", "test_utils"})
_DOC_DIRS = frozenset({"doc", "docs"})
_PY_DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+\w+[ \t]*\(", re.MULTILINE)
_GO_FUNC = re.compile(r"^func[ \t]", re.MULTILINE)
# A Java method or constructor header: a line opening `[modifiers] Type name(`, whose `{` comes
# (within _JAVA_HEAD_LINES lines, before any `;`) right after `)` or a throws clause.
_JAVA_DECL = re.compile(r"[\w$<>\[\],.?@ \t]*[\w$>\]][ \t]+[\w$]+[ \t]*\(")
_JAVA_CONTROL = re.compile(r"\W*(?:if|for|while|switch|catch|else|try|do|synchronized|return|new|throw|case)\b")
_JAVA_HEAD_END = re.compile(r"\)\s*(?:throws\s+[\w$.,<>\s]+)?$")
_JAVA_HEAD_LINES = 6


@dataclass
class HeldoutConfig:
    out_dir: Path = Path("data/heldout")  # gitignored held-out text, one <lang>.jsonl per language
    manifest_name: str = "heldout.tsv"  # under DataConfig.manifest_dir: lang, source, path, sha256, bytes
    summary_name: str = "heldout_summary.json"  # under DataConfig.manifest_dir: counts, pins, check
    min_functions: int = 2  # fewer function / method definitions than this: little to complete
    min_files: int = 150  # every language keeps at least this many files, or the build fails
    near_dup: bool = True  # MinHash check against the corpus text (where data/corpus is built)
    # Without data/corpus/private/, also check against every file of the private domains' pinned
    # archives (a superset of the private domains; downloaded into the cache like the build does).
    private_archives: bool = True
    minhash: MinHashConfig | None = None  # MinHash settings (None: DataConfig.private.minhash)


def validate(hcfg: HeldoutConfig) -> None:
    if hcfg.min_functions < 0 or hcfg.min_files < 1:
        raise ConfigError(f"held-out min_functions ({hcfg.min_functions}) must be >= 0 and min_files "
                          f"({hcfg.min_files}) >= 1")
    for name in (hcfg.manifest_name, hcfg.summary_name):
        if not name.startswith("heldout"):  # the contamination check skips heldout* manifests only
            raise ConfigError(f"held-out manifest names must start with 'heldout', got {name!r}")


def check_pins() -> None:
    """Well-formed pins (unique, 64-hex sha256, pool paths, licenses) whose projects are neither
    in the pretraining corpus, nor in the private domains, nor standard-library modules."""
    used = {project_key(f"pypi/{p.name}-{p.version}") for p in (*sources.PYPI_PACKAGES, *private_sources.PRIVATE_PYPI)}
    used |= {project_key(p.source_id) for p in (*private_sources.PRIVATE_GO_DEBS, *private_sources.PRIVATE_JAVA_ORIGS)}
    used |= {project_key(name) for name in sys.stdlib_module_names}
    mine: list[tuple[str, str, str, str]] = [(f"pypi/{p.name}-{p.version}", p.sha256, p.license, "")
                                             for p in heldout_sources.HELDOUT_PYPI]
    mine += [(p.source_id, p.sha256, p.license, p.filename)
             for p in (*heldout_sources.HELDOUT_GO_DEBS, *heldout_sources.HELDOUT_JAVA_ORIGS)]
    keys = [project_key(source) for source, *_ in mine]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"held-out pins name a project twice: {sorted(k for k, n in Counter(keys).items() if n > 1)}")
    for (source, sha256, license_id, filename), key in zip(mine, keys):
        if key in used:
            raise ConfigError(f"held-out source {source} is a project of the corpus, the private domains or the stdlib")
        if not _SHA256.fullmatch(sha256) or not license_id:
            raise ConfigError(f"held-out pin {source}: sha256 must be 64 hex digits and the license set")
        if source.startswith("deb/") and not filename.startswith("pool/main/"):
            raise ConfigError(f"held-out pin {source}: {filename!r} is not a path under pool/main/")
    for path, reason in heldout_sources.HELDOUT_EXCLUDED.items():
        if source_of(path) not in {source for source, *_ in mine} or not reason:
            raise ConfigError(f"held-out exclusion {path} is not a file of a pinned source, or has no reason")
    for pin in heldout_sources.HELDOUT_GO_DEBS:
        if not (pin.package.startswith("golang-") and pin.package.endswith("-dev") and pin.filename.endswith(".deb")):
            raise ConfigError(f"held-out Go pin {pin.package} must be a golang-*-dev .deb")
    for pin in heldout_sources.HELDOUT_JAVA_ORIGS:
        if ".orig.tar." not in pin.filename:
            raise ConfigError(f"held-out Java pin {pin.package} must be an orig tarball")


def fetch_sources(cfg: DataConfig) -> list[FetchedSource]:
    """Download (or find in the cache) every pinned archive, verified against its sha256."""
    check_pins()
    return private.fetch_pinned(cfg, heldout_sources.HELDOUT_PYPI, heldout_sources.HELDOUT_JAVA_ORIGS,
                                heldout_sources.HELDOUT_GO_DEBS)


def is_test_or_doc(rel: str) -> bool:
    """A test (test directories, test_*.py, *_test.go, *Test.java, ...) or documentation file."""
    parts = rel.split("/")
    if any(d.lower() in _TEST_DIRS or d.lower() in _DOC_DIRS for d in parts[:-1]):
        return True
    name = parts[-1]
    stem = name.rsplit(".", 1)[0]
    return (name.startswith("test_") or stem.endswith("_test") or name == "conftest.py"
            or stem.endswith(("Test", "Tests", "TestCase")))


def count_functions(lang: str, text: str) -> int:
    """Function / method definitions (Java: method and constructor headers, `{` on the same or a
    later line; an abstract or interface method without a body does not count)."""
    if lang == "python":
        return len(_PY_DEF.findall(text))
    if lang == "go":
        return len(_GO_FUNC.findall(text))
    lines = text.splitlines()
    n = 0
    for i, line in enumerate(lines):
        s = line.strip()
        if not _JAVA_DECL.match(s) or _JAVA_CONTROL.match(s):
            continue
        head = " ".join(x.strip() for x in lines[i:i + _JAVA_HEAD_LINES])
        brace, semi = head.find("{"), head.find(";")
        if brace != -1 and (semi == -1 or brace < semi) and _JAVA_HEAD_END.search(head[:brace].rstrip()):
            n += 1
    return n


def select_files(cfg: DataConfig, hcfg: HeldoutConfig, fetched: list[FetchedSource]) -> tuple[dict, dict]:
    """({lang: [Document]}, {lang: {"candidate_files", "dropped": {reason: n}}}) in pin order."""
    dedup = Deduplicator()
    kept: dict[str, list[Document]] = defaultdict(list)
    stats = {lang: {"candidate_files": 0, "dropped": Counter()} for lang in LANGS}
    for src in sorted(fetched, key=lambda s: LANGS.index(s.lang)):  # stable: pin order within a language
        for f in src.files():
            st = stats[f.lang]
            st["candidate_files"] += 1
            if f.path in heldout_sources.HELDOUT_EXCLUDED:
                reason = "excluded"
            elif is_test_or_doc(f.path[len(src.source) + 1:]):
                reason = "test_or_doc"
            elif (reason := reject_reason(f.text, cfg.filters)) is None:
                if count_functions(f.lang, f.text) < hcfg.min_functions:
                    reason = "few_functions"
                elif (dup := dedup.classify(f.text)) is not None:
                    reason = f"duplicate_{dup}"
            if reason is not None:
                st["dropped"][reason] += 1
            else:
                kept[f.lang].append(Document(f.lang, f.path, f.text))
    short = {lang: len(kept[lang]) for lang in LANGS if len(kept[lang]) < hcfg.min_files}
    if short:
        raise ConfigError(f"the held-out set needs >= {hcfg.min_files} files per language, got {short}: "
                          "add pins to umbra/data/heldout_sources.py")
    return dict(kept), stats


def private_archive_documents(cfg: DataConfig) -> Iterator[Document]:
    """Every candidate file of the private domains' pinned archives (sha256 verified)."""
    for src in private.fetch_sources(cfg):
        yield from (Document(f.lang, f.path, f.text) for f in src.files())


def _nbytes(docs: list[Document]) -> int:
    return sum(len(d.text.encode("utf-8")) for d in docs)


def _rel(cfg: DataConfig, path: str) -> str:
    p = Path(path)
    try:
        return p.relative_to(cfg.root).as_posix()
    except ValueError:
        return p.as_posix()


def summarize(cfg: DataConfig, hcfg: HeldoutConfig, fetched: list[FetchedSource], kept: dict, stats: dict,
              check: dict) -> dict:
    per_source: dict[str, list[Document]] = defaultdict(list)
    for docs in kept.values():
        for d in docs:
            per_source[source_of(d.path)].append(d)
    return {
        "min_functions": hcfg.min_functions,
        "min_files": hcfg.min_files,
        "languages": {lang: {"candidate_files": st["candidate_files"], "dropped": dict(sorted(st["dropped"].items())),
                             "files": len(kept[lang]), "bytes": _nbytes(kept[lang])}
                      for lang, st in stats.items()},
        "sources": {s.source: {"lang": s.lang, "version": s.version, "license": s.license, "archive": s.archive,
                               "sha256": s.sha256, "files": len(per_source[s.source]),
                               "bytes": _nbytes(per_source[s.source])} for s in fetched},
        "contamination_check": {"manifests": [_rel(cfg, p) for p in check["manifests"]],
                                "manifest_rows": check["manifest_rows"],
                                "corpus_files": [_rel(cfg, p) for p in check["corpus_files"]],
                                "corpus_documents": check["corpus_documents"], "extra": check["extra"],
                                "extra_documents": check["extra_documents"], "near_dup": check["near_dup"],
                                "overlaps": 0},
    }


def build_heldout(cfg: DataConfig, hcfg: HeldoutConfig | None = None,
                  fetched: list[FetchedSource] | None = None) -> dict:
    """Build, check and write the held-out set; `fetched` defaults to the pinned sources (downloaded).
    Nothing is written when a language is short of files or the set overlaps the corpus."""
    hcfg = hcfg or HeldoutConfig()
    validate(hcfg)
    fetched = fetch_sources(cfg) if fetched is None else fetched
    kept, stats = select_files(cfg, hcfg, fetched)
    out_dir = cfg.path(hcfg.out_dir)
    manifest_dir = cfg.path(cfg.manifest_dir)
    docs = [d for lang in LANGS for d in kept[lang]]
    corpus_dir = cfg.path(cfg.corpus_dir)
    extra = None
    if hcfg.private_archives and not any((corpus_dir / cfg.private.subdir).rglob("*.jsonl")):
        extra = ("private-domain archives", private_archive_documents(cfg))
    overlaps, check = find_overlaps(docs, corpus_dir, manifest_dir, out_dir, near_dup=hcfg.near_dup,
                                    minhash=hcfg.minhash or cfg.private.minhash, extra=extra)
    if overlaps:
        raise overlap_error(overlaps, out_dir)
    rows = []
    for lang in LANGS:
        write_documents(out_dir.parent, out_dir.name, lang, kept[lang])
        rows += [ManifestRow(lang, source_of(d.path), d.path, content_sha256(d.text),
                             len(d.text.encode("utf-8"))) for d in kept[lang]]
    write_rows(manifest_dir / hcfg.manifest_name, rows)
    summary = summarize(cfg, hcfg, fetched, kept, stats, check)
    write_summary(manifest_dir / hcfg.summary_name, summary)
    log.info("held-out set written to %s, manifest to %s", out_dir, manifest_dir / hcfg.manifest_name)
    return summary
