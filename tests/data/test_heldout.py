"""The held-out set: its build on local fixture archives (no network) -- tests, docs, vendored
trees, filtered files, files without function bodies and duplicates dropped; corpus-format
output and a manifest without code; refusal (nothing written) on overlap with the corpus or
too few files --, the test / function heuristics, the pins' well-formedness and disjointness
from the corpus and private pins, and the committed manifest agreeing with the pins."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from umbra.data import heldout_sources
from umbra.data.config import DataConfig
from umbra.data.contamination import check_disjoint, source_of
from umbra.data.corpus import LANGS, Document, read_documents, write_documents
from umbra.data.debian import DebianPin
from umbra.data.dedup import content_sha256
from umbra.data.heldout import HeldoutConfig, build_heldout, check_pins, count_functions, is_test_or_doc
from umbra.data.manifest import read_rows, read_summary
from umbra.data.private import FetchedSource, debian_reader, sdist_reader
from umbra.data.private_sources import PinnedSdist
from umbra.errors import ConfigError

from .archives import code_text, write_deb, write_tarball

REPO = Path(__file__).resolve().parents[2]
INTERFACE = "interface Shape {\n" + "".join(f"    double area{i}(double scale);\n" for i in range(8)) + "}\n"


def _fetched(tmp_path: Path) -> list[FetchedSource]:
    py = {f"heldpkg/m{i}.py": code_text(i) for i in range(5)}
    py |= {"tests/test_m.py": code_text(50), "heldpkg/test_x.py": code_text(51), "docs/conf.py": code_text(52),
           "heldpkg/_vendor/six.py": code_text(53),  # vendored: never a candidate
           "heldpkg/one.py": "def only(value):\n    return value * 2\n\n\nCONSTANTS = ['a', 'b', 'c']\n",  # one def
           "heldpkg/z_copy.py": code_text(0)}  # duplicate of m0 (read after it: sorted)
    sdist = write_tarball(tmp_path / "heldpkg-2.0.tar.gz", "heldpkg-2.0", py)
    pkg = PinnedSdist("heldpkg", "2.0", "MIT", "0" * 64)
    root = "usr/share/gocode/src/example.org/held/"
    go = {f"{root}f{i}.go": code_text(300 + i, "go", 12).encode() for i in range(4)}
    go |= {f"{root}f0_test.go": code_text(310, "go").encode(), f"{root}testdata/t.go": code_text(311, "go").encode()}
    deb = write_deb(tmp_path / "golang-held-dev_1.0-1_all.deb", go)
    java = {f"src/main/java/org/held/F{i}.java": code_text(400 + i, "java", 20) for i in range(3)}
    java |= {"src/test/java/org/held/FTest.java": code_text(410, "java"), "src/main/java/org/held/Shape.java": INTERFACE}
    orig = write_tarball(tmp_path / "libheld-java_1.0.orig.tar.xz", "libheld-1.0", java, mode="w:xz")
    go_pin = DebianPin("golang-held-dev", "1.0-1", "pool/main/g/" + deb.name, "1" * 64, "BSD-3-Clause")
    java_pin = DebianPin("libheld-java", "1:1.0-1", "pool/main/libh/" + orig.name, "2" * 64, "Apache-2.0")
    return [  # not in language order: the build orders them
        FetchedSource("go", go_pin.source_id, go_pin.version, "BSD-3-Clause", deb.name, "1" * 64,
                      debian_reader("go", deb, go_pin)),
        FetchedSource("python", "pypi/heldpkg-2.0", "2.0", "MIT", sdist.name, "0" * 64, sdist_reader(sdist, pkg)),
        FetchedSource("java", java_pin.source_id, java_pin.version, "Apache-2.0", orig.name, "2" * 64,
                      debian_reader("java", orig, java_pin)),
    ]


def _corpus(root: Path, python_train: list[Document] | None = None) -> Path:
    """A fixture corpus: one unrelated file per split and language (seeds 1000..), plus `python_train`."""
    corpus = root / "data" / "corpus"
    for s, split in enumerate(("train", "valid", "test", "reserved")):
        for k, lang in enumerate(LANGS):
            docs = [Document(lang, f"pypi/other-1.0/{split}/{lang}", code_text(1000 + 10 * s + k, lang))]
            if (split, lang) == ("train", "python"):
                docs += python_train or []
            write_documents(corpus, split, lang, docs)
    # Built private text: the check reads it instead of downloading the private domains' archives.
    write_documents(corpus / "private", "train", "python", [Document("python", "pypi/priv-1.0/p.py", code_text(2000))])
    return corpus


def test_build_selects_writes_the_corpus_format_and_a_manifest_without_code(tmp_path):
    corpus = _corpus(tmp_path)
    summary = build_heldout(DataConfig(root=tmp_path), HeldoutConfig(min_files=3), _fetched(tmp_path))
    langs = summary["languages"]
    assert {lang: v["files"] for lang, v in langs.items()} == {"python": 5, "java": 3, "go": 4}
    assert langs["python"]["dropped"] == {"duplicate_exact": 1, "few_functions": 1, "test_or_doc": 3}
    assert langs["python"]["candidate_files"] == 10  # the vendored file is never a candidate
    assert langs["java"]["dropped"] == {"few_functions": 1, "test_or_doc": 1}
    assert langs["go"]["dropped"] == {"test_or_doc": 1}  # testdata/ is skipped by the reader
    assert summary["sources"]["deb/libheld-java-1.0-1"] | {"files": 0} == {
        "lang": "java", "version": "1:1.0-1", "license": "Apache-2.0", "archive": "libheld-java_1.0.orig.tar.xz",
        "sha256": "2" * 64, "files": 0, "bytes": langs["java"]["bytes"]}
    check = summary["contamination_check"]
    assert (check["corpus_documents"], check["extra"], check["overlaps"]) == (13, None, 0)

    out = tmp_path / "data" / "heldout"
    for lang in LANGS:
        lines = (out / f"{lang}.jsonl").read_text(encoding="utf-8").splitlines()
        assert all(set(json.loads(line)) == {"path", "text"} for line in lines)
        assert len(lines) == langs[lang]["files"]
    docs = [d for lang in LANGS for d in read_documents(out.parent, "heldout", lang)]
    paths = {d.path for d in docs}
    assert "pypi/heldpkg-2.0/heldpkg/m1.py" in paths and "pypi/heldpkg-2.0/heldpkg/z_copy.py" not in paths
    assert "deb/golang-held-dev-1.0-1/example.org/held/f0.go" in paths
    assert "deb/libheld-java-1.0-1/src/main/java/org/held/F0.java" in paths
    assert not any("test" in p.lower() or "docs/" in p or "_vendor" in p for p in paths)

    manifest = tmp_path / "data" / "manifest"
    rows = read_rows(manifest / "heldout.tsv")
    assert {(r.path, r.sha256, r.source) for r in rows} == {(d.path, content_sha256(d.text), source_of(d.path)) for d in docs}
    for name in ("heldout.tsv", "heldout_summary.json"):
        assert "return" not in (manifest / name).read_text()
    assert read_summary(manifest / "heldout_summary.json")["languages"] == langs
    check_disjoint(corpus, out)  # the written set passes the check the trainer runs

    again = build_heldout(DataConfig(root=tmp_path), HeldoutConfig(min_files=3), _fetched(tmp_path))
    assert again == summary  # deterministic rebuild


def test_overlap_with_the_corpus_refuses_and_writes_nothing(tmp_path):
    _corpus(tmp_path, [Document("python", "pypi/other-1.0/lifted.py", code_text(3))])  # = heldpkg/m3.py
    with pytest.raises(ConfigError, match=r"\(exact 1\): pypi/heldpkg-2\.0/heldpkg/m3\.py is an exact copy of "
                                          r"pypi/other-1\.0/lifted\.py"):
        build_heldout(DataConfig(root=tmp_path), HeldoutConfig(min_files=3), _fetched(tmp_path))
    assert not (tmp_path / "data" / "heldout").exists()
    assert not (tmp_path / "data" / "manifest" / "heldout.tsv").exists()


def test_pinned_exclusions_are_dropped_and_must_name_a_pinned_source(tmp_path, monkeypatch):
    _corpus(tmp_path)
    monkeypatch.setattr(heldout_sources, "HELDOUT_EXCLUDED", {"pypi/heldpkg-2.0/heldpkg/m2.py": "a reason"})
    summary = build_heldout(DataConfig(root=tmp_path), HeldoutConfig(min_files=3), _fetched(tmp_path))
    assert summary["languages"]["python"]["files"] == 4 and summary["languages"]["python"]["dropped"]["excluded"] == 1
    assert "pypi/heldpkg-2.0/heldpkg/m2.py" not in {r.path for r in read_rows(tmp_path / "data/manifest/heldout.tsv")}
    monkeypatch.setattr(heldout_sources, "HELDOUT_EXCLUDED", {"pypi/unpinned-1.0/a.py": "a reason"})
    with pytest.raises(ConfigError, match="not a file of a pinned source"):
        check_pins()


def test_too_few_files_refuses_naming_the_languages(tmp_path):
    _corpus(tmp_path)
    with pytest.raises(ConfigError, match=r">= 5 files per language, got \{'java': 3, 'go': 4\}"):
        build_heldout(DataConfig(root=tmp_path), HeldoutConfig(min_files=5), _fetched(tmp_path))
    assert not (tmp_path / "data" / "heldout").exists()


def test_settings_are_validated(tmp_path):
    for bad in (HeldoutConfig(min_files=0), HeldoutConfig(min_functions=-1), HeldoutConfig(manifest_name="x.tsv")):
        with pytest.raises(ConfigError, match="min_files|min_functions|start with 'heldout'"):
            build_heldout(DataConfig(root=tmp_path), bad, fetched=[])


def test_is_test_or_doc():
    for rel in ("tests/a.py", "pkg/test/b.py", "pkg/test_c.py", "conftest.py", "x/y_test.go", "docs/conf.py",
                "src/test/java/a/BTest.java", "src/main/java/a/CTests.java", "Doc/x.py", "a/testdata/z.go"):
        assert is_test_or_doc(rel), rel
    for rel in ("pkg/testing_utils.py", "pkg/contest.py", "pkg/attest.go", "src/main/java/a/Tester.java",
                "pkg/doctools.py", "examples/demo.py"):
        assert not is_test_or_doc(rel), rel


def test_count_functions():
    assert count_functions("python", "def a():\n    pass\n\nclass B:\n    async def c(self):\n        pass\n") == 2
    assert count_functions("go", "package p\n\nfunc A() {}\n\nfunc (t T) B() int {\n\treturn 1\n}\n") == 2
    java = ("public class A {\n    @Override\n    public void run()\n    {\n        if (x) {\n        }\n    }\n"
            "    public A(int a,\n             int b) throws IOException {\n    }\n    abstract int f(int x);\n"
            "    private final Map<String, String> m = new HashMap<>();\n    } catch (Exception e) {\n"
            "    } else if (y) {\n    Runnable r = new Runnable() {\n"
            "    static <T> List<T> g(Class<T> c) { return null; }\n}\n")
    assert count_functions("java", java) == 3  # run, the constructor, g
    assert count_functions("java", INTERFACE) == 0


def test_pins_are_well_formed_and_outside_the_corpus_and_the_private_domains(monkeypatch):
    check_pins()
    pypi, go, java = heldout_sources.HELDOUT_PYPI, heldout_sources.HELDOUT_GO_DEBS, heldout_sources.HELDOUT_JAVA_ORIGS
    assert len(pypi) >= 6 and len(go) >= 5 and len(java) >= 5
    for pin in go:
        assert pin.filename.startswith("pool/main/g/") and pin.filename.endswith(f"_{pin.version.split(':')[-1]}_all.deb")
    for pin in java:
        assert pin.filename.startswith("pool/main/") and ".orig.tar." in pin.filename
    clashes = {"HELDOUT_PYPI": [PinnedSdist("Flask", "9.0", "BSD-3-Clause", "a" * 64),  # pretraining, other version
                                PinnedSdist("celery", "1.0", "BSD-3-Clause", "a" * 64),  # private domain
                                PinnedSdist("asyncio", "1.0", "MIT", "a" * 64)],  # standard library
               "HELDOUT_GO_DEBS": [DebianPin("golang-github-spf13-cobra-dev", "9.9-1", "pool/main/g/c.deb", "a" * 64, "MIT")],
               "HELDOUT_JAVA_ORIGS": [DebianPin("commons-io", "9.9-1", "pool/main/c/c.orig.tar.xz", "a" * 64, "MIT")]}
    for attr, pins in clashes.items():
        for pin in pins:
            monkeypatch.setattr(heldout_sources, attr, (pin,))
            with pytest.raises(ConfigError, match="is a project of the corpus, the private domains or the stdlib"):
                check_pins()
        monkeypatch.undo()
    malformed = {"HELDOUT_PYPI": (PinnedSdist("newpkg", "1.0", "MIT", "A" * 64),),
                 "HELDOUT_GO_DEBS": (DebianPin("golang-new-dev", "1-1", "dists/x.deb", "a" * 64, "MIT"),),
                 "HELDOUT_JAVA_ORIGS": (DebianPin("libnew-java", "1-1", "pool/main/l/libnew-java_1.debian.tar.xz",
                                                  "a" * 64, "MIT"),)}
    for attr, pins in malformed.items():
        monkeypatch.setattr(heldout_sources, attr, pins)
        with pytest.raises(ConfigError, match="64 hex|pool/main|orig tarball"):
            check_pins()
        monkeypatch.undo()
    monkeypatch.setattr(heldout_sources, "HELDOUT_PYPI", pypi + (pypi[0],))
    with pytest.raises(ConfigError, match="name a project twice"):
        check_pins()


def test_committed_manifest_agrees_with_the_pins():
    manifest = REPO / "data" / "manifest"
    rows = read_rows(manifest / "heldout.tsv")
    summary = read_summary(manifest / "heldout_summary.json")
    pins = {f"pypi/{p.name}-{p.version}": (p.version, p.license, p.sha256) for p in heldout_sources.HELDOUT_PYPI}
    pins |= {p.source_id: (p.version, p.license, p.sha256)
             for p in (*heldout_sources.HELDOUT_GO_DEBS, *heldout_sources.HELDOUT_JAVA_ORIGS)}
    assert set(summary["sources"]) == set(pins) == {r.source for r in rows}  # every pin has files
    for source, info in summary["sources"].items():
        assert (info["version"], info["license"], info["sha256"]) == pins[source]
        mine = [r for r in rows if r.source == source]
        assert (info["files"], info["bytes"]) == (len(mine), sum(r.bytes for r in mine))
        assert all(r.path.startswith(source + "/") and r.lang == info["lang"] for r in mine)
    per_lang = Counter(r.lang for r in rows)
    for lang in LANGS:
        assert summary["languages"][lang]["files"] == per_lang[lang] >= summary["min_files"] >= 150
        assert summary["languages"][lang]["bytes"] == sum(r.bytes for r in rows if r.lang == lang)
    assert len({r.path for r in rows}) == len(rows) and len({r.sha256 for r in rows}) == len(rows)
    check = summary["contamination_check"]
    assert check["overlaps"] == 0 and {"data/manifest/train.tsv", "data/manifest/private/train.tsv"} <= set(check["manifests"])
