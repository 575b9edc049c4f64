"""tests/long_tests.py, in a real pytest run of its own: a test over the limit is listed with its
`slow` mark or as not marked, a quick one is not listed, and a run with none over it prints no
list (the limit lowered to 0.2 s with --long-seconds, so that nothing here is long)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parent
_SAMPLE = '''
import time
import pytest

@pytest.mark.slow
def test_marked():
    time.sleep(0.4)

def test_unmarked():
    time.sleep(0.4)

def test_quick():
    pass
'''


def _run(tmp_path: Path, *select: str) -> str:
    (tmp_path / "test_sample.py").write_text(_SAMPLE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_TESTS), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "long_tests", "-p", "no:cacheprovider", "-p", "no:randomly",
           "--long-seconds", "0.2", "-W", "ignore::pytest.PytestUnknownMarkWarning", *select, "test_sample.py"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_long_tests_are_listed_with_their_mark(tmp_path):
    out = _run(tmp_path)
    assert "tests over 0.2 s: 2, 1 not marked slow" in out
    listed = [line for line in out.splitlines() if " s  " in line and "test_sample.py::" in line]
    assert any(" slow " in line and "::test_marked" in line for line in listed), out
    assert any("NOT MARKED" in line and "::test_unmarked" in line for line in listed), out
    assert not any("::test_quick" in line for line in listed), out


def test_no_list_when_nothing_is_long(tmp_path):
    out = _run(tmp_path, "-k", "quick")
    assert "tests over" not in out
