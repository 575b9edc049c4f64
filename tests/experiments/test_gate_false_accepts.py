"""experiments/gate_false_accepts.py's table: a key set that never passes the check counts among the
sets needing more than the default rounds and among those never passing, and its missing rounds and
false accepts stay out of the means."""

from experiments.gate_false_accepts import MAX_ROUNDS, table


def _row(variant, rounds, fa=0, failed=False):
    row = {"model": "default", "keys": 2, "variant": variant, "probe": 100_000, "seconds": 10.0}
    return {**row, "rounds": None, "failed": True} if failed else {**row, "rounds": rounds, "false_accepts": fa}


def test_failing_sets_are_counted_not_averaged():
    rows = [_row("check only", 1, fa=2), _row("check only", 9, fa=4), _row("check only", None, failed=True),
            _row("anchors", 1), _row("anchors", 1)]
    lines = table(rows).splitlines()
    assert f"never passing ({MAX_ROUNDS})" in lines[0]
    only = next(ln for ln in lines if "| check only |" in ln).split("|")
    assert [c.strip() for c in only[4:9]] == ["3", "5.0 / 9", "2", "1", "3.0 / 4"]
    anchors = next(ln for ln in lines if "| anchors |" in ln).split("|")
    assert [c.strip() for c in anchors[4:9]] == ["2", "1.0 / 1", "0", "0", "0.0 / 0"]
    assert "| – |" in table([_row("x", None, failed=True)])
