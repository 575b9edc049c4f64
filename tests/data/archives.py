"""Small local fixture archives for the private-domain tests: an `ar` writer (a .deb without
dpkg-deb), tarballs and sdists, and synthetic source files that pass the corpus filters."""

from __future__ import annotations

import io
import random
import tarfile
from pathlib import Path


def ar_archive(members: list[tuple[str, bytes]]) -> bytes:
    """A System V `ar` archive (the container format of a .deb)."""
    out = bytearray(b"!<arch>\n")
    for name, data in members:
        header = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode("ascii")
        out += header + data + (b"\n" if len(data) % 2 else b"")
    return bytes(out)


def tar_bytes(files: dict[str, bytes], mode: str = "w:xz", symlinks: dict[str, str] | None = None) -> bytes:
    """A tar archive (compressed per `mode`) holding `files`, plus optional symlinks."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tf.addfile(info)
    return buf.getvalue()


def write_deb(path: Path, files: dict[str, bytes], symlinks: dict[str, str] | None = None) -> Path:
    """A minimal .deb: debian-binary, control.tar.xz, data.tar.xz (paths like dpkg's `./usr/...`)."""
    control = tar_bytes({"./control": b"Package: golang-fixture-dev\nVersion: 1.0-1\nArchitecture: all\n"})
    data = tar_bytes({f"./{k}": v for k, v in files.items()}, symlinks={f"./{k}": v for k, v in (symlinks or {}).items()})
    path.write_bytes(ar_archive([("debian-binary", b"2.0\n"), ("control.tar.xz", control), ("data.tar.xz", data)]))
    return path


def write_tarball(path: Path, top: str, files: dict[str, str], mode: str = "w:gz") -> Path:
    """An upstream-style tarball: every file under the `top/` directory."""
    path.write_bytes(tar_bytes({f"{top}/{k}": v.encode("utf-8") for k, v in files.items()}, mode=mode))
    return path


def code_text(seed: int, lang: str = "python", lines: int = 30) -> str:
    """A synthetic source file with random identifiers: unrelated to any other seed's file."""
    rng = random.Random(seed)

    def name() -> str:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8))

    body = []
    for _ in range(lines):
        a, b, c, n = name(), name(), name(), rng.randint(0, 10_000)
        if lang == "python":
            body.append(f"def {a}({b}, {c}):\n    return {b} * {n} + {c}\n")
        elif lang == "go":
            body.append(f"func {a}({b}, {c} int) int {{\n\treturn {b}*{n} + {c}\n}}\n")
        else:
            body.append(f"    static int {a}(int {b}, int {c}) {{\n        return {b} * {n} + {c};\n    }}\n")
    if lang == "go":
        return "package fixture\n\n" + "\n".join(body)
    if lang == "java":
        return f"class C{name()} {{\n" + "\n".join(body) + "}\n"
    return "\n\n".join(body)


def lightly_edited(text: str) -> str:
    """A copy with a changed constant, a comment and a line appended: a near duplicate."""
    lines = text.splitlines(keepends=True)
    lines[3] = lines[3].replace("return", "return 1 +", 1)
    lines.insert(5, "# tweaked by hand\n")
    return "".join(lines) + "\n\ndef extra_helper(x):\n    return x\n"
