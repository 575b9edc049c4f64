"""Download pinned PyPI source distributions, verified against the sha256 in the JSON API."""

from __future__ import annotations

import hashlib
from urllib.parse import urljoin
from dataclasses import dataclass
from pathlib import Path

import httpx

from umbra.data.sources import PyPIPackage
from umbra.errors import ConfigError, UmbraError

PYPI_JSON = "https://pypi.org/pypi/{name}/json"


class DownloadError(UmbraError):
    """A source distribution could not be fetched or failed verification."""


@dataclass(frozen=True)
class SdistInfo:
    url: str  # download URL of the source distribution
    filename: str  # archive file name
    sha256: str  # digest published by PyPI


def sdist_info(package: PyPIPackage, client: httpx.Client) -> SdistInfo:
    """Locate the sdist of the pinned version in the project's PyPI JSON document."""
    resp = client.get(PYPI_JSON.format(name=package.name))
    if resp.status_code != 200:
        raise DownloadError(f"PyPI JSON for {package.name}: HTTP {resp.status_code}")
    files = resp.json().get("releases", {}).get(package.version)
    if not files:
        raise ConfigError(f"{package.name}=={package.version} is not on PyPI")
    sdists = [f for f in files if f.get("packagetype") == "sdist"]
    if not sdists:
        raise ConfigError(f"{package.name}=={package.version} has no source distribution")
    f = sdists[0]
    # Some mirrors publish URLs relative to the JSON document.
    url = urljoin(str(resp.url), f["url"])
    return SdistInfo(url=url, filename=f["filename"], sha256=f["digests"]["sha256"])


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_sdist(package: PyPIPackage, cache_dir: Path, client: httpx.Client) -> tuple[Path, str]:
    """Return (archive path, sha256), downloading into `cache_dir` unless a verified copy exists."""
    info = sdist_info(package, client)
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / info.filename
    if target.exists() and file_sha256(target) == info.sha256:
        return target, info.sha256
    partial = target.with_suffix(target.suffix + ".part")
    with client.stream("GET", info.url) as resp:
        if resp.status_code != 200:
            raise DownloadError(f"{info.filename}: HTTP {resp.status_code}")
        with partial.open("wb") as fh:
            for chunk in resp.iter_bytes(1 << 20):
                fh.write(chunk)
    digest = file_sha256(partial)
    if digest != info.sha256:
        partial.unlink()
        raise DownloadError(f"{info.filename}: sha256 {digest} != published {info.sha256}")
    partial.replace(target)
    return target, digest


def fetch_all(packages: tuple[PyPIPackage, ...], cache_dir: Path) -> dict[str, tuple[Path, str]]:
    """Fetch every pinned sdist; keys are package names."""
    out: dict[str, tuple[Path, str]] = {}
    with httpx.Client(timeout=120.0, follow_redirects=True) as client:
        for package in packages:
            out[package.name] = fetch_sdist(package, cache_dir, client)
    return out
