"""experiments/private_mode.py's results: a seed-invariant cell (the base model) takes another
seed's measured rows as its own, marked; every other cell is measured at each of its seeds."""

from __future__ import annotations

import json

from experiments.private_mode import Results

from umbra.attack_grid.frontier import VARIANTS, Cell


def _row(cell: Cell, measure: str, value, **extra) -> dict:
    return {"cell": cell.key, "variant": cell.variant.name, "epsilon": None, "seed": cell.seed, "measure": measure,
            "value": value, **extra}


def test_the_base_model_adopts_another_seeds_measures(tmp_path):
    results = Results(tmp_path / "r.jsonl", "run1")
    base0, base2 = Cell(VARIANTS["base"], None, 0), Cell(VARIANTS["base"], None, 2)
    results.add(_row(base0, "utility", {"top1": 53.6}))
    (tmp_path / "r.jsonl").open("a").write(json.dumps({"run": "other", **_row(base0, "oracle", {"x": 1})}) + "\n")
    left = results.adopt_from_another_seed(base2, ["utility", "oracle"])
    assert left == ["oracle"]  # the other run's row is not this run's
    copied = [r for r in results.rows() if r["seed"] == 2]
    assert copied == [{"run": "run1", **_row(base2, "utility", {"top1": 53.6}), "same_as": base0.key}]
    base1 = Cell(VARIANTS["base"], None, 1)
    assert results.adopt_from_another_seed(base1, ["utility"]) == []
    assert [r["same_as"] for r in results.rows() if r["seed"] == 1] == [base0.key]  # from the measured row


def test_a_tuned_cell_is_measured_at_every_seed(tmp_path):
    results = Results(tmp_path / "r.jsonl", "run1")
    fclean0, fclean1 = Cell(VARIANTS["fclean"], None, 0), Cell(VARIANTS["fclean"], None, 1)
    results.add(_row(fclean0, "utility", {"top1": 53.1}))
    assert results.adopt_from_another_seed(fclean1, ["utility"]) == ["utility"]
    assert len(results.rows()) == 1
