"""Debian archives as corpus sources: index parsing, pinned download + sha256 check, and reading
source files out of binary packages (.deb) and upstream (orig) tarballs.

Nothing is installed: a `.deb` is an `ar` archive whose `data.tar.*` member is read in memory,
so the same pinned file gives the same corpus on any machine. Pins (package, version, pool path,
sha256) come from the bookworm indexes (`Packages.xz` for binary packages, `Sources.xz` for
source packages); `binary_pin` / `orig_pin` turn an index stanza into the values to pin."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from umbra.data.collect import is_vendored
from umbra.data.pypi import DownloadError, file_sha256
from umbra.errors import ConfigError

MIRROR = "http://deb.debian.org/debian/"
PACKAGES_INDEX = "dists/bookworm/main/binary-all/Packages.xz"
SOURCES_INDEX = "dists/bookworm/main/source/Sources.xz"
GO_SRC_PREFIX = "usr/share/gocode/src/"  # where golang-*-dev packages install their sources
_AR_MAGIC = b"!<arch>\n"
_AR_HEADER = 60


@dataclass(frozen=True)
class DebianPin:
    package: str  # binary package (a .deb) or source package (an orig tarball)
    version: str  # exact Debian version, epoch included
    filename: str  # path under the mirror root, e.g. pool/main/g/golang-x/golang-x_1.0-1_all.deb
    sha256: str  # digest of that file, from the bookworm index
    license: str  # SPDX id of the upstream code (from debian/copyright)

    @property
    def source_id(self) -> str:
        """Corpus source id, e.g. `deb/golang-github-pkg-errors-dev-0.9.1-3`."""
        return f"deb/{self.package}-{self.version.split(':', 1)[-1]}"


def parse_index(text: str) -> list[dict[str, str]]:
    """Stanzas of a Debian control index (deb822): fields, with continuation lines joined by
    newlines (multi-line fields such as `Checksums-Sha256` keep one entry per line)."""
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        if not line.strip():
            if current:
                stanzas.append(current)
            current, key = {}, None
        elif line[0] in " \t":
            if key is None:
                raise ConfigError(f"index continuation line without a field: {line[:80]!r}")
            current[key] = (current[key] + "\n" + line.strip()).strip("\n")
        else:
            name, sep, value = line.partition(":")
            if not sep:
                raise ConfigError(f"malformed index line: {line[:80]!r}")
            key = name.strip()
            current[key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def _stanza(stanzas: list[dict[str, str]], package: str) -> dict[str, str]:
    """The stanza of `package` with the highest version string (bookworm lists one per package)."""
    found = [s for s in stanzas if s.get("Package") == package]
    if not found:
        raise ConfigError(f"{package} is not in the index")
    return max(found, key=lambda s: s.get("Version", ""))


def binary_pin(stanzas: list[dict[str, str]], package: str, license_id: str) -> DebianPin:
    """Pin the binary package `package` from a `Packages` index."""
    s = _stanza(stanzas, package)
    return DebianPin(package, s["Version"], s["Filename"], s["SHA256"], license_id)


def orig_pin(stanzas: list[dict[str, str]], package: str, license_id: str) -> DebianPin:
    """Pin the upstream tarball (`*.orig.tar.*`) of source package `package` from `Sources`."""
    s = _stanza(stanzas, package)
    for entry in s.get("Checksums-Sha256", "").splitlines():
        digest, _size, name = entry.split()
        if ".orig.tar." in name and not name.endswith(".asc"):
            return DebianPin(package, s["Version"], f"{s['Directory']}/{name}", digest, license_id)
    raise ConfigError(f"{package} {s.get('Version')} has no orig tarball in the index")


def fetch_pinned(pin: DebianPin, cache_dir: Path, client: httpx.Client,
                 mirror: str = MIRROR) -> Path:
    """The pinned file, downloaded into `cache_dir` unless a verified copy is there; a download
    whose sha256 differs from the pin is deleted and refused."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / Path(pin.filename).name
    if target.exists() and file_sha256(target) == pin.sha256:
        return target
    partial = target.with_name(target.name + ".part")
    with client.stream("GET", mirror + pin.filename) as resp:
        if resp.status_code != 200:
            raise DownloadError(f"{pin.filename}: HTTP {resp.status_code} (pin superseded in the pool?)")
        with partial.open("wb") as fh:
            for chunk in resp.iter_bytes(1 << 20):
                fh.write(chunk)
    return verify_into(partial, target, pin.sha256)


def verify_into(partial: Path, target: Path, sha256: str) -> Path:
    """Move a downloaded file into place if its sha256 is `sha256`; otherwise delete it and raise."""
    digest = file_sha256(partial)
    if digest != sha256:
        partial.unlink()
        raise DownloadError(f"{target.name}: sha256 {digest} != pinned {sha256}")
    partial.replace(target)
    return target


def ar_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    """(name, content) of each member of a System V / GNU `ar` archive (the .deb container)."""
    if not data.startswith(_AR_MAGIC):
        raise ConfigError("not an ar archive (bad magic)")
    pos = len(_AR_MAGIC)
    while pos + _AR_HEADER <= len(data):
        header = data[pos:pos + _AR_HEADER]
        if header[58:60] != b"`\n":
            raise ConfigError(f"corrupt ar member header at byte {pos}")
        name = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        start = pos + _AR_HEADER
        if start + size > len(data):
            raise ConfigError(f"truncated ar member {name!r}")
        yield name, data[start:start + size]
        pos = start + size + (size % 2)  # members are 2-byte aligned


def deb_data_tar(path: Path) -> tarfile.TarFile:
    """The `data.tar.{gz,xz,bz2}` filesystem archive of a .deb, opened in memory."""
    for name, content in ar_members(path.read_bytes()):
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                raise ConfigError(f"{path.name}: zstd-compressed data.tar is not supported")
            return tarfile.open(fileobj=io.BytesIO(content), mode="r:*")
    raise ConfigError(f"{path.name}: no data.tar member")


def _decoded(tf: tarfile.TarFile, member: tarfile.TarInfo) -> str | None:
    handle = tf.extractfile(member)
    if handle is None:
        return None
    try:
        return handle.read().decode("utf-8")
    except UnicodeDecodeError:
        return None


def deb_go_sources(path: Path) -> Iterator[tuple[str, str]]:
    """(import path relative to GOPATH/src, text) of each regular `.go` file of a golang-*-dev
    package, tests included, `testdata/` and vendored trees skipped, sorted by path."""
    with deb_data_tar(path) as tf:
        members = []
        for m in tf.getmembers():
            name = m.name.removeprefix("./")
            if m.isfile() and name.startswith(GO_SRC_PREFIX) and name.endswith(".go"):
                rel = name[len(GO_SRC_PREFIX):]
                if not is_vendored(rel, skip_testdata=True):
                    members.append((rel, m))
        for rel, m in sorted(members, key=lambda x: x[0]):
            text = _decoded(tf, m)
            if text is not None:
                yield rel, text


def tarball_sources(path: Path, suffix: str) -> Iterator[tuple[str, str]]:
    """(path without the top directory, text) of each regular file ending in `suffix` in an
    upstream tarball, vendored trees skipped, sorted by path."""
    with tarfile.open(path, "r:*") as tf:
        members = []
        for m in tf.getmembers():
            parts = m.name.removeprefix("./").split("/", 1)
            rel = parts[1] if len(parts) == 2 else parts[0]
            if m.isfile() and rel.endswith(suffix) and not is_vendored(rel):
                members.append((rel, m))
        for rel, m in sorted(members, key=lambda x: x[0]):
            text = _decoded(tf, m)
            if text is not None:
                yield rel, text
