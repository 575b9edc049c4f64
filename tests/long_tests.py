"""The suite's list of long tests (issue 62): at the end of a run, every test whose phases
(setup + call + teardown) took over LONG_SECONDS, and whether it carries the `slow` mark — the
one real-subprocess test of a command, a real editor, a soak — which is how a long test is
allowed. Reported, never asserted: a time depends on the machine's load (docs/CONTRIBUTING.md
keeps the list of the marked ones). Works under pytest-xdist: the reports reach the controller."""

from __future__ import annotations

from collections import defaultdict

import pytest

LONG_SECONDS = 60.0


def pytest_addoption(parser) -> None:
    parser.addoption("--long-seconds", type=float, default=LONG_SECONDS,
                     help="list the tests whose phases took longer than this at the end (default 60)")


class LongTests:
    def __init__(self, limit: float = LONG_SECONDS) -> None:
        self.limit = limit
        self.seconds: dict[str, dict[str, float]] = defaultdict(dict)
        self.slow: set[str] = set()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[report.nodeid][report.when] = report.duration
        if "slow" in report.keywords:
            self.slow.add(report.nodeid)

    def long(self) -> list[tuple[float, str, dict[str, float]]]:
        rows = [(sum(p.values()), nodeid, p) for nodeid, p in self.seconds.items()]
        return sorted((r for r in rows if r[0] > self.limit), reverse=True)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter) -> None:
        rows = self.long()
        if not rows:
            return
        unmarked = sum(1 for _, nodeid, _ in rows if nodeid not in self.slow)
        terminalreporter.write_sep("=", f"tests over {self.limit:g} s: {len(rows)}, "
                                        f"{unmarked} not marked slow")
        for total, nodeid, phases in rows:
            mark = "slow" if nodeid in self.slow else "NOT MARKED"
            parts = ", ".join(f"{when} {s:.0f}" for when, s in phases.items() if s >= 1)
            terminalreporter.write_line(f"{total:7.1f} s  {mark:10}  {nodeid}  ({parts})")


def pytest_configure(config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without workers) reports
        config.pluginmanager.register(LongTests(config.getoption("--long-seconds")), "umbra-long-tests")
