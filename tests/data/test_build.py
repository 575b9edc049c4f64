"""umbra.data.build: the apt calls that install the Debian source trees retry while apt is busy."""

from __future__ import annotations

import sys

import pytest

from umbra.data.build import _run_apt
from umbra.errors import ConfigError


def _flaky_command(tmp_path, failures: int) -> list[str]:
    """A command that fails its first `failures` runs (as apt does while its lock is held)."""
    counter = tmp_path / "runs"
    script = (f"import pathlib,sys; p=pathlib.Path({str(counter)!r}); "
              f"n=int(p.read_text()) if p.exists() else 0; p.write_text(str(n+1)); "
              f"sys.exit(1 if n < {failures} else 0)")
    return [sys.executable, "-c", script]


def test_a_busy_apt_is_retried_until_it_succeeds(tmp_path):
    _run_apt(_flaky_command(tmp_path, failures=2), attempts=3, pause_s=0)
    assert (tmp_path / "runs").read_text() == "3"


def test_apt_still_failing_after_every_attempt_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="failed"):
        _run_apt(_flaky_command(tmp_path, failures=5), attempts=2, pause_s=0)
    assert (tmp_path / "runs").read_text() == "2"
