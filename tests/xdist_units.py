"""How the suite runs on pytest-xdist workers (`-n N --dist loadfile`, as scripts/test does).

The unit of work is a test file: its tests run in one worker, in their order, so that its module-
scoped services and models start once. A directory whose tests must share one process would be one
unit (ONE_PROCESS_DIRS; none today: tests/securegate's leak scan runs after each of its files over
what that process's tests wrote, tests/securegate/needles.py). Units start longest first, by the
seconds each took when tests/unit_seconds.json was last written (`--store-unit-seconds`), so that
no long file is left to run alone at the end; a unit the file does not know is estimated from its
number of tests.

(xdist's own `--dist loadgroup` would do the grouping from markers, but with pytest 9.2 and
pytest-xdist 3.8 it ignores them: docs/CONTRIBUTING.md.)"""

from __future__ import annotations

import json
import statistics
from collections import OrderedDict, defaultdict
from pathlib import Path

from xdist.scheduler import LoadFileScheduling

SECONDS_FILE = Path(__file__).with_name("unit_seconds.json")
# Directories (under tests/) whose tests run in one worker, as one unit.
ONE_PROCESS_DIRS: tuple[str, ...] = ()


def unit_of(nodeid: str) -> str:
    """The unit a test id belongs to: its file, or its directory if that is one unit."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in ONE_PROCESS_DIRS:
        return "/".join(parts[:2])
    return path


def read_seconds(path: Path = SECONDS_FILE) -> dict[str, float]:
    return json.loads(path.read_text()) if path.exists() else {}


def longest_first(units: dict[str, dict], seconds: dict[str, float]) -> list[str]:
    """Unit names, the longest expected first; unknown units at the median seconds per test
    of the known ones (1 s each when none is known)."""
    per_test = [seconds[u] / len(ids) for u, ids in units.items() if u in seconds and ids]
    typical = statistics.median(per_test) if per_test else 1.0

    def expected(unit: str) -> float:
        return seconds.get(unit, typical * len(units[unit]))

    return sorted(units, key=lambda unit: -expected(unit))


class UnitScheduling(LoadFileScheduling):
    """LoadFileScheduling with the units and the order above."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def schedule(self) -> None:
        """xdist's LoadScopeScheduling.schedule with the units in longest_first order."""
        if self.collection is not None:  # the first distribution happened: more work, if any
            for node in self.nodes:
                self._reschedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(next(iter(self.registered_collections.values())))
        units: dict[str, dict[str, bool]] = {}
        for nodeid in self.collection:
            units.setdefault(unit_of(nodeid), {})[nodeid] = False
        self.workqueue = OrderedDict((unit, units[unit]) for unit in longest_first(units, read_seconds()))
        for _extra in range(len(self.nodes) - len(self.workqueue)):  # more workers than units
            idle, _nothing = self.assigned_work.popitem()
            idle.shutdown()
        for node in self.nodes:
            self._assign_work_unit(node)
        for node in self.nodes:  # a second unit where the first is almost done already
            self._reschedule(node)
        if not self.workqueue:
            for node in self.nodes:
                node.shutdown()


class UnitSeconds:
    """A plugin (`--store-unit-seconds`) in the process that receives every test's reports (the
    xdist controller, or the only process): adds up each unit's test time (set-up, call,
    tear-down) and merges it into the seconds file at the end of the session, dropping the units
    that are no more (a file removed, a directory no longer one unit)."""

    def __init__(self, path: Path = SECONDS_FILE) -> None:
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[unit_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        if self.seconds:
            measured = {unit: round(s, 1) for unit, s in self.seconds.items()}
            merged = {**read_seconds(self.path), **measured}
            root = self.path.parent.parent  # the repository (unit names are relative to it)
            dirs = {f"tests/{d}" for d in ONE_PROCESS_DIRS}
            kept = {unit: s for unit, s in merged.items()
                    if unit in dirs or (root / unit).is_file() and unit_of(unit) == unit}
            self.path.write_text(json.dumps(dict(sorted(kept.items())), indent=0) + "\n")
