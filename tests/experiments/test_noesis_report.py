"""docs/noesis.md's writer (experiments/noesis_report.py): a table is drawn from the rows of the
current budget only, and a block with no such rows is left exactly as it was written."""

from __future__ import annotations

import json

from experiments.noesis_cells import Budget
from experiments.noesis_report import write_report

DOC = """# t
<!-- noesis-table2:begin -->
kept table 2
<!-- noesis-table2:end -->
<!-- noesis-attack:begin -->
old attack
<!-- noesis-attack:end -->
<!-- noesis-budget:begin -->
<!-- noesis-budget:end -->
"""


def _attack_row(budget: str, seed: int, auc: float) -> dict:
    return {"table": "mia-doc", "row": "noesis:python<-go", "seed": seed, "auc": auc, "auc_ci": [auc - 0.05, auc + 0.05],
            "tpr_at_1pct": 0.01, "tpr_ci": [0.0, 0.03], "raw_auc": 0.5, "members": 300, "nonmembers": 300,
            "budget": budget}


def _write(tmp_path, rows, blocks=None):
    results, doc = tmp_path / "r.jsonl", tmp_path / "noesis.md"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if not doc.exists():
        doc.write_text(DOC)
    kw = {} if blocks is None else {"blocks": blocks}
    return write_report(results, tmp_path / "out", doc, Budget(), **kw), doc.read_text()


def test_blocks_without_rows_of_this_budget_are_left_as_they_are(tmp_path):
    written, text = _write(tmp_path, [_attack_row("another-budget", 0, 0.9)])
    assert written == [] and "kept table 2" in text and "old attack" in text
    assert Budget().key() in text  # the budget block always states the budget


def test_a_block_with_rows_is_rewritten_and_the_others_kept(tmp_path):
    key = Budget().key()
    written, text = _write(tmp_path, [_attack_row(key, 0, 0.61), _attack_row("another-budget", 1, 0.99)])
    assert written == ["attack"] and "kept table 2" in text and "old attack" not in text
    assert "| noesis | python ← go | 61.00 [56.0, 66.0] |" in text and "99.00" not in text
    # asked for table 2 only: the attack block is not touched even though it has rows
    (tmp_path / "noesis.md").write_text(DOC)
    written, text = _write(tmp_path, [_attack_row(key, 0, 0.61)], blocks=("table2",))
    assert written == [] and "old attack" in text


def test_table3_lists_rows_and_their_parameter_counts_in_the_tables_order():
    from experiments.noesis_report import table3

    def row(name, seed, params):
        return {"table": "3", "row": name, "seed": seed, "accuracy": {"python": 40.0, "java": 50.0, "go": 60.0},
                "facts": {"parameters": params}}

    lines = table3([row("rc4", 0, 38912), row("pt32", 0, 8192), row("pt8", 0, 2048), row("pt8", 1, 2048)])
    text = "\n".join(lines)
    assert text.index("| pt8 |") < text.index("| pt32 |") < text.index("| rc4 |")
    assert lines[-1] == "Shared parameters: pt8 2,048, pt32 8,192, rc4 38,912"


def test_the_sweep_states_each_familys_clip_bound():
    from experiments.noesis_report import sweep

    def row(name, seed, clip=None):
        facts = {"parameters": 16400} | ({} if clip is None else {"clip_norm": clip})
        return {"table": "sweep", "row": name, "seed": seed, "accuracy": {"python": 40.0, "java": 50.0, "go": 60.0},
                "facts": facts}

    lines = sweep([row("deep_prompt@1", 0, 1e-3), row("deep_prompt@inf", 0), row("lora@1", 0), row("bottleneck@inf", 0)])
    assert lines[0].startswith("| family | parameters | C | ε=0.5 |")
    by_family = {line.split(" | ")[0][2:]: line.split(" | ")[2] for line in lines[2:]}
    assert by_family == {"deep_prompt": "0.001", "lora": "1", "bottleneck": "—"}  # older rows: the budget's C; ∞: none


def test_a_sweep_cell_over_fewer_seeds_than_the_others_says_how_many():
    from experiments.noesis_report import sweep

    def row(name, seed, acc):
        return {"table": "sweep", "row": name, "seed": seed, "accuracy": {"python": acc, "java": acc, "go": acc},
                "facts": {"parameters": 8192}}

    lines = sweep([row(r, s, 40.0 + s) for s in (0, 1, 2) for r in ("base", "soft_prompt@1")]
                  + [row("soft_prompt@2", s, 40.0 + s) for s in (0, 1)] + [row("soft_prompt@4", 0, 41.0)])
    cells = next(line for line in lines if line.startswith("| soft_prompt |")).split(" | ")[3:]
    assert cells[:4] == ["—", "41.00 ± 2.48", "40.50 ± 6.35 (n=2)", "41.00 (n=1)"]  # ε = 0.5 (none), 1, 2, 4


def test_the_attack_table_reads_each_row_against_the_negative_control_paired_by_seed():
    from experiments.noesis_report import attack

    def row(model, seed, auc):
        return {**_attack_row("k", seed, auc), "row": f"{model}:python<-go"}

    lines = attack([row("share_nothing", 0, 0.60), row("share_nothing", 1, 0.56), row("noesis", 0, 0.58),
                    row("noesis", 1, 0.59), row("noesis", 2, 0.70), row("noesis_12ep", 5, 0.9)])
    cols = {ln.split(" | ")[0].strip("| "): ln.split(" | ") for ln in lines if ln.startswith("| ") and "←" in ln}
    assert cols["share_nothing"][3] == "—"  # the floor itself
    # seeds 0 and 1 have a floor (−2 and +3 points: mean 0.5); seed 2 has none and is left out, and said so
    assert cols["noesis"][3].startswith("0.50 ± ") and cols["noesis"][3].endswith("(2 of 3 seeds)")
    assert cols["noesis_12ep"][3] == "—"  # no seed in common with the floor
    assert lines.index(next(ln for ln in lines if ln.startswith("| share_nothing"))) == 2  # listed first


def _acc_row(table: str, row: str, seed: int, budget: str, acc: dict) -> dict:
    return {"table": table, "row": row, "seed": seed, "accuracy": acc, "facts": {}, "budget": budget}


def test_the_full_domains_block_is_drawn_from_its_own_budgets_rows_only(tmp_path):
    from experiments.noesis_cells import FULL_DOMAINS

    doc = tmp_path / "noesis.md"
    doc.write_text(DOC + "<!-- noesis-full:begin -->\nold full\n<!-- noesis-full:end -->\n")
    full, tables = FULL_DOMAINS.key(), Budget().key()
    acc = lambda p, j, g: {"python": p, "java": j, "go": g}  # noqa: E731
    rows = [_acc_row("full", "share_nothing", s, full, acc(45.0, 56.0, 53.0)) for s in (0, 1)]
    rows += [_acc_row("full", "noesis", s, full, acc(45.5 + s / 10, 56.0, 53.0)) for s in (0, 1)]
    rows += [_acc_row("full", "noesis_nonprivate", s, full, acc(46.0, 56.0, 53.0)) for s in (0, 1)]
    rows += [_acc_row("full", "noesis", 2, tables, acc(99.0, 99.0, 99.0))]  # another budget's: not drawn
    written, text = _write(tmp_path, rows)
    assert written == ["full"] and "kept table 2" in text and "old full" not in text and "99.00" not in text
    assert "| NOESIS (pt32 DP + experts) | 1 | 45.55 ± 0.64 | 56.00 ± 0.00 | 53.00 ± 0.00 |" in text
    assert "| NOESIS − Share Nothing (points) | | 0.55 ± 0.64 |" in text
    assert "| share of the gap to non-private bridged | | 55 % |" in text
    assert f"key `{full}`: Table 2's but for the training documents (python 6,549 / java 2,703 / go 654) and the " \
        "expected batch (563)." in text
    assert Budget().key() in text  # the budget block still states the tables' budget


def test_with_one_seed_a_non_private_run_below_share_nothing_is_no_gap_not_noise():
    from experiments.noesis_report import table2

    acc = lambda g: {"python": 45.0, "java": 56.0, "go": g}  # noqa: E731
    rows = [_acc_row("2", "share_nothing", 0, "k", acc(53.0)), _acc_row("2", "noesis", 0, "k", acc(53.1)),
            _acc_row("2", "noesis_nonprivate", 0, "k", acc(52.8))]
    bridged = table2(rows)[-1]
    assert "— (no gap: non-private -0.20, one seed) |" in bridged and "within noise" not in bridged


def test_the_stripped_block_is_drawn_from_its_own_budgets_rows_only(tmp_path):
    from experiments.noesis_cells import FULL_DOMAINS, STRIPPED

    doc = tmp_path / "noesis.md"
    doc.write_text(DOC + "<!-- noesis-stripped:begin -->\nold\n<!-- noesis-stripped:end -->\n"
                   "<!-- noesis-full:begin -->\nkept full\n<!-- noesis-full:end -->\n")
    acc = lambda p, j, g: {"python": p, "java": j, "go": g}  # noqa: E731
    rows = [_acc_row("stripped", "share_nothing", 0, STRIPPED.key(), acc(60.0, 70.0, 50.0)),
            _acc_row("stripped", "noesis", 0, STRIPPED.key(), acc(60.5, 70.5, 53.0)),
            _acc_row("stripped", "noesis_nonprivate", 0, STRIPPED.key(), acc(61.0, 71.0, 54.0)),
            _acc_row("stripped", "noesis", 1, FULL_DOMAINS.key(), acc(99.0, 99.0, 99.0)),  # another budget's
            _acc_row("stripped", "noesis", 2, Budget().key(), acc(98.0, 98.0, 98.0))]  # the tables'
    written, text = _write(tmp_path, rows)
    assert written == ["stripped"] and "kept full" in text and "kept table 2" in text and "old\n" not in text
    assert "99.00" not in text and "98.00" not in text
    assert "| NOESIS − Share Nothing (points) | | 0.50 | 0.50 | 3.00 | | 1 |" in text
    assert "| share of the gap to non-private bridged | | 50 % (of 1.00, one seed) | 50 % (of 1.00, one seed) | " \
        "75 % (of 4.00, one seed) | | 1 |" in text
    assert f"Budget key `{STRIPPED.key()}`: Table 2's but for the documents' form (stripped, " \
        "experiments/stripped_form.py)." in text


def test_with_one_seed_a_share_bridged_names_the_gap_and_the_seed():
    from experiments.noesis_report import table2

    acc = lambda p: {"python": p, "java": 56.0, "go": 53.0}  # noqa: E731
    rows = [_acc_row("2", "share_nothing", 0, "k", acc(45.0)), _acc_row("2", "noesis", 0, "k", acc(45.3)),
            _acc_row("2", "noesis_nonprivate", 0, "k", acc(45.1))]
    assert "| share of the gap to non-private bridged | | 300 % (of 0.10, one seed) |" in table2(rows)[-1]


def test_what_dp_costs_is_noesis_minus_its_non_private_twin_paired_by_seed():
    from experiments.noesis_report import table2

    acc = lambda p: {"python": p, "java": 56.0, "go": 53.0}  # noqa: E731
    rows = [_acc_row("2", "share_nothing", s, "k", acc(45.0 + s)) for s in (0, 1)]
    rows += [_acc_row("2", "noesis", 0, "k", acc(45.2)), _acc_row("2", "noesis", 1, "k", acc(46.4))]
    rows += [_acc_row("2", "noesis_nonprivate", 0, "k", acc(45.5)), _acc_row("2", "noesis_nonprivate", 1, "k", acc(46.5))]
    cost = next(ln for ln in table2(rows) if ln.startswith("| NOESIS − non-private"))
    # seed 0: 45.2 − 45.5 = −0.3; seed 1: 46.4 − 46.5 = −0.1 → mean −0.2; Java and Go cost nothing
    assert cost.startswith("| NOESIS − non-private (points: what DP costs) | | -0.20 ± ")
    assert "| 0.00 ± 0.00 | 0.00 ± 0.00 | | 2 |" in cost


def test_the_gain_pairs_every_seed_with_both_runs_even_where_the_non_private_run_lags():
    from experiments.noesis_report import table2

    acc = lambda p: {"python": p, "java": 56.0, "go": 53.0}  # noqa: E731
    rows = [_acc_row("2", "share_nothing", s, "k", acc(45.0)) for s in (0, 1, 2)]
    rows += [_acc_row("2", "noesis", s, "k", acc(45.0 + (s + 1) / 10)) for s in (0, 1, 2)]
    rows += [_acc_row("2", "noesis_nonprivate", 0, "k", acc(45.4))]  # seeds 1 and 2 still training
    lines = table2(rows)
    gain = next(ln for ln in lines if ln.startswith("| NOESIS − Share Nothing"))
    bridged = next(ln for ln in lines if ln.startswith("| share of the gap"))
    assert gain.startswith("| NOESIS − Share Nothing (points) | | 0.20 ± ") and gain.endswith("| | 3 |")
    assert bridged == "| share of the gap to non-private bridged | | 25 % (of 0.40, one seed) | " \
        "— (no gap: non-private +0.00, one seed) | — (no gap: non-private +0.00, one seed) | | 1 |"


def test_without_any_non_private_run_the_gain_still_shows_and_nothing_is_bridged():
    from experiments.noesis_report import table2

    acc = lambda p: {"python": p, "java": 56.0, "go": 53.0}  # noqa: E731
    rows = [_acc_row("2", "share_nothing", 0, "k", acc(45.0)), _acc_row("2", "noesis", 0, "k", acc(45.3))]
    lines = table2(rows)
    assert lines[-1] == "| NOESIS − Share Nothing (points) | | 0.30 | 0.00 | 0.00 | | 1 |"
    assert not any("bridged" in ln or "what DP costs" in ln for ln in lines)
