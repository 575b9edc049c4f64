"""Debian sources: index parsing and pinning, pinned download with sha256 verification (a wrong
digest is refused), and reading .go / .java files out of a .deb and an orig tarball."""

from __future__ import annotations

import hashlib
import shutil
import subprocess

import httpx
import pytest

from umbra.data import debian
from umbra.data.pypi import DownloadError
from umbra.errors import ConfigError

from .archives import ar_archive, write_deb, write_tarball

PACKAGES = """Package: golang-github-foo-bar-dev
Version: 1.2.3-1
Architecture: all
Filename: pool/main/g/golang-github-foo-bar/golang-github-foo-bar-dev_1.2.3-1_all.deb
SHA256: aaaa
Description: a library
 with a long description
 .
 over several lines

Package: golang-other-dev
Version: 0.1-2
Filename: pool/main/g/golang-other/golang-other-dev_0.1-2_all.deb
SHA256: bbbb
"""

SOURCES = """Package: libfoo-java
Version: 1:2.0-3
Directory: pool/main/libf/libfoo-java
Checksums-Sha256:
 1111 2048 libfoo-java_2.0-3.dsc
 2222 4096 libfoo-java_2.0.orig.tar.xz
 3333 512 libfoo-java_2.0-3.debian.tar.xz
"""

GO = "package bar\n\n// Bar adds.\nfunc Bar(a, b int) int {\n\treturn a + b\n}\n"


def test_parse_index_and_pins():
    stanzas = debian.parse_index(PACKAGES)
    assert [s["Package"] for s in stanzas] == ["golang-github-foo-bar-dev", "golang-other-dev"]
    assert stanzas[0]["Description"].splitlines()[-1] == "over several lines"
    pin = debian.binary_pin(stanzas, "golang-github-foo-bar-dev", "MIT")
    assert (pin.version, pin.sha256, pin.license) == ("1.2.3-1", "aaaa", "MIT")
    assert pin.filename.endswith("golang-github-foo-bar-dev_1.2.3-1_all.deb")
    src = debian.orig_pin(debian.parse_index(SOURCES), "libfoo-java", "Apache-2.0")
    assert src.filename == "pool/main/libf/libfoo-java/libfoo-java_2.0.orig.tar.xz"
    assert src.sha256 == "2222" and src.source_id == "deb/libfoo-java-2.0-3"  # epoch dropped
    with pytest.raises(ConfigError, match="not in the index"):
        debian.binary_pin(stanzas, "missing-dev", "MIT")
    with pytest.raises(ConfigError, match="malformed"):
        debian.parse_index("Package foo\n")


def _deb_files() -> dict[str, bytes]:
    root = "usr/share/gocode/src/github.com/foo/bar/"
    return {
        root + "bar.go": GO.encode(),
        root + "bar_test.go": GO.replace("Bar", "TestBar").encode(),  # tests are code: kept
        root + "testdata/fixture.go": GO.encode(),  # fixtures: skipped
        root + "vendor/github.com/x/y/y.go": GO.encode(),  # vendored copy: skipped
        root + "README.md": b"# bar\n",
        "usr/share/doc/golang-github-foo-bar-dev/copyright": b"License: Expat\n",
    }


def test_deb_go_sources_from_an_ar_written_here(tmp_path):
    deb = write_deb(tmp_path / "bar.deb", _deb_files(),
                    symlinks={"usr/share/gocode/src/github.com/foo/bar/link.go": "bar.go"})
    assert [n for n, _ in debian.ar_members(deb.read_bytes())] == ["debian-binary", "control.tar.xz", "data.tar.xz"]
    got = dict(debian.deb_go_sources(deb))
    assert sorted(got) == ["github.com/foo/bar/bar.go", "github.com/foo/bar/bar_test.go"]
    assert got["github.com/foo/bar/bar.go"] == GO


def test_deb_go_sources_from_dpkg_deb(tmp_path):
    if shutil.which("dpkg-deb") is None:
        pytest.fail("dpkg-deb is not on PATH: it comes with Debian's `dpkg` package", pytrace=False)
    root = tmp_path / "pkg"
    for rel, data in _deb_files().items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN" / "control").write_text("Package: golang-github-foo-bar-dev\nVersion: 1.2.3-1\n"
                                             "Architecture: all\nMaintainer: t <t@example.org>\nDescription: t\n")
    out = tmp_path / "bar.deb"
    subprocess.run(["dpkg-deb", "-Zxz", "--root-owner-group", "--build", str(root), str(out)],
                   check=True, capture_output=True)
    assert sorted(dict(debian.deb_go_sources(out))) == ["github.com/foo/bar/bar.go", "github.com/foo/bar/bar_test.go"]


def test_bad_ar_archives_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="bad magic"):
        list(debian.ar_members(b"PK\x03\x04 not an ar file"))
    truncated = ar_archive([("debian-binary", b"2.0\n")])[:-2]
    with pytest.raises(ConfigError, match="truncated"):
        list(debian.ar_members(truncated))
    no_data = tmp_path / "x.deb"
    no_data.write_bytes(ar_archive([("debian-binary", b"2.0\n")]))
    with pytest.raises(ConfigError, match="no data.tar"):
        debian.deb_data_tar(no_data)


def test_orig_tarball_java_sources(tmp_path):
    java = "package a;\n\npublic class A {\n    int x() { return 1; }\n}\n"
    tarball = write_tarball(tmp_path / "libfoo-java_2.0.orig.tar.xz", "libfoo-2.0", {
        "src/main/java/a/A.java": java,
        "src/test/java/a/ATest.java": java.replace("class A", "class ATest"),
        "third_party/b/B.java": java,  # vendored: skipped
        "pom.xml": "<project/>\n",
    }, mode="w:xz")
    got = dict(debian.tarball_sources(tarball, ".java"))
    assert sorted(got) == ["src/main/java/a/A.java", "src/test/java/a/ATest.java"]
    assert got["src/main/java/a/A.java"] == java


def _pin(content: bytes, sha256: str | None = None) -> debian.DebianPin:
    return debian.DebianPin("golang-x-dev", "1.0-1", "pool/main/g/golang-x/golang-x-dev_1.0-1_all.deb",
                            sha256 or hashlib.sha256(content).hexdigest(), "MIT")


def test_fetch_pinned_verifies_and_caches(tmp_path):
    content = b"a .deb's bytes"
    requests = []

    def serve(request: httpx.Request) -> httpx.Response:
        requests.append(str(request.url))
        if request.url.path.endswith("golang-x-dev_1.0-1_all.deb"):
            return httpx.Response(200, content=content)
        return httpx.Response(404)

    with httpx.Client(transport=httpx.MockTransport(serve)) as client:
        path = debian.fetch_pinned(_pin(content), tmp_path, client)
        assert path.read_bytes() == content
        assert requests == [debian.MIRROR + _pin(content).filename]
        debian.fetch_pinned(_pin(content), tmp_path, client)  # verified cached copy: no request
        assert len(requests) == 1
        with pytest.raises(DownloadError, match="!= pinned"):
            debian.fetch_pinned(_pin(content, sha256="0" * 64), tmp_path / "other", client)
        assert list((tmp_path / "other").iterdir()) == []  # the bad download is deleted
        missing = debian.DebianPin("y", "1", "pool/main/y/y_1_all.deb", "0" * 64, "MIT")
        with pytest.raises(DownloadError, match="HTTP 404"):
            debian.fetch_pinned(missing, tmp_path, client)
