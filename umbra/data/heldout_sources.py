"""The pinned sources of the held-out set (`umbra data heldout`): third-party code that neither
the pretraining corpus (`sources.py`) nor the private domains (`private_sources.py`) contain,
for the line-completion benchmark. Every entry pins an exact version and the sha256 of the file
that is downloaded; a download with another digest is refused.

- Python: PyPI source distributions; the pinned sha256 must also equal the digest PyPI's JSON
  API publishes for the sdist. None is vendored by a corpus package (pip and setuptools ship
  copies of packaging, pyparsing, rich, urllib3, more_itertools, ... -- those are avoided).
- Go: Debian bookworm `golang-*-dev` binary packages (sources under /usr/share/gocode/src);
  version, pool path and sha256 from `dists/bookworm/main/binary-all/Packages.xz`. None of them
  is vendored by the Go standard library (which carries golang.org/x/* and google/pprof).
- Java: upstream (orig) tarballs of Debian bookworm source packages; version, pool path and
  sha256 from `dists/bookworm/main/source/Sources.xz`. Not a library the JDK carries a fork of
  (ASM, jline, jopt-simple, Xerces/Xalan/BCEL), nor a predecessor of a private-domain library
  (commons-lang 2, commons-collections 3).

Licenses are the SPDX ids of the upstream code, read from the project's license metadata (PyPI),
debian/copyright (the .deb) or the LICENSE file in the orig tarball; all are permissive."""

from __future__ import annotations

from umbra.data.debian import DebianPin
from umbra.data.private_sources import PinnedSdist

HELDOUT_PYPI: tuple[PinnedSdist, ...] = (
    PinnedSdist("boltons", "26.2.0", "BSD-3-Clause",
                "d39cfd15c1a1c3bd4d705c82252fa9edb8e4f5e8cc039f8e39afac7b1b47e92c"),
    PinnedSdist("toolz", "1.2.0", "BSD-3-Clause",
                "9667a038e9d6ecba37995e26cb2f59ec6420b6ad8dd9677de59db9b956b08490"),
    PinnedSdist("lark", "1.3.1", "MIT",
                "b426a7a6d6d53189d318f2b6236ab5d6429eaf09259f1ca33eb716eed10d2905"),
    PinnedSdist("markdown", "3.11.4", "BSD-3-Clause",
                "c911a757f33d64a2578bed2d20c57e007b2aedd8a67bceabd593b31143d54ead"),
    PinnedSdist("mako", "1.4.3", "MIT",
                "cd6537fe88d5fec315c55c2f8529bc4ce7a9a352ad7db3eeaa6a66e2dd4ec37a"),
    PinnedSdist("arrow", "1.4.0", "Apache-2.0",
                "ed0cc050e98001b8779e84d461b0098c4ac597e88704a655582b21d116e526d7"),
    PinnedSdist("python-dateutil", "4.0.0", "Apache-2.0 AND BSD-3-Clause",
                "d7295ff14fdc0f92f662100bfb6c551d160ca090f2939f1ec5b9794265c03f06"),
    PinnedSdist("cattrs", "26.2.1", "MIT",
                "679132bfdc225c5ee40c024fc42519954767c387f950dc6751946c586bccdc6d"),
)

HELDOUT_GO_DEBS: tuple[DebianPin, ...] = (
    DebianPin("golang-github-yuin-goldmark-dev", "1.5.4-1",
              "pool/main/g/golang-github-yuin-goldmark/golang-github-yuin-goldmark-dev_1.5.4-1_all.deb",
              "c52d83484318f870494e3170646f7840a1085fd8c7ba77da75a9bb83d196ecf7", "MIT"),
    DebianPin("golang-github-gorilla-websocket-dev", "1.5.0-2",
              "pool/main/g/golang-github-gorilla-websocket/golang-github-gorilla-websocket-dev_1.5.0-2_all.deb",
              "c43a1b15cf1446303e8683b3c877c04c88ea813c6b201876eac9388d60240ff1", "BSD-2-Clause"),
    DebianPin("golang-github-mitchellh-mapstructure-dev", "1.5.0-2",
              "pool/main/g/golang-github-mitchellh-mapstructure/golang-github-mitchellh-mapstructure-dev_1.5.0-2_all.deb",
              "98b8249cac74e5303349f0b2fa2774cc4d2a8b755094fead857bd979606a7752", "MIT"),
    DebianPin("golang-github-dustin-go-humanize-dev", "1.0.0-3",
              "pool/main/g/golang-github-dustin-go-humanize/golang-github-dustin-go-humanize-dev_1.0.0-3_all.deb",
              "b4d1a9d00e0c8af421a30e683bf36e14ba99fa621d3f698220f9af0420bd330c", "MIT"),
    DebianPin("golang-github-miekg-dns-dev", "1.1.50-2",
              "pool/main/g/golang-github-miekg-dns/golang-github-miekg-dns-dev_1.1.50-2_all.deb",
              "a722f465c3035661d4d6f0e67f11824c9f8d90e478bde7e458e3cce49cac4c01", "BSD-3-Clause"),
    DebianPin("golang-github-gomodule-redigo-dev", "1:1.8.3-1",
              "pool/main/g/golang-github-gomodule-redigo/golang-github-gomodule-redigo-dev_1.8.3-1_all.deb",
              "0ad2749eebc85e3f4bfb45c00de13fa691b394bed680ebb0e209e698b1991037", "Apache-2.0"),
    DebianPin("golang-github-go-chi-chi-dev", "5.0.7-1",
              "pool/main/g/golang-github-go-chi-chi/golang-github-go-chi-chi-dev_5.0.7-1_all.deb",
              "70beea5ca4f20af122e8083c91b56b6055df895595c7d9dcf286fadd4ad26f9b", "MIT"),
    DebianPin("golang-github-pelletier-go-toml-dev", "1.9.4-1",
              "pool/main/g/golang-github-pelletier-go-toml/golang-github-pelletier-go-toml-dev_1.9.4-1_all.deb",
              "7aa25a19f2c90b2d504ef958844f557f8c26924d0d983783aa43775d67ea3446", "MIT AND Apache-2.0"),
    DebianPin("golang-github-spf13-afero-dev", "1.9.3-1",
              "pool/main/g/golang-github-spf13-afero/golang-github-spf13-afero-dev_1.9.3-1_all.deb",
              "e36ecb5c458967c948654f5a906cdb435110bfffbdc3c30e6a4021c0ec05146b", "Apache-2.0"),
)

HELDOUT_JAVA_ORIGS: tuple[DebianPin, ...] = (
    DebianPin("mockito", "2.23.0-2",
              "pool/main/m/mockito/mockito_2.23.0.orig.tar.xz",
              "b9f76525f44797e0f63a24ecaf8e0574868cce1c5a4a3d1d712e050418d3c5dd", "MIT AND Apache-2.0"),
    DebianPin("hikaricp", "2.7.9-1",
              "pool/main/h/hikaricp/hikaricp_2.7.9.orig.tar.xz",
              "0f5d27f3c925eaaff1714806a61f15282d604fd15a3d52bed1c71e7d5c5b66e8", "Apache-2.0"),
    DebianPin("commons-vfs", "2.1-4+deb12u1",
              "pool/main/c/commons-vfs/commons-vfs_2.1.orig.tar.xz",
              "0a7a6d2f7515241fa5622ed5227b4464e521eecfc6d3924e02f03180e8f48f52", "Apache-2.0"),
    DebianPin("libcommons-jexl3-java", "3.1-3",
              "pool/main/libc/libcommons-jexl3-java/libcommons-jexl3-java_3.1.orig.tar.xz",
              "63638339c0362aab6e301c215b463c4e4084f11e52f76a27c0b6f7b9f8433ea9", "Apache-2.0"),
    DebianPin("jzlib", "1.1.3-2",
              "pool/main/j/jzlib/jzlib_1.1.3.orig.tar.gz",
              "83da656205fe9cae8fc17aaff71237836acac582a88116c7579e362126bd0ec4", "BSD-3-Clause"),
)

# Files of the pinned sources left out of the held-out set, with the reason. Found by the
# contamination check against the text of the private domains' archives (MinHash).
HELDOUT_EXCLUDED: dict[str, str] = {
    "pypi/mako-1.4.3/tools/toxnox.py":
        "near duplicate of the private domain's pypi/alembic-1.20.1/tools/toxnox.py (the same author's tox tooling)",
}
