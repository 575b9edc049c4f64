"""Where the corpus comes from: pinned PyPI source distributions and local standard libraries.

Every PyPI package is pinned to an exact version; its sdist URL and sha256 are read from the
PyPI JSON API at download time and the archive is verified against that digest. Only
permissively licensed (MIT / BSD / Apache-2.0 / PSF) projects are listed."""

from __future__ import annotations

import sysconfig
from dataclasses import dataclass


@dataclass(frozen=True)
class PyPIPackage:
    name: str  # PyPI project name
    version: str  # exact pinned version
    license: str  # SPDX id as published by the project


# Widely used, permissively licensed, (mostly) pure-Python projects.
PYPI_PACKAGES: tuple[PyPIPackage, ...] = (
    PyPIPackage("django", "5.0.6", "BSD-3-Clause"),
    PyPIPackage("sympy", "1.12", "BSD-3-Clause"),
    PyPIPackage("sqlalchemy", "2.0.30", "MIT"),
    PyPIPackage("twisted", "24.3.0", "MIT"),
    PyPIPackage("networkx", "3.3", "BSD-3-Clause"),
    PyPIPackage("sphinx", "7.3.7", "BSD-2-Clause"),
    PyPIPackage("pygments", "2.18.0", "BSD-2-Clause"),
    PyPIPackage("mypy", "1.10.0", "MIT"),
    PyPIPackage("setuptools", "70.0.0", "MIT"),
    PyPIPackage("pip", "24.0", "MIT"),
    PyPIPackage("pytest", "8.2.2", "MIT"),
    PyPIPackage("scrapy", "2.11.2", "BSD-3-Clause"),
    PyPIPackage("aiohttp", "3.9.5", "Apache-2.0 AND MIT"),
    PyPIPackage("tornado", "6.4.1", "Apache-2.0"),
    PyPIPackage("flask", "3.0.3", "BSD-3-Clause"),
    PyPIPackage("werkzeug", "3.0.3", "BSD-3-Clause"),
    PyPIPackage("jinja2", "3.1.4", "BSD-3-Clause"),
    PyPIPackage("click", "8.1.7", "BSD-3-Clause"),
    PyPIPackage("requests", "2.32.3", "Apache-2.0"),
    PyPIPackage("urllib3", "2.2.2", "MIT"),
    PyPIPackage("attrs", "23.2.0", "MIT"),
    PyPIPackage("rich", "13.7.1", "MIT"),
    PyPIPackage("black", "24.4.2", "MIT"),
    PyPIPackage("httpx", "0.27.0", "BSD-3-Clause"),
    PyPIPackage("starlette", "0.37.2", "BSD-3-Clause"),
    PyPIPackage("pydantic", "2.7.4", "MIT"),
    PyPIPackage("fastapi", "0.111.0", "MIT"),
)

# Local standard libraries (Debian packages golang-src and openjdk-17-source).
GO_SRC_ROOT = "/usr/share/go-1.19/src"
GO_LICENSE = "BSD-3-Clause"
JDK_SRC_ZIP = "/usr/lib/jvm/openjdk-17/lib/src.zip"
JDK_LICENSE = "GPL-2.0-only WITH Classpath-exception-2.0"
PY_STDLIB_LICENSE = "PSF-2.0"
APT_PACKAGES = {"go": "golang-src", "java": "openjdk-17-source"}


def python_stdlib_root() -> str:
    """The standard library directory of the running interpreter."""
    return sysconfig.get_paths()["stdlib"]
