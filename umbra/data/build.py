"""`umbra data build`: collect, filter, dedup, cap, reserve, split; write corpus + manifests."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Iterator

from umbra.data import collect, sources
from umbra.data.config import DataConfig
from umbra.data.corpus import LANGS, Document, write_documents
from umbra.data.dedup import Deduplicator, content_sha256
from umbra.data.filters import reject_reason
from umbra.data.manifest import ManifestRow, read_summary, write_rows, write_summary
from umbra.data.pypi import fetch_all
from umbra.data.split import RESERVED, SPLITS, assign_split, cap_order, is_reserved
from umbra.errors import ConfigError

log = logging.getLogger(__name__)

GO_RESERVED_MAX_SHARE = 1 / 20  # Go's reserved slice is at most 1/20 of Python's (bytes)


def ensure_system_sources(install: bool) -> None:
    """Install golang-src / openjdk-17-source with apt-get when their trees are missing."""
    missing = [pkg for path, pkg in ((sources.GO_SRC_ROOT, "golang-src"),
                                     (sources.JDK_SRC_ZIP, "openjdk-17-source"))
               if not os.path.exists(path)]
    if not missing:
        return
    if not install or shutil.which("apt-get") is None:
        raise ConfigError(f"missing Debian packages {missing}; run apt-get install {' '.join(missing)}")
    # apt is often busy on a fresh machine (unattended-upgrades): the install waits for the dpkg
    # lock, and the lists update, which takes no lock timeout, is retried for a few minutes.
    _run_apt(["apt-get", "update"], attempts=6)
    _run_apt(["apt-get", "install", "-o", "DPkg::Lock::Timeout=600", "-y", *missing], attempts=1)


def _run_apt(cmd: list[str], attempts: int, pause_s: float = 30.0) -> None:
    for attempt in range(attempts):
        if subprocess.run(cmd, check=False).returncode == 0:
            return
        if attempt + 1 < attempts:
            time.sleep(pause_s)
    raise ConfigError(f"`{' '.join(cmd)}` failed")


def candidate_files(cfg: DataConfig, archives: dict) -> Iterator[tuple[collect.SourceFile, str]]:
    """Every candidate file with its license, in a fixed source order."""
    yield from ((f, sources.PY_STDLIB_LICENSE) for f in collect.python_stdlib_files())
    for pkg in sources.PYPI_PACKAGES:
        yield from ((f, pkg.license) for f in collect.sdist_files(archives[pkg.name][0], pkg))
    yield from ((f, sources.GO_LICENSE) for f in collect.go_files())
    yield from ((f, sources.JDK_LICENSE) for f in collect.java_files())


def build_corpus(cfg: DataConfig, install_missing: bool = True) -> dict:
    """Build the corpus and manifests; return the summary that is also written to disk."""
    ensure_system_sources(install_missing)
    dedup = Deduplicator()
    rejected: dict[str, Counter] = defaultdict(Counter)
    licenses: dict[str, tuple[str, str]] = {}  # source -> (language, license)
    candidates: Counter = Counter()
    kept: dict[str, list[collect.SourceFile]] = defaultdict(list)
    archives = fetch_all(sources.PYPI_PACKAGES, cfg.path(cfg.cache_dir))
    for f, license_id in candidate_files(cfg, archives):
        licenses[f.source] = (f.lang, license_id)
        candidates[f.lang] += 1
        reason = reject_reason(f.text, cfg.filters) or dedup.classify(f.text)
        if reason is not None:
            rejected[f.lang][reason] += 1
        else:
            kept[f.lang].append(f)
    splits: dict[str, dict[str, list[collect.SourceFile]]] = defaultdict(lambda: defaultdict(list))
    capped: Counter = Counter()
    for lang in LANGS:
        by_path = {f.path: f for f in kept[lang]}
        budget = cfg.byte_caps.get(lang)
        used = 0
        for path in cap_order(cfg.seed, sorted(by_path)):
            f = by_path[path]
            if is_reserved(lang, path):
                splits[RESERVED][lang].append(f)
                continue
            size = len(f.text.encode("utf-8"))
            if budget is not None and used + size > budget:
                capped[lang] += 1
                continue
            used += size
            split = assign_split(cfg.seed, path, cfg.valid_fraction, cfg.test_fraction)
            splits[split][lang].append(f)
    summary = _summarize(cfg, splits, candidates, rejected, capped, licenses, dedup)
    summary["sdists"] = {p.name: {"version": p.version, "license": p.license,
                                  "file": archives[p.name][0].name, "sha256": archives[p.name][1]}
                         for p in sources.PYPI_PACKAGES}
    _check_balance(summary)
    _write_outputs(cfg, splits, summary)
    return summary


def _nbytes(files: list[collect.SourceFile]) -> int:
    return sum(len(f.text.encode("utf-8")) for f in files)


def _summarize(cfg, splits, candidates, rejected, capped, licenses, dedup) -> dict:
    per_source: dict[str, Counter] = defaultdict(Counter)
    for split in (*SPLITS, RESERVED):
        for files in splits[split].values():
            for f in files:
                per_source[f.source]["files"] += 1
                per_source[f.source]["bytes"] += len(f.text.encode("utf-8"))
    langs = {}
    for lang in LANGS:
        langs[lang] = {
            "candidate_files": candidates[lang],
            "rejected": dict(sorted(rejected[lang].items())),
            "capped_files": capped[lang],
            "splits": {s: {"files": len(splits[s][lang]), "bytes": _nbytes(splits[s][lang])}
                       for s in (*SPLITS, RESERVED)},
        }
    src = {}
    for source, counts in sorted(per_source.items()):
        lang, license_id = licenses[source]
        src[source] = {"lang": lang, "license": license_id, **counts}
    return {
        "seed": cfg.seed,
        "valid_fraction": cfg.valid_fraction,
        "test_fraction": cfg.test_fraction,
        "byte_caps": cfg.byte_caps,
        "dedup": {"exact": dedup.stats.exact, "near": dedup.stats.near},
        "languages": langs,
        "sources": src,
    }


def _check_balance(summary: dict) -> None:
    langs = summary["languages"]
    train = {lang: langs[lang]["splits"]["train"]["bytes"] for lang in LANGS}
    if max(train, key=train.get) != "python":
        raise ConfigError(f"Python must be the largest training domain, got bytes {train}")
    reserved = {lang: langs[lang]["splits"][RESERVED]["bytes"] for lang in LANGS}
    if max(reserved, key=reserved.get) != "python":
        raise ConfigError(f"Python's reserved slice must be the largest, got bytes {reserved}")
    if reserved["go"] > GO_RESERVED_MAX_SHARE * reserved["python"]:
        raise ConfigError(f"Go's reserved slice must be >= 20x smaller than Python's: {reserved}")


def _write_outputs(cfg: DataConfig, splits, summary: dict) -> None:
    corpus_dir, manifest_dir = cfg.path(cfg.corpus_dir), cfg.path(cfg.manifest_dir)
    changed = False
    for split in (*SPLITS, RESERVED):
        rows = []
        for lang in LANGS:
            files = splits[split][lang]
            write_documents(corpus_dir, split, lang, [Document(lang, f.path, f.text) for f in files])
            rows += [ManifestRow(lang, f.source, f.path, content_sha256(f.text),
                                 len(f.text.encode("utf-8"))) for f in files]
        changed |= write_rows(manifest_dir / f"{split}.tsv", rows)
    _carry_token_stats(manifest_dir, summary, changed)
    write_summary(manifest_dir / "summary.json", summary)
    log.info("corpus written to %s, manifests to %s", corpus_dir, manifest_dir)


TOKEN_STAT_KEYS = ("tokens", "tokenizer_vocab_size")  # written by `umbra data stats`


def _carry_token_stats(manifest_dir, summary: dict, manifests_changed: bool) -> None:
    """A rebuild that reproduces the same manifests keeps `umbra data stats`' token counts
    (they describe the same files); a changed corpus drops them until stats runs again."""
    path = manifest_dir / "summary.json"
    if manifests_changed or not path.exists():
        return
    previous = read_summary(path)
    summary.update({k: previous[k] for k in TOKEN_STAT_KEYS if k in previous})
