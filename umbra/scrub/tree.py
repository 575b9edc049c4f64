"""Scrub files and directory trees into a mirror: every input file's scrubbed copy lands under the
output directory at `<input name>/<path inside the input>`; inputs are only read.

Refused up front (`ScrubInputError`, nothing written): a missing input, two inputs with the same
name (their mirrors would collide), an output or report inside an input (it would change the
input and, re-run, scrub its own output), an input inside the output (its mirror would overwrite
it). Unreadable files stop the run with the path and the reason. Binary and non-UTF-8 files,
symbolic links and version-control directories (`.git`, `.hg`, `.svn`) are skipped and listed in
the report — never copied, since an unscrubbed copy would defeat the mirror."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from umbra.atomic import write_atomic
from umbra.scrub.errors import ScrubInputError
from umbra.scrub.report import ScrubReport
from umbra.scrub.scrubber import Scrubber

VCS_DIRS = frozenset({".git", ".hg", ".svn"})
_SNIFF_BYTES = 8192


def scrub_tree(inputs: list[Path], out: Path, scrubber: Scrubber, report_path: Path | None = None) -> ScrubReport:
    """Scrub every file under `inputs` into `out`; the report (also written to `report_path`)."""
    check_paths(inputs, out, report_path)
    report = ScrubReport()
    for source, rel in _walk(inputs, report):
        data = _read(source)
        if b"\0" in data[:_SNIFF_BYTES]:
            report.skip(rel, "binary")
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            report.skip(rel, "not UTF-8 text")
            continue
        result = scrubber.scrub(text, path=source.name)
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(dest, result.text.encode("utf-8"), mode=stat.S_IMODE(source.stat().st_mode) or 0o644)
        report.add(rel, result)
    if report_path is not None:
        report.write(report_path)
    return report


def check_paths(inputs: list[Path], out: Path, report_path: Path | None) -> None:
    """Refuse inputs and outputs that cannot be scrubbed safely (see the module docstring)."""
    if not inputs:
        raise ScrubInputError("nothing to scrub: no input paths")
    resolved_out = out.resolve()
    names: dict[str, Path] = {}
    for path in inputs:
        if not path.exists() and not path.is_symlink():
            raise ScrubInputError(f"no such file or directory: {path}")
        resolved = path.resolve()
        if resolved_out == resolved or resolved_out.is_relative_to(resolved):
            raise ScrubInputError(f"--out {out} lies inside the input {path}; choose a directory outside the inputs")
        if resolved.is_relative_to(resolved_out):
            raise ScrubInputError(f"the input {path} lies inside --out {out}; its mirror would overwrite it")
        if report_path is not None and report_path.resolve().is_relative_to(resolved):
            raise ScrubInputError(f"--report {report_path} lies inside the input {path}")
        name = resolved.name
        if name in names:
            raise ScrubInputError(
                f"inputs {names[name]} and {path} have the same name {name!r}; their mirrors would collide")
        names[name] = path
    if report_path is not None and report_path.resolve().parent == resolved_out and report_path.name in names:
        raise ScrubInputError(f"--report {report_path} would overwrite the mirror of input {names[report_path.name]}")


def _walk(inputs: list[Path], report: ScrubReport) -> Iterator[tuple[Path, str]]:
    """(file, its '/'-separated path in the mirror) for every regular file, in sorted order."""
    for root in inputs:
        name = root.resolve().name
        if root.is_symlink():
            report.skip(name, "symbolic link")
        elif root.is_file():
            yield root, name
        else:
            for dirpath, dirnames, filenames in os.walk(root):
                base = Path(dirpath)
                rel_dir = Path(name) / base.relative_to(root)
                for d in sorted(dirnames):
                    if d in VCS_DIRS:
                        report.skip((rel_dir / d).as_posix(), "version-control directory")
                    elif (base / d).is_symlink():
                        report.skip((rel_dir / d).as_posix(), "symbolic link")
                dirnames[:] = sorted(d for d in dirnames if d not in VCS_DIRS and not (base / d).is_symlink())
                for f in sorted(filenames):
                    source = base / f
                    if source.is_symlink():
                        report.skip((rel_dir / f).as_posix(), "symbolic link")
                    elif source.is_file():
                        yield source, (rel_dir / f).as_posix()
                    else:
                        report.skip((rel_dir / f).as_posix(), "not a regular file")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ScrubInputError(f"cannot read {path}: {exc.strerror or exc}") from None
