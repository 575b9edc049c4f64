"""The line benchmark's tables (benchmarks/line_report.py): the largest, then latest complete run of
each identity, stamped with its commit and date."""

from __future__ import annotations

from line_report import latest_runs, render


def _run(run_id, commit, date, exact, positions=4):
    stamp = {"run": run_id, "model": "m", "commit": commit, "set": "test", "seed": 0, "date": date}
    cell = {"record": "cell", **stamp, "lang": "python", "kind": "after-indent", "mode": "line", "suffix": "with",
            "n": 4, "exact": exact, "accepted": exact, "blank_start": 4 - exact, "ws_start": 4 - exact, "empty": 0,
            "edit_sim": 0.5, "p50_ms": 10.0, "p95_ms": 20.0, "identical": 4}
    run = {"record": "run", **stamp, "positions": positions, "languages": ["python"], "max_tokens": 64, "threads": 1,
           "label": "", "machine": "a machine", "command": "python benchmarks/line_completion.py",
           "drawn": {"python": {"after-indent": 4}}, "skipped": {"python": {"x": 1}}, "seconds": 60}
    return [cell | {"path": "serve"}, cell | {"path": "local"}, run]


def test_tables_show_the_largest_then_latest_complete_run_of_each_identity_stamped():
    old = _run("r1", "abc1234", "2026-01-01 10:00", 0)
    new = _run("r2", "abc1234", "2026-01-02 10:00", 1)
    after = _run("r3", "def5678+dirty", "2026-01-03 10:00", 3, positions=8)
    quick = _run("r5", "def5678+dirty", "2026-01-04 10:00", 2)  # a smaller draw: part of r3's
    unfinished = [after[0] | {"run": "r4", "commit": "0000000"}]  # cells without their run record
    rows = old + new + after + quick + unfinished
    assert [r["run"] for r in latest_runs(rows)] == ["r2", "r3"]
    text = render(rows)
    assert "0000000" not in text and "2026-01-01" not in text and "2026-01-04" not in text
    assert "| python | after-indent | line | with | 4 | 25 | 25 |" in text
    assert "| python | after-indent | line | with | 4 | 75 | 75 |" in text
    assert "| m @ def5678+dirty, test, seed 0, 8 positions, 2026-01-03 10:00 | python | 75 | 75 | 25 |" in text
    assert text.index("abc1234, test, seed 0, 4 positions, 2026-01-02") < text.index("def5678")


# -- the command line --------------------------------------------------------------------------
