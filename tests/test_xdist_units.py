"""tests/xdist_units.py, the suite's own scheduling: a test's unit is its file (or its directory
when that is one unit), units start longest first with unknown ones estimated per test, and the
stored seconds keep only units that still are (a removed file, a directory no longer one unit)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import xdist_units
from xdist_units import UnitSeconds, longest_first, unit_of


def test_a_tests_unit_is_its_file_or_its_one_process_directory(monkeypatch):
    assert unit_of("tests/lsp/test_lsp_inline.py::test_x[a]") == "tests/lsp/test_lsp_inline.py"
    monkeypatch.setattr(xdist_units, "ONE_PROCESS_DIRS", ("securegate",))
    assert unit_of("tests/securegate/test_gate.py::test_y") == "tests/securegate"


def test_longest_first_with_unknown_units_at_the_median_per_test():
    units = {"a.py": ["a1"], "b.py": ["b1", "b2"], "new.py": ["n1", "n2", "n3", "n4"]}
    seconds = {"a.py": 10.0, "b.py": 4.0}  # 10 and 2 s per test: median 6, new.py ~24 s
    assert longest_first(units, seconds) == ["new.py", "a.py", "b.py"]


def test_stored_seconds_drop_the_units_that_are_no_more(tmp_path, monkeypatch):
    monkeypatch.setattr(xdist_units, "ONE_PROCESS_DIRS", ())
    (tmp_path / "tests" / "securegate").mkdir(parents=True)
    (tmp_path / "tests" / "test_kept.py").write_text("")
    (tmp_path / "tests" / "securegate" / "test_gate.py").write_text("")
    seconds = tmp_path / "tests" / "unit_seconds.json"
    seconds.write_text(json.dumps({"tests/test_kept.py": 3.0, "tests/test_removed.py": 9.0, "tests/securegate": 99.0}))
    plugin = UnitSeconds(seconds)
    for nodeid, duration in (("tests/securegate/test_gate.py::t", 1.25), ("tests/securegate/test_gate.py::t", 0.5)):
        plugin.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, duration=duration))
    plugin.pytest_sessionfinish()
    assert json.loads(seconds.read_text()) == {"tests/securegate/test_gate.py": 1.8, "tests/test_kept.py": 3.0}
