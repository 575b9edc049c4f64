"""`umbra data private`: the per-language private domains (code the pretrained model never saw).

Pipeline: fetch the pinned sources (umbra/data/private_sources.py; sha256 verified), read every
candidate file, drop it by the pretraining filters (umbra/data/filters.py), then as a duplicate
of the pretraining corpus (all of its splits, reserved included: exact bytes, whitespace-stripped
text, MinHash near duplicate) or of an earlier private file; cap each language's bytes in a
seeded hash order; split train / test by the seeded path hash; check the size constraints; write
`data/corpus/private/{train,test}/<lang>.jsonl` and the manifests `data/manifest/private/`.

The privacy unit is one document = one file: every file is one training example, and
near-duplicate files are removed so that one file's content is (as far as MinHash sees) in one
document only."""

from __future__ import annotations

import logging
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from umbra.data import debian, private_sources, sources
from umbra.data.collect import SourceFile, is_vendored, sdist_files
from umbra.data.config import DataConfig
from umbra.data.corpus import LANGS, Document, corpus_file, read_documents, write_documents
from umbra.data.dedup import DedupIndex, content_sha256
from umbra.data.filters import reject_reason
from umbra.data.manifest import ManifestRow, write_rows, write_summary
from umbra.data.near_dup import MinHasher
from umbra.data.pypi import DownloadError, fetch_sdist
from umbra.data.split import RESERVED, SPLITS, assign_split, cap_order
from umbra.errors import ConfigError

log = logging.getLogger(__name__)

PRIVATE_SPLITS = ("train", "test")
PRETRAINING_SPLITS = (*SPLITS, RESERVED)  # every split of the pretraining corpus


@dataclass(frozen=True)
class FetchedSource:
    lang: str  # "python" | "java" | "go"
    source: str  # source id, the prefix of its corpus paths
    version: str  # pinned version
    license: str  # SPDX id
    archive: str  # file name of the verified archive
    sha256: str  # its digest
    files: Callable[[], Iterator[SourceFile]]  # reads the candidate files out of the archive


def validate(cfg: DataConfig) -> None:
    """The private-domain settings cover every language with usable values."""
    pcfg = cfg.private
    for lang in LANGS:
        fraction, cap = pcfg.test_fractions.get(lang), pcfg.byte_caps.get(lang, None)
        if fraction is None or not 0.0 < fraction < 1.0:
            raise ConfigError(f"private test fraction of {lang} must be in (0, 1), got {fraction}")
        if cap is not None and cap <= 0:
            raise ConfigError(f"private byte cap of {lang} must be positive or None, got {cap}")
    if pcfg.min_test_docs < 1 or pcfg.min_python_to_go_bytes < 1.0:
        raise ConfigError(f"min_test_docs ({pcfg.min_test_docs}) and min_python_to_go_bytes "
                          f"({pcfg.min_python_to_go_bytes}) must be >= 1")


def check_pins() -> None:
    """Private Python packages must be outside the pretraining corpus and the standard library."""
    def norm(name: str) -> str:
        return name.lower().replace("-", "_")

    pretraining = {norm(p.name) for p in sources.PYPI_PACKAGES}
    for pkg in private_sources.PRIVATE_PYPI:
        if norm(pkg.name) in pretraining or norm(pkg.name) in sys.stdlib_module_names:
            raise ConfigError(f"private package {pkg.name} is in the pretraining corpus or the stdlib")


def sdist_reader(archive: Path, pkg: private_sources.PinnedSdist) -> Callable[[], Iterator[SourceFile]]:
    """Reads the non-vendored .py files of an sdist."""
    prefix = f"pypi/{pkg.name}-{pkg.version}/"
    return lambda: (f for f in sdist_files(archive, pkg) if not is_vendored(f.path[len(prefix):]))


def debian_reader(lang: str, archive: Path, pin: debian.DebianPin) -> Callable[[], Iterator[SourceFile]]:
    """Reads the .go files of a golang-*-dev .deb (lang "go") or the .java files of an orig tarball."""
    def read() -> Iterator[SourceFile]:
        pairs = debian.deb_go_sources(archive) if lang == "go" else debian.tarball_sources(archive, ".java")
        for rel, text in pairs:
            yield SourceFile(lang, pin.source_id, f"{pin.source_id}/{rel}", text)
    return read


def fetch_sources(cfg: DataConfig) -> list[FetchedSource]:
    """Download (or find in the cache) every pinned archive, verified against its sha256."""
    check_pins()
    return fetch_pinned(cfg, private_sources.PRIVATE_PYPI, private_sources.PRIVATE_JAVA_ORIGS,
                        private_sources.PRIVATE_GO_DEBS)


def fetch_pinned(cfg: DataConfig, pypi, java_origs, go_debs) -> list[FetchedSource]:
    """Download (or find in the cache) pinned PyPI sdists, Java orig tarballs and Go .debs,
    each verified against its sha256 (the private domains' and the held-out set's sources)."""
    cache = cfg.path(cfg.cache_dir)
    out: list[FetchedSource] = []
    with httpx.Client(timeout=300.0, follow_redirects=True) as client:
        for pkg in pypi:
            archive, digest = fetch_sdist(pkg, cache, client)
            if digest != pkg.sha256:
                raise DownloadError(f"{archive.name}: sha256 {digest} != pinned {pkg.sha256}")
            out.append(FetchedSource("python", f"pypi/{pkg.name}-{pkg.version}", pkg.version, pkg.license,
                                     archive.name, digest, sdist_reader(archive, pkg)))
        for lang, pins in (("java", java_origs), ("go", go_debs)):
            for pin in pins:
                archive = debian.fetch_pinned(pin, cache / "debian", client)
                out.append(FetchedSource(lang, pin.source_id, pin.version, pin.license, archive.name,
                                         pin.sha256, debian_reader(lang, archive, pin)))
    return out


def require_pretraining_corpus(cfg: DataConfig) -> Path:
    """The pretraining corpus directory; ConfigError naming the missing files if incomplete."""
    corpus_dir = cfg.path(cfg.corpus_dir)
    missing = [str(corpus_file(corpus_dir, s, lang)) for s in PRETRAINING_SPLITS for lang in LANGS
               if not corpus_file(corpus_dir, s, lang).exists()]
    if missing:
        raise ConfigError(f"the pretraining corpus is missing ({', '.join(missing)}): run `umbra data build` "
                          "first; the private domains are deduplicated against all of its splits")
    return corpus_dir


def pretraining_index(corpus_dir: Path, hasher: MinHasher) -> tuple[DedupIndex, dict]:
    """Every file of every split of the pretraining corpus, indexed for dedup."""
    index = DedupIndex(hasher.cfg)
    stats: dict[str, dict[str, int]] = {s: {"files": 0, "bytes": 0} for s in PRETRAINING_SPLITS}
    for split in PRETRAINING_SPLITS:
        for lang in LANGS:
            for doc in read_documents(corpus_dir, split, lang):
                index.add(lang, doc.text, hasher.signature(doc.text))
                stats[split]["files"] += 1
                stats[split]["bytes"] += len(doc.text.encode("utf-8"))
    log.info("pretraining reference: %d files indexed", index.files)
    return index, stats


def _duplicate(reference: DedupIndex, domain: DedupIndex, f: SourceFile, sig) -> str | None:
    """Why `f` is a duplicate ("pretraining_exact", ..., "private_minhash"), or None."""
    for prefix, index in (("pretraining", reference), ("private", domain)):
        kind = index.match(f.lang, f.text, sig)
        if kind is not None:
            return f"{prefix}_{kind}"
    return None


def select_files(cfg: DataConfig, fetched: Iterable[FetchedSource], reference: DedupIndex,
                 hasher: MinHasher) -> tuple[dict, dict]:
    """Filter, dedup (against `reference`, then within the domain), cap and split.
    Returns ({split: {lang: [SourceFile]}}, per-language statistics)."""
    domain = DedupIndex(hasher.cfg)
    stats = {lang: {"candidate_files": 0, "rejected": Counter(), "duplicates": Counter(), "capped_files": 0}
             for lang in LANGS}
    kept: dict[str, list[SourceFile]] = defaultdict(list)
    for src in sorted(fetched, key=lambda s: LANGS.index(s.lang)):  # stable: list order within a language
        before = len(kept[src.lang])
        for f in src.files():
            st = stats[f.lang]
            st["candidate_files"] += 1
            reason = reject_reason(f.text, cfg.filters)
            if reason is not None:
                st["rejected"][reason] += 1
                continue
            sig = hasher.signature(f.text)
            dup = _duplicate(reference, domain, f, sig)
            if dup is not None:
                st["duplicates"][dup] += 1
                continue
            domain.add(f.lang, f.text, sig)
            kept[f.lang].append(f)
        log.info("%s: %d files kept", src.source, len(kept[src.lang]) - before)
    pcfg = cfg.private
    splits: dict[str, dict[str, list[SourceFile]]] = {s: defaultdict(list) for s in PRIVATE_SPLITS}
    for lang in LANGS:
        by_path = {f.path: f for f in kept[lang]}
        budget, used = pcfg.byte_caps.get(lang), 0
        for path in cap_order(cfg.seed, sorted(by_path)):
            size = len(by_path[path].text.encode("utf-8"))
            if budget is not None and used + size > budget:
                stats[lang]["capped_files"] += 1
                continue
            used += size
            split = assign_split(cfg.seed, path, 0.0, pcfg.test_fractions[lang])
            splits[split][lang].append(by_path[path])
    return splits, stats


def _nbytes(files: list[SourceFile]) -> int:
    return sum(len(f.text.encode("utf-8")) for f in files)


def check_constraints(languages: dict, min_test_docs: int, min_python_to_go: float) -> None:
    """Python is the largest domain, Java in between, Go >= `min_python_to_go` x smaller than
    Python (train bytes); every test split holds >= `min_test_docs` files. ConfigError otherwise."""
    train = {lang: languages[lang]["splits"]["train"]["bytes"] for lang in LANGS}
    tests = {lang: languages[lang]["splits"]["test"]["files"] for lang in LANGS}
    if not train["python"] > train["java"] > train["go"] > 0:
        raise ConfigError(f"private train bytes must order python > java > go > 0, got {train}")
    if train["python"] < min_python_to_go * train["go"]:
        raise ConfigError(f"Go's private train split ({train['go']:,} B) must be >= {min_python_to_go:g}x "
                          f"smaller than Python's ({train['python']:,} B)")
    short = {lang: n for lang, n in tests.items() if n < min_test_docs}
    if short:
        raise ConfigError(f"private test splits need >= {min_test_docs} files, got {short} (raise the "
                          "test fraction or add sources)")


def summarize(cfg: DataConfig, fetched: list[FetchedSource], splits: dict, stats: dict,
              reference: dict) -> dict:
    pcfg = cfg.private
    per_source: dict[str, Counter] = defaultdict(Counter)
    for split in PRIVATE_SPLITS:
        for files in splits[split].values():
            for f in files:
                per_source[f.source][f"{split}_files"] += 1
                per_source[f.source]["bytes"] += len(f.text.encode("utf-8"))
    languages = {lang: {"candidate_files": st["candidate_files"], "rejected": dict(sorted(st["rejected"].items())),
                        "duplicates": dict(sorted(st["duplicates"].items())), "capped_files": st["capped_files"],
                        "splits": {s: {"files": len(splits[s][lang]), "bytes": _nbytes(splits[s][lang])}
                                   for s in PRIVATE_SPLITS}}
                 for lang, st in stats.items()}
    return {
        "privacy_unit": "one document = one file",
        "seed": cfg.seed,
        "test_fractions": pcfg.test_fractions,
        "byte_caps": pcfg.byte_caps,
        "min_test_docs": pcfg.min_test_docs,
        "min_python_to_go_bytes": pcfg.min_python_to_go_bytes,
        "minhash": asdict(pcfg.minhash),
        "pretraining_reference": reference,
        "languages": languages,
        "sources": {s.source: {"lang": s.lang, "version": s.version, "license": s.license, "archive": s.archive,
                               "sha256": s.sha256, "train_files": per_source[s.source]["train_files"],
                               "test_files": per_source[s.source]["test_files"],
                               "bytes": per_source[s.source]["bytes"]}
                    for s in fetched},
    }


def write_outputs(cfg: DataConfig, splits: dict, summary: dict) -> None:
    corpus_dir = cfg.path(cfg.corpus_dir) / cfg.private.subdir
    manifest_dir = cfg.path(cfg.manifest_dir) / cfg.private.subdir
    for split in PRIVATE_SPLITS:
        rows = []
        for lang in LANGS:
            files = splits[split][lang]
            write_documents(corpus_dir, split, lang, [Document(lang, f.path, f.text) for f in files])
            rows += [ManifestRow(lang, f.source, f.path, content_sha256(f.text), len(f.text.encode("utf-8")))
                     for f in files]
        write_rows(manifest_dir / f"{split}.tsv", rows)
    write_summary(manifest_dir / "summary.json", summary)
    log.info("private corpus written to %s, manifests to %s", corpus_dir, manifest_dir)


def build_private_domains(cfg: DataConfig, fetched: list[FetchedSource] | None = None) -> dict:
    """Build the private domains; `fetched` defaults to the pinned sources (downloaded)."""
    validate(cfg)
    hasher = MinHasher(cfg.private.minhash)
    corpus_dir = require_pretraining_corpus(cfg)
    fetched = fetch_sources(cfg) if fetched is None else fetched
    reference, reference_stats = pretraining_index(corpus_dir, hasher)
    splits, stats = select_files(cfg, fetched, reference, hasher)
    summary = summarize(cfg, fetched, splits, stats, reference_stats)
    check_constraints(summary["languages"], cfg.private.min_test_docs, cfg.private.min_python_to_go_bytes)
    write_outputs(cfg, splits, summary)
    return summary
