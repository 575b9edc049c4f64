"""The pinned sources of the private domains (`umbra data private`): code the pretrained model
never saw, one list per language. Every entry pins an exact version and the sha256 of the file
that is downloaded; a download with another digest is refused.

- Python: PyPI source distributions of projects that are neither in the pretraining corpus
  (`sources.PYPI_PACKAGES`) nor in the standard library; the pinned sha256 must also equal the
  digest PyPI's JSON API publishes for the sdist.
- Go: Debian bookworm `golang-*-dev` binary packages (sources under /usr/share/gocode/src);
  version, pool path and sha256 from `dists/bookworm/main/binary-all/Packages.xz`
  (`debian.binary_pin`).
- Java: upstream (orig) tarballs of Debian bookworm source packages; version, pool path and
  sha256 from `dists/bookworm/main/source/Sources.xz` (`debian.orig_pin`). Not the JDK.

Licenses are the SPDX ids of the upstream code, read from each project's license metadata (PyPI)
or debian/copyright (Debian); all are permissive (MIT, BSD, Apache-2.0, ISC) or MPL-2.0."""

from __future__ import annotations

from dataclasses import dataclass

from umbra.data.debian import DebianPin
from umbra.data.sources import PyPIPackage


@dataclass(frozen=True)
class PinnedSdist(PyPIPackage):
    sha256: str  # digest of the sdist archive (as published by PyPI)


# Pure-Python-heavy projects outside the pretraining corpus; pandas, statsmodels and astropy
# were left out to keep the domain near 60-70 MB.
PRIVATE_PYPI: tuple[PinnedSdist, ...] = (
    PinnedSdist("scikit-learn", "1.9.1", "BSD-3-Clause",
                "629cada3e33e2b9bf376cdc7614a47a4140b8aedc1d836579e359736fbd82977"),
    PinnedSdist("ipython", "9.18.1", "BSD-3-Clause",
                "6319c0f5372c196397899479e6db1783dd7937abae06815d1317e8d5d51aaaaf"),
    PinnedSdist("celery", "5.7.0", "BSD-3-Clause",
                "6a5dfcf6662287204f009a02002b9e66c83d4105e47ebabdc7079108772fc6f0"),
    PinnedSdist("kombu", "5.7.0", "BSD-3-Clause",
                "31e62fdfd2381caa3422f8e02b84a491d9a2180ddda74507b57f4cb1e1c2c2c9"),
    PinnedSdist("alembic", "1.20.1", "MIT",
                "83490def1f723413db5096591f7609ac52544805be93849170088ed04f5a2e0b"),
    PinnedSdist("prompt_toolkit", "3.0.53", "BSD-3-Clause",
                "9ec8a0ad96d5c56148b3f914aa79c1564c3fde5d2e6b876e7bc327e353cf8fa6"),
    PinnedSdist("jedi", "0.20.1", "MIT",
                "2f71208c3f9c1bca057c0e90d3f272aba44ace88fc4067d7587e9e069331b7e5"),
    PinnedSdist("parso", "0.8.7", "MIT",
                "eaaac4c9fdd5e9e8852dc778d2d7405897ec510f2a298071453e5e3a07914bb1"),
    PinnedSdist("sqlparse", "0.6.1", "BSD-3-Clause",
                "ca722573f848ff2d30e40ea30f53a104b7dea7635ea9285891263eb2c58fb6e7"),
    PinnedSdist("marshmallow", "4.4.0", "MIT",
                "9e6ffa8511012ca89732324c1c253efd7b4d35632dcbdf80aa793fe01804af3e"),
    PinnedSdist("xarray", "2026.9.0", "Apache-2.0",
                "6abc69694c22fa1f0fb2f357ff4e41d88beb4477ed71091f944b7dbf67ed54fe"),
    PinnedSdist("dask", "2026.8.0", "BSD-3-Clause",
                "8a94c37b5de6d869343340dc26c3c3acca7ec48a3abdabe00ea3abb1125884d5"),
    PinnedSdist("distributed", "2026.8.0", "BSD-3-Clause",
                "6f55008ecacf96ba945309fc12e680544764995e27bd63cc5e109afb97d7044d"),
    PinnedSdist("trio", "0.35.0", "MIT OR Apache-2.0",
                "7efb295c78a0ecd1235c5759e620b5da564ca80d2efcb0055423588547248b96"),
    PinnedSdist("anyio", "4.16.0", "MIT",
                "59bb03251907983d1603d27c3087ddb1e93299ea2163adcdba37899a4fb12ffb"),
    PinnedSdist("textual", "8.2.8", "MIT",
                "3f106a9fbc73e39dd266c9712432087de78a6d644084c7c241d6a25c3169115b"),
    PinnedSdist("nltk", "3.10.4", "Apache-2.0",
                "44679f4e9220abfd496d2c8cdb22f8425ccbe557604f9aa5cacb1c44003dabc1"),
    PinnedSdist("sqlglot", "30.30.0", "MIT",
                "b8e344042c85d7baa1d0d827127dfe1611ce9ac59bceab6fe370665baeb14ce7"),
    PinnedSdist("openpyxl", "3.1.5", "MIT",
                "cf0e3cf56142039133628b5acffe8ef0c12bc902d2aadd3e0fe5878dc08d1050"),
    PinnedSdist("tox", "4.67.15", "MIT",
                "70307cf6cc0a328ca766dc8c20939c697af48d4df2d4bd0c93531eb3be50295d"),
    PinnedSdist("virtualenv", "21.15.11", "MIT",
                "6ad11e129f546835ae81d47a27f48ed32dcc4e2a0776014a159bab8895cdb9ac"),
    PinnedSdist("coverage", "7.17.4", "Apache-2.0",
                "25ed180a4fb75b487509a4568acead1de41aefab8bedb06ac1ed5c14223fef97"),
    PinnedSdist("isort", "9.0.2", "MIT",
                "d2298980ce44350f11d9d24c8150eaef1883431ec203dddbb4e9b5c3ceb54c70"),
    PinnedSdist("sanic", "25.12.1", "MIT",
                "7b51bf608e4030f06a6c002cd08fed2872e4936527e63c9a8a97d5cd06a2b47f"),
    PinnedSdist("falcon", "4.4.0", "Apache-2.0",
                "9f3ffbddc8baed4573295642eddb18a37eea37baba9f20c5be379c8b3d3d79e6"),
    PinnedSdist("bokeh", "3.10.2", "BSD-3-Clause",
                "d9fba1004fae149c6e6d54ba37410e52b8d4622ed5c6dad2220afa1b61362de0"),
    PinnedSdist("hypothesis", "6.170.17", "MPL-2.0",
                "bec862247cab5e55f566f9c97f05c9403950609772cad0d13392d64413a3d858"),
    PinnedSdist("pyflakes", "4.1.0", "MIT",
                "592beb57058eb82eb190fb7514f2081c555c51000b029ff71286a681e6cf2f83"),
    PinnedSdist("pycodestyle", "2.15.0", "MIT",
                "318f5db083869b4c4dad922d0b11124fb27ab181b6730b93371da671e31bd50e"),
    PinnedSdist("flake8", "7.5.0", "MIT",
                "0dab7566341aca0d80aa29b5812bdadf256caa6a63e6068e49ac2649918236a4"),
    PinnedSdist("bottle", "0.13.4", "MIT",
                "787e78327e12b227938de02248333d788cfe45987edca735f8f88e03472c3f47"),
    PinnedSdist("cython", "3.3.1", "Apache-2.0",
                "e0e45989e821bef6aa9ae15c7d583ab5e055f7406c4b3624e49e06d24e90375a"),
)

# Go libraries packaged by Debian (tests kept; testdata/ and vendored trees skipped).
PRIVATE_GO_DEBS: tuple[DebianPin, ...] = (
    DebianPin("golang-github-spf13-cobra-dev", "1.6.1-1",
              "pool/main/g/golang-github-spf13-cobra/golang-github-spf13-cobra-dev_1.6.1-1_all.deb",
              "4f5d20855133319beef3c5b49d3c21a0406f270bf94fb4b6f4d406b691283cb2", "Apache-2.0"),
    DebianPin("golang-github-spf13-pflag-dev", "1.0.6~git20210604-d5e0c0615ace-1",
              "pool/main/g/golang-github-spf13-pflag/golang-github-spf13-pflag-dev_1.0.6~git20210604-d5e0c0615ace-1_all.deb",
              "bd1c3c2a3e47512a64da02ebea900eb5a3f3c5d386e559d5718a3a935c0ea570", "BSD-3-Clause"),
    DebianPin("golang-github-stretchr-testify-dev", "1.8.1-1",
              "pool/main/g/golang-testify/golang-github-stretchr-testify-dev_1.8.1-1_all.deb",
              "214a31391cf60e1d1abd9f218cb5134a1fd646340a147a04c2d95a981024a305", "MIT"),
    DebianPin("golang-github-sirupsen-logrus-dev", "1.9.0-1",
              "pool/main/g/golang-logrus/golang-github-sirupsen-logrus-dev_1.9.0-1_all.deb",
              "51fb87b05452e96be38b97c03d5f997f6ce3a144421f911338d6c4ea2e8aa118", "MIT"),
    DebianPin("golang-github-google-go-cmp-dev", "0.5.9-1",
              "pool/main/g/golang-github-google-go-cmp/golang-github-google-go-cmp-dev_0.5.9-1_all.deb",
              "b68bd919daa7c1bdf02abfb68894e29e532f19b03b68c8615f50626c48f553b6", "BSD-3-Clause"),
    DebianPin("golang-github-burntsushi-toml-dev", "1.2.0-2",
              "pool/main/g/golang-toml/golang-github-burntsushi-toml-dev_1.2.0-2_all.deb",
              "eb0bc9f96d02b33034311604f787ca7ab071de026c9abdffa6ae40a63362f7b8", "MIT AND BSD-3-Clause"),
    DebianPin("golang-github-gin-gonic-gin-dev", "1.8.1-1",
              "pool/main/g/golang-github-gin-gonic-gin/golang-github-gin-gonic-gin-dev_1.8.1-1_all.deb",
              "66d916769bcd36a6722b0c92a81719b8faca56f69662b17d1ef7ba257c85367a", "MIT AND BSD-3-Clause"),
    DebianPin("golang-github-hashicorp-hcl-v2-dev", "2.14.1-2",
              "pool/main/g/golang-github-hashicorp-hcl-v2/golang-github-hashicorp-hcl-v2-dev_2.14.1-2_all.deb",
              "1ffd62cfe44b0d4eb5676fe3621d72372e68b66176123e827849dc87396accdf", "MPL-2.0"),
    DebianPin("golang-github-ulikunitz-xz-dev", "0.5.6-2",
              "pool/main/g/golang-github-ulikunitz-xz/golang-github-ulikunitz-xz-dev_0.5.6-2_all.deb",
              "f09b9360203df90d6f55914bd33169aaad8a5d89dd6eeda1d10ed31c5d48154a", "BSD-3-Clause"),
    DebianPin("golang-github-cockroachdb-apd-dev", "2.0.1-1",
              "pool/main/g/golang-github-cockroachdb-apd/golang-github-cockroachdb-apd-dev_2.0.1-1_all.deb",
              "b25fd4c2349dddee412b54b9205e155253fbf7192918eef569ea1e21ea66c35c", "Apache-2.0"),
    DebianPin("golang-honnef-go-tools-dev", "2023.1-1",
              "pool/main/g/golang-honnef-go-tools/golang-honnef-go-tools-dev_2023.1-1_all.deb",
              "d91a3add5f975d8f878eeacae3e3f4f2b29ade88baf3c054b5a620a3f92aa60f", "MIT AND BSD-3-Clause"),
    DebianPin("golang-github-robertkrimen-otto-dev", "0.0~git20200922.ef014fd-2",
              "pool/main/g/golang-github-robertkrimen-otto/golang-github-robertkrimen-otto-dev_0.0~git20200922.ef014fd-2_all.deb",
              "6dd3858c9e76d99db8472b801fe24c370c6eef9cf67c697d9cc8309882aa9c9a", "MIT AND BSD-3-Clause"),
    DebianPin("golang-github-go-resty-resty-dev", "2.6.0-1",
              "pool/main/g/golang-github-go-resty-resty/golang-github-go-resty-resty-dev_2.6.0-1_all.deb",
              "f428464f5f8732aa14f5ff70fc54f58c2300cde35c44966e1a97243bff14e1f6", "MIT"),
    DebianPin("golang-github-pkg-errors-dev", "0.9.1-2",
              "pool/main/g/golang-github-pkg-errors/golang-github-pkg-errors-dev_0.9.1-2_all.deb",
              "87227544904795f81d8c660b7854045a1ef78d5c690993bb4a0c43e05104ca64", "BSD-2-Clause"),
    DebianPin("golang-github-urfave-cli-dev", "1.22.9-2",
              "pool/main/g/golang-github-urfave-cli/golang-github-urfave-cli-dev_1.22.9-2_all.deb",
              "ed1e942459d1f07bf74e1e4f64b9c37551b20d461e03014bbdf4dbfb0f83913d", "MIT"),
    DebianPin("golang-github-gorilla-mux-dev", "1.8.0-1",
              "pool/main/g/golang-github-gorilla-mux/golang-github-gorilla-mux-dev_1.8.0-1_all.deb",
              "0880a4019fe68496a0e0a749c2948c029e489f49edd448bed2fedaba33f848c2", "BSD-3-Clause"),
    DebianPin("golang-gopkg-yaml.v3-dev", "3.0.1-3",
              "pool/main/g/golang-gopkg-yaml.v3/golang-gopkg-yaml.v3-dev_3.0.1-3_all.deb",
              "3ad4febd49700bc670f0f143f3291ecab4e032cc227d69521bacadbc493cfbbe", "Apache-2.0 AND MIT"),
    DebianPin("golang-github-fsnotify-fsnotify-dev", "1.6.0-2",
              "pool/main/g/golang-fsnotify/golang-github-fsnotify-fsnotify-dev_1.6.0-2_all.deb",
              "ffa0b450cd65a4eb9f6ea0d196fc8dd2844c4cd0c0ef8ff359785684be703cc5", "BSD-3-Clause"),
    DebianPin("golang-github-google-uuid-dev", "1.3.0-1",
              "pool/main/g/golang-github-google-uuid/golang-github-google-uuid-dev_1.3.0-1_all.deb",
              "f79ead959ee04842fcb410347e7023a3c4c357c17f77b9bb13cff30ef4353351", "BSD-3-Clause"),
)

# Java libraries (upstream tarballs of Debian source packages; main and test sources). Not
# jline3 or jopt-simple: the JDK carries forks of them (jdk.internal.le, jdk.internal.opt).
PRIVATE_JAVA_ORIGS: tuple[DebianPin, ...] = (
    DebianPin("libcommons-lang3-java", "3.12.0-2+deb12u1",
              "pool/main/libc/libcommons-lang3-java/libcommons-lang3-java_3.12.0.orig.tar.xz",
              "f7c22574707611b63bae19ff17f59e24cdd32e2b0e61a50ec9b1b525fbc909d1", "Apache-2.0"),
    DebianPin("commons-io", "2.11.0-2",
              "pool/main/c/commons-io/commons-io_2.11.0.orig.tar.gz",
              "5a55361cf2b97228f94b3c65e3a4af784581debe322be551c44b2776db1c6483", "Apache-2.0"),
    DebianPin("libcommons-collections4-java", "4.2-1",
              "pool/main/libc/libcommons-collections4-java/libcommons-collections4-java_4.2.orig.tar.xz",
              "e6b25f22128d2b5e6181d9736f313103e079366013f853061aba16e8d4feb729", "Apache-2.0"),
    DebianPin("libcommons-codec-java", "1.15-1",
              "pool/main/libc/libcommons-codec-java/libcommons-codec-java_1.15.orig.tar.xz",
              "857c58c23bfe6b284b174d89f323de438042ce9a005b2a81afa658962caff90f", "Apache-2.0"),
    DebianPin("commons-csv", "1.9.0-1",
              "pool/main/c/commons-csv/commons-csv_1.9.0.orig.tar.xz",
              "661252998cf2b9aac1aa12fe9e104dc23190761a8971384f83a6c1fc02536867", "Apache-2.0"),
    DebianPin("commons-pool2", "2.11.1-1",
              "pool/main/c/commons-pool2/commons-pool2_2.11.1.orig.tar.xz",
              "16deaefe5bd9ec8f242b1836459f672a786382d1154971fc2488c65eb62ae36f", "Apache-2.0"),
    DebianPin("libjoda-time-java", "2.10.14-1",
              "pool/main/libj/libjoda-time-java/libjoda-time-java_2.10.14.orig.tar.xz",
              "600ab9a000b7c8ab4cb24e0fbd5c5ee6c4be46b97c55f90004df3cd1c56bd0b5", "Apache-2.0"),
    DebianPin("jsoup", "1.15.3-1",
              "pool/main/j/jsoup/jsoup_1.15.3.orig.tar.xz",
              "052511f0be47511f9b2a17d44fc1eccc4b5373e77cc5a3221e34b6af437e1e2e", "MIT"),
    DebianPin("jackson-core", "2.14.1-2~deb12u1",
              "pool/main/j/jackson-core/jackson-core_2.14.1.orig.tar.xz",
              "d9eb6aa1898c4d5a582c52e69da249efae25e4d2c809c57dc6b6ee01c4b0fb3b", "Apache-2.0"),
    DebianPin("javapoet", "1.13.0-1",
              "pool/main/j/javapoet/javapoet_1.13.0.orig.tar.xz",
              "b2181f46a78d1362df6ce422a07d00a9320a195fc15d412f26479e4781ffb276", "Apache-2.0"),
    DebianPin("jcommander", "1.71-4",
              "pool/main/j/jcommander/jcommander_1.71.orig.tar.xz",
              "76042dd8287e3feaae3693967aecc59dcb84475546b3dc87741c4ea3e0516071", "Apache-2.0"),
    DebianPin("args4j", "2.33-2",
              "pool/main/a/args4j/args4j_2.33.orig.tar.xz",
              "62dac627ebe5e7afb105640597c87f86b1458c583a6e477d1710fd198c48231e", "MIT"),
    DebianPin("libhamcrest-java", "2.2-1",
              "pool/main/libh/libhamcrest-java/libhamcrest-java_2.2.orig.tar.xz",
              "e43b1600718d13052a476640bfc5764eb536aac882d07948b5393ff4f13ec541", "BSD-3-Clause"),
    DebianPin("httpcomponents-core", "4.4.16-1",
              "pool/main/h/httpcomponents-core/httpcomponents-core_4.4.16.orig.tar.xz",
              "218c3e55024c077910f93ae3e4f28b10f5cc8876100b23e32dd306be022cbf8e", "Apache-2.0"),
)
