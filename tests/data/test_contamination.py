"""The contamination check on small synthetic corpora, manifests and held-out sets: overlap by
project (any version, Debian packaging affixes ignored), by exact text (manifest sha256 or corpus
text), by whitespace variant and by MinHash near duplicate; no overlap; the held-out set's own
manifests are no reference; missing / incomplete / empty held-out sets and a missing reference
are clear errors, also through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from umbra.data.contamination import check_disjoint, find_overlaps, project_key, read_heldout, source_of
from umbra.data.corpus import LANGS, Document, write_documents
from umbra.data.dedup import content_sha256
from umbra.data.manifest import ManifestRow, write_rows
from umbra.errors import ConfigError

from .archives import code_text, lightly_edited

HELD = {"python": "pypi/heldpkg-2.0", "java": "deb/libheld-java-1.0-1", "go": "deb/golang-github-held-x-dev-0.3-2"}


def _heldout(root: Path, extra: dict[str, list[Document]] | None = None) -> Path:
    """data/heldout/<lang>.jsonl: two files per language (seeds 10.. per language)."""
    out = root / "data" / "heldout"
    for k, lang in enumerate(LANGS):
        docs = [Document(lang, f"{HELD[lang]}/src/f{i}", code_text(10 + 10 * k + i, lang)) for i in range(2)]
        write_documents(out.parent, out.name, lang, docs + (extra or {}).get(lang, []))
    return out


def _corpus(root: Path, python_train: list[Document] | None = None) -> Path:
    """data/corpus/<split>/<lang>.jsonl with unrelated files (seeds 100..), plus `python_train`."""
    corpus = root / "data" / "corpus"
    for s, split in enumerate(("train", "valid", "test", "reserved")):
        for k, lang in enumerate(LANGS):
            docs = [Document(lang, f"pypi/other-1.0/{split}/{i}", code_text(100 + 10 * s + 3 * k + i, lang))
                    for i in range(2)]
            if (split, lang) == ("train", "python"):
                docs += python_train or []
            write_documents(corpus, split, lang, docs)
    return corpus


def _manifest(root: Path, rows: list[ManifestRow], name: str = "train.tsv") -> Path:
    manifest_dir = root / "data" / "manifest"
    write_rows(manifest_dir / name, rows)
    return manifest_dir


def _row(source: str, path: str, text: str) -> ManifestRow:
    return ManifestRow("python", source, path, content_sha256(text), len(text))


def test_project_key_and_source_of():
    assert project_key("pypi/Mako-1.4.3") == project_key("pypi/mako-0.1") == "mako"
    assert project_key("pypi/python_dateutil-4.0.0") == project_key("pypi/python-dateutil-2.8") == "python-dateutil"
    assert project_key("deb/libcommons-jexl3-java-3.1-3") == project_key("deb/commons-jexl3-3.2-1") == "commons-jexl3"
    assert project_key("deb/golang-github-x-y-dev-0.0~git2020.abc-2") == "github-x-y"
    assert project_key("deb/golang-gopkg-yaml.v3-dev-3.0.1-3") == "gopkg-yaml-v3"
    assert project_key("go-1.19") == "go" and project_key("cpython-3.11") == "cpython"
    assert project_key("deb/libcommons-lang3-java-3.12.0-2+deb12u1") != project_key("deb/libcommons-lang-java-2.6-10")
    assert source_of("pypi/flask-3.0.3/src/flask/app.py") == "pypi/flask-3.0.3"
    assert source_of("deb/jsoup-1.15.3-1/src/main/A.java") == "deb/jsoup-1.15.3-1"
    assert source_of("go-1.19/sort/sort.go") == "go-1.19"


def test_disjoint_set_passes_and_everything_was_read(tmp_path):
    heldout, corpus = _heldout(tmp_path), _corpus(tmp_path)
    manifest_dir = _manifest(tmp_path, [_row("pypi/other-1.0", "pypi/other-1.0/x.py", code_text(7))])
    _manifest(tmp_path, [_row("deb/other-java-1-1", "deb/other-java-1-1/A.java", code_text(8))], "private/train.tsv")
    check_disjoint(corpus, heldout)  # manifest_dir defaults to data/manifest beside data/corpus
    overlaps, stats = find_overlaps(read_heldout(heldout), corpus, manifest_dir, heldout)
    assert overlaps == []
    assert stats["manifest_rows"] == 2 and len(stats["manifests"]) == 2
    assert stats["corpus_documents"] == 4 * len(LANGS) * 2 and len(stats["corpus_files"]) == 12


def test_overlap_by_project_in_a_manifest(tmp_path):
    heldout, corpus = _heldout(tmp_path), _corpus(tmp_path)
    _manifest(tmp_path, [_row("pypi/HeldPkg-1.0", "pypi/HeldPkg-1.0/a.py", code_text(7))])  # another version
    with pytest.raises(ConfigError, match=r"pypi/heldpkg-2\.0 is the same project as pypi/HeldPkg-1\.0 "
                                          r"\(.*train\.tsv\)"):
        check_disjoint(corpus, heldout)


def test_overlap_by_debian_project_in_the_private_manifest(tmp_path):
    heldout, corpus = _heldout(tmp_path), _corpus(tmp_path)
    _manifest(tmp_path, [_row("deb/held-2.0-3", "deb/held-2.0-3/B.java", code_text(7))], "private/train.tsv")
    with pytest.raises(ConfigError, match=r"deb/libheld-java-1\.0-1 is the same project as deb/held-2\.0-3"):
        check_disjoint(corpus, heldout)


def test_overlap_by_project_in_the_corpus_text(tmp_path):
    heldout = _heldout(tmp_path)
    corpus = _corpus(tmp_path, [Document("python", "pypi/heldpkg-0.9/old.py", code_text(999))])
    with pytest.raises(ConfigError, match=r"same project as pypi/heldpkg-0\.9 \(.*train/python\.jsonl\)"):
        check_disjoint(corpus, heldout)


def test_overlap_by_exact_text_known_only_from_a_manifest(tmp_path):
    heldout = _heldout(tmp_path)  # no corpus text at all: the manifests are the whole reference
    copied = code_text(10)  # the text of the held-out file pypi/heldpkg-2.0/src/f0
    _manifest(tmp_path, [_row("pypi/other-1.0", "pypi/other-1.0/copied.py", copied)], "reserved.tsv")
    with pytest.raises(ConfigError, match=r"\(exact 1\): pypi/heldpkg-2\.0/src/f0 is an exact copy of "
                                          r"pypi/other-1\.0/copied\.py"):
        check_disjoint(tmp_path / "data" / "corpus", heldout)


def test_overlap_by_whitespace_variant_and_near_duplicate_in_the_corpus_text(tmp_path):
    heldout = _heldout(tmp_path)
    ws = Document("python", "pypi/other-1.0/ws.py", code_text(11).replace("    ", "\t"))
    corpus = _corpus(tmp_path, [ws])
    with pytest.raises(ConfigError, match=r"\(whitespace 1\): pypi/heldpkg-2\.0/src/f1 is a whitespace variant"):
        check_disjoint(corpus, heldout)

    near = Document("python", "pypi/other-1.0/near.py", lightly_edited(code_text(11)))
    corpus = _corpus(tmp_path, [near])
    with pytest.raises(ConfigError, match=r"\(minhash 1\): .*f1 is a near duplicate \(MinHash\) of .*near\.py"):
        check_disjoint(corpus, heldout)
    check_disjoint(corpus, heldout, near_dup=False)  # only MinHash sees an edited copy


def test_extra_reference_text_is_checked_and_can_be_the_whole_reference(tmp_path):
    heldout = _heldout(tmp_path)
    docs = read_heldout(heldout)
    extra = [Document("python", "pypi/priv-1.0/near.py", lightly_edited(code_text(10))),
             Document("go", "deb/golang-priv-dev-1-1/x.go", code_text(77, "go"))]
    overlaps, stats = find_overlaps(docs, tmp_path / "none", tmp_path / "none", heldout, extra=("private", iter(extra)))
    assert [(o.kind, o.heldout, o.reference, o.where) for o in overlaps] == [
        ("minhash", "pypi/heldpkg-2.0/src/f0", "pypi/priv-1.0/near.py", "private")]
    assert (stats["extra"], stats["extra_documents"], stats["corpus_documents"]) == ("private", 2, 0)


def test_many_overlaps_are_counted_and_a_few_named_on_one_line(tmp_path):
    heldout = _heldout(tmp_path)
    copies = [Document("python", f"pypi/other-1.0/c{i}.py", code_text(10 + i)) for i in range(2)]
    copies += [Document("python", "pypi/heldpkg-1.0/x.py", code_text(5))]
    corpus = _corpus(tmp_path, copies)
    _manifest(tmp_path, [_row("pypi/z-1", f"pypi/z-1/{i}.java", code_text(20 + i, "java")) for i in range(2)])
    with pytest.raises(ConfigError) as err:
        check_disjoint(corpus, heldout, near_dup=False)
    message = str(err.value)
    assert "\n" not in message and "(exact 4, project 1)" in message and "and 2 more" in message


def test_heldout_manifests_and_a_heldout_dir_inside_the_corpus_are_no_reference(tmp_path):
    heldout = _heldout(tmp_path)
    corpus = _corpus(tmp_path)
    docs = read_heldout(heldout)
    _manifest(tmp_path, [ManifestRow(d.lang, source_of(d.path), d.path, content_sha256(d.text), 1) for d in docs],
              "heldout.tsv")
    check_disjoint(corpus, heldout)
    inside = _heldout(corpus)  # data/corpus/data/heldout: under corpus_dir, yet the set itself
    check_disjoint(corpus, inside)


def test_missing_incomplete_and_empty_heldout_sets_are_clear_errors(tmp_path):
    corpus = _corpus(tmp_path)
    heldout = tmp_path / "data" / "heldout"
    with pytest.raises(ConfigError, match=r"no held-out set in .*heldout.*run `umbra data heldout`"):
        check_disjoint(corpus, heldout)
    _heldout(tmp_path)
    (heldout / "go.jsonl").unlink()
    with pytest.raises(ConfigError, match=r"lacks go"):
        check_disjoint(corpus, heldout)
    (heldout / "go.jsonl").write_text("")
    with pytest.raises(ConfigError, match=r"is empty \(go\.jsonl has no files\)"):
        check_disjoint(corpus, heldout)
    with pytest.raises(ConfigError, match="held-out set is empty"):
        find_overlaps([], corpus, tmp_path / "data" / "manifest", heldout)


def test_no_reference_at_all_is_a_clear_error(tmp_path):
    heldout = _heldout(tmp_path)
    with pytest.raises(ConfigError, match="nothing to check the held-out set against"):
        check_disjoint(tmp_path / "data" / "corpus", heldout)


def test_cli_check_only_exit_status_and_one_line(tmp_path, capsys):
    from umbra.cli.main import main

    assert main(["data", "heldout", "--check-only", "--root", str(tmp_path)]) == 2
    assert "run `umbra data heldout`" in capsys.readouterr().err
    _heldout(tmp_path)
    _corpus(tmp_path)
    assert main(["data", "heldout", "--check-only", "--root", str(tmp_path)]) == 0
    assert "disjoint" in capsys.readouterr().out
    _manifest(tmp_path, [_row("pypi/heldpkg-0.1", "pypi/heldpkg-0.1/a.py", code_text(7))])
    assert main(["data", "heldout", "--check-only", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "same project as pypi/heldpkg-0.1" in err
