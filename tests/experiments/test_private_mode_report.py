"""The frontier report's summary (experiments/private_mode_report.py): each row's gain is taken
against the client-alone control tuned as long as it, and a row whose attacks held without an
adaptive attack measured is marked so, in the table and in the product's measured records."""

from __future__ import annotations

from experiments.private_mode_report import measured, summarize, tables
from umbra.attack_grid.frontier import FrontierParams


def _score(recovery: float) -> dict:
    return {"recovery": recovery}


def _rows(variant: str, eps, top1: float, attacks: dict | None = None, decipher: dict | None = None) -> list[dict]:
    cell = dict(run="r", cell=variant, variant=variant, epsilon=eps, seed=0, tune_seconds=1.0, seconds=1.0)
    rows = [{**cell, "measure": "utility", "value": {"top1": top1, "languages": {}}}]
    if attacks is not None:
        rows.append({**cell, "measure": "attacks", "value": attacks})
    if decipher is not None:
        rows.append({**cell, "measure": "decipher", "value": decipher})
    return rows


def test_gains_are_against_the_control_of_the_same_budget_and_per_position_holds_are_marked():
    held = {"baseline": _score(0.092), "(a)": _score(0.05)}
    rows = (_rows("client_alone", None, 31.7) + _rows("client_alone@1000", None, 35.6)
            + _rows("noir+clean+noise1", 1024.0, 28.2, held, {"10x": _score(0.008)})
            + _rows("noir+clean+noise1@1000", 1024.0, 33.6, held)
            + _rows("noir+stuning", 1024.0, 36.3, {"baseline": _score(0.092), "(a)": _score(0.58)}))
    by = {r["variant"]: r for r in summarize(rows)}
    assert by["noir+clean+noise1"]["gain"] == [28.2 - 31.7]
    assert by["noir+clean+noise1@1000"]["gain"] == [33.6 - 35.6]  # the 1,000-step control, not the 300-step one
    assert by["noir+clean+noise1"]["holds"] and by["noir+clean+noise1"]["adaptive"]
    assert by["noir+clean+noise1@1000"]["holds"] and not by["noir+clean+noise1@1000"]["adaptive"]
    assert by["noir+stuning"]["holds"] is False
    table = tables(list(by.values()))
    assert table.count("✓ per-position only") == 1 and table.count("| ✓ |") == 1
    records = {r["label"]: r for r in measured(list(by.values()), FrontierParams()).values()}
    clean = next(r for k, r in records.items() if "clean residual, keyed" in k)
    longer = next(r for k, r in records.items() if "1,000 steps" in k)
    assert clean["adaptive"] and clean["client_alone_top1"] == 31.7
    assert not longer["adaptive"] and longer["client_alone_top1"] == 35.6


def test_the_decipherment_at_a_volume_is_the_best_at_that_volume_or_a_smaller_one():
    from experiments.private_mode_report import decipher_envelope

    raw = {"100x": _score(0.0003), "1x": _score(0.025), "10x": _score(0.29)}
    env = decipher_envelope(raw)
    assert [env[k]["recovery"] for k in ("1x", "10x", "100x")] == [0.025, 0.29, 0.29]
    assert env["100x"]["from"] == "10x" and "from" not in env["10x"]
    rows = (_rows("client_alone", None, 31.7)
            + _rows("noir+path+noise1", 1024.0, 20.0, {"baseline": _score(0.092)}, raw))
    rec = next(r for r in summarize(rows) if r["variant"] == "noir+path+noise1")
    assert rec["attacks"]["decipher@100x"] == rec["attacks"]["decipher@10x"] == rec["strongest"] == [100 * 0.29]


def test_a_rewrite_keeps_what_was_measured_earlier_and_takes_each_attacks_worst_seed():
    from experiments.private_mode_report import KEPT_SOURCE, merge_measured

    def rec(top1, attacks, seeds, adaptive=True):
        return {"label": "x", "attacks": attacks, "baseline": 9.2, "holds": max(attacks.values()) <= 10.2,
                "top1": top1, "client_alone_top1": 31.7, "fclean_top1": 53.1, "seeds": seeds,
                "adaptive": adaptive, "source": "docs/privacy/frontier.md"}

    earlier = {"lost": rec(3.2, {"(a)": 0.0, "decipher@100x": 1.1}, 1),
               "both": rec(15.9, {"(a)": 0.6, "decipher@100x": 42.2, "shadow": 0.6}, 1)}
    now = {"both": rec(17.1, {"(a)": 3.9, "decipher@100x": 41.7}, 3, adaptive=True),
           "new": rec(28.0, {"(a)": 0.2}, 2, adaptive=False)}
    merged = merge_measured(earlier, now)
    assert merged["lost"] == {**earlier["lost"], "source": KEPT_SOURCE}  # no committed rows: kept, marked
    assert merged["new"] == now["new"]
    both = merged["both"]
    assert both["top1"] == 17.1 and both["seeds"] == 3 and both["source"] == "docs/privacy/frontier.md"
    assert both["attacks"] == {"(a)": 3.9, "decipher@100x": 42.2, "shadow": 0.6}  # each attack's worst seed
    assert both["holds"] is False and both["adaptive"]
    # a record that held on the committed rows but not on an earlier seed does not hold
    flip = merge_measured({"k": rec(5.0, {"(a)": 30.0}, 1)}, {"k": rec(5.0, {"(a)": 1.0}, 3)})["k"]
    assert flip["holds"] is False and flip["attacks"] == {"(a)": 30.0}
    # idempotent: rewriting from the same rows changes nothing
    assert merge_measured(merged, now) == merged


def test_the_plot_shows_configurations_measured_only_earlier_hollow(tmp_path):
    from experiments.private_mode_report import frontier_svg

    rows = _rows("client_alone", None, 31.7) + _rows("noir+clean+noise1", 1024.0, 28.2, {"baseline": _score(0.092),
                                                                                        "(a)": _score(0.005)})
    kept = [{"label": "NOIR + private local path, keyed noise s = 4", "top1": 3.2, "attacks": {"(a)": 1.1},
             "source": "x"}]
    frontier_svg(summarize(rows), tmp_path / "f.svg", kept)
    svg = (tmp_path / "f.svg").read_text()
    assert svg.count('fill="none" stroke="#d60"') == 1 and "keyed noise s = 4 (seed 0)" in svg
    assert "rows not kept" in svg


def test_rows_follow_the_variants_order_then_epsilon_ascending():
    rows = _rows("client_alone", None, 31.7)
    for eps in (1024.0, 13.0, 4.0, 27.0, 1.0):
        rows += _rows("noir", eps, 2.0)
    rows += _rows("base", None, 53.6)
    order = [(r["variant"], r["epsilon"]) for r in summarize(rows)]
    assert order == [("base", None), ("client_alone", None)] + [("noir", e) for e in (1.0, 4.0, 13.0, 27.0, 1024.0)]
