"""umbra/scrub/tree.py: a mirror of scrubbed copies; inputs untouched; unsafe paths refused."""

import json
import os
from pathlib import Path

import pytest

from umbra.scrub import Scrubber, ScrubInputError
from umbra.scrub.tree import scrub_tree


def _project(root: Path) -> Path:
    proj = root / "proj"
    (proj / "pkg").mkdir(parents=True)
    (proj / "pkg" / "db.py").write_text('PASSWORD = "hunter22x"\nHOST = "pg.prod.internal"\n')
    (proj / "README.md").write_text("Ask jane.doe@globex.io\n")
    (proj / ".env").write_text("DB_PASSWORD=^VGnjCMH&gY\n")
    (proj / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00secret")
    (proj / "latin1.txt").write_bytes("caf\xe9 password=hunter22x\n".encode("latin-1"))
    (proj / ".git").mkdir()
    (proj / ".git" / "config").write_text('url = "https://ghp_R8xkT2mQ9vLp4Zs7Wn1Yb6Hc3Jd5Fg0Ka2Eu@github.com/x"\n')
    os.symlink(proj / "pkg" / "db.py", proj / "link.py")
    return proj


def _snapshot(root: Path) -> dict:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def test_the_mirror_holds_scrubbed_copies_and_inputs_are_untouched(tmp_path):
    proj = _project(tmp_path / "in")
    before = _snapshot(proj)
    out = tmp_path / "out"
    report = scrub_tree([proj], out, Scrubber(), out / "report.json")
    assert _snapshot(proj) == before
    assert (out / "proj" / "pkg" / "db.py").read_text() == 'PASSWORD = "<SECRET>"\nHOST = "<HOST>"\n'
    assert (out / "proj" / "README.md").read_text() == "Ask <EMAIL>\n"
    assert (out / "proj" / ".env").read_text() == "DB_PASSWORD=<SECRET>\n"
    # never copied unscrubbed: binary, non-UTF-8, version control, links
    for name in ("logo.png", "latin1.txt", ".git", "link.py"):
        assert not (out / "proj" / name).exists()
    assert sorted((s["path"], s["reason"]) for s in report.skipped) == [
        ("proj/.git", "version-control directory"), ("proj/latin1.txt", "not UTF-8 text"),
        ("proj/link.py", "symbolic link"), ("proj/logo.png", "binary")]
    data = json.loads((out / "report.json").read_text())
    assert [f["path"] for f in data["files"]] == ["proj/.env", "proj/README.md", "proj/pkg/db.py"]
    assert data["totals"]["secret"] == 2 and data["totals"]["host"] == 1 and data["totals"]["email"] == 1


def test_a_single_file_input_lands_under_its_name(tmp_path):
    src = tmp_path / "settings.py"
    src.write_text('BASTION = "10.1.2.3"\n')
    scrub_tree([src], tmp_path / "out", Scrubber())
    assert (tmp_path / "out" / "settings.py").read_text() == 'BASTION = "<IP>"\n'


def test_unsafe_paths_are_refused_before_anything_is_written(tmp_path):
    proj = _project(tmp_path / "in")
    other = tmp_path / "other" / "proj"
    other.mkdir(parents=True)
    cases = [
        ([tmp_path / "missing"], tmp_path / "out", None, "no such file or directory"),
        ([proj], proj / "masked", None, "lies inside the input"),
        ([proj], proj, None, "lies inside the input"),
        ([proj], tmp_path / "in", None, "lies inside --out"),
        ([proj, other], tmp_path / "out", None, "the same name"),
        ([proj], tmp_path / "out", proj / "report.json", "--report .* lies inside the input"),
    ]
    for inputs, out, report, message in cases:
        with pytest.raises(ScrubInputError, match=message):
            scrub_tree(inputs, out, Scrubber(), report)
    assert not (tmp_path / "out").exists() and not (proj / "masked").exists()


def test_an_unreadable_file_stops_the_run_with_its_path(tmp_path):
    # /proc/self/mem is a regular file whose read fails (EIO), for root too
    with pytest.raises(ScrubInputError, match=r"cannot read /proc/self/mem: Input/output error"):
        scrub_tree([Path("/proc/self/mem")], tmp_path / "out", Scrubber())
