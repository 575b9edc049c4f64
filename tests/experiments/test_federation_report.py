"""experiments/federation_report.py's Fig. 2 and canary_measures.split_inference / greedy_by: the
canaries the scrubber removes and those it misses are counted apart, per route, from the attack's own
ranks and the greedy completions."""

from types import SimpleNamespace

import pytest

from experiments.canary_measures import greedy_by, split_inference
from experiments.federation_report import fig2, group_leak, pooled_fig2, residue_line


def _sets(values):
    return [SimpleNamespace(canary=SimpleNamespace(value=v)) for v in values]


def test_split_inference_counts_each_group_from_the_ranks():
    result = SimpleNamespace(ranks=(1, 3, 1, 1, 7))
    got = split_inference(result, _sets("abcde"), {"removed": {"a", "b"}, "missed": {"c", "d", "e"}})
    assert got == {"removed": {"correct": 1, "trials": 2}, "missed": {"correct": 2, "trials": 3}}
    with pytest.raises(ValueError):
        split_inference(result, _sets("abc"), {"removed": {"a"}})


def _leak(removed, missed, gen=0, hit=0):
    return {"c50": {"correct": removed[0] + missed[0], "trials": removed[1] + missed[1]},
            "c50_by": {"removed": {"correct": removed[0], "trials": removed[1]},
                       "missed": {"correct": missed[0], "trials": missed[1]}},
            "extraction": {"generated": gen, "true_found": hit, "canaries": removed[1] + missed[1]},
            "extraction_by": {"removed": {"generated": 0, "true_found": 0, "canaries": removed[1]},
                              "missed": {"generated": gen, "true_found": hit, "canaries": missed[1]}},
            "greedy": {"all": {"canaries": removed[1] + missed[1], "exact": 1, "half": 2, "chars": 0.2},
                       "missed": {"canaries": missed[1], "exact": 1, "half": 2, "chars": 0.4}}}


def _cell(secure_missed):
    u = {"loss": 3.0, "top1": 0.5, "tokens": 100}
    org = {"utility": {"global": u, "secure_route": u},
           "groups": {"removed": ["api_key", "host"], "missed": ["codename"]},
           "residue": {"api_key": [0, 10], "codename": [10, 10]},
           "leak": {"right": _leak((3, 10), (4, 10), gen=4, hit=2), "secure": _leak((0, 10), secure_missed),
                    "global": _leak((0, 10), (0, 10))}}
    return {"per_org": {"a": org, "b": org}}


def test_fig2_has_one_row_per_condition_and_group_with_the_pooled_counts():
    scrubbed, dp = _cell((5, 10)), _cell((0, 10))
    assert group_leak(scrubbed, "secure", "missed") == (10, 20)
    assert group_leak(scrubbed, "secure", "removed") == (0, 20)
    lines = fig2([("scrubbing", scrubbed), ("scrubbing + DP", dp)])
    rows = lines[2:]
    assert len(rows) == 4
    assert rows[0].startswith("| scrubbing | removed by the scrubber (api key, host) |")
    assert "missed by the scrubber (codename)" in rows[1] and "| 50.0 % [" in rows[1]
    assert "| 40.0 % [" in rows[1] and "50.0 % / 20.0 % (4 of 8)" in rows[1]  # right key: 8 of 20 picked; 4 true of 8
    assert "greedy ≥ ½: 4 of 20, whole 2, 40 % of chars" in rows[1]  # two organizations pooled
    assert "greedy" not in rows[0]  # the removed group was not measured greedily in this cell
    assert rows[3].split("|")[5].strip().startswith("0.0 % [")  # under DP: wrong / no key, missed: 0 of 20
    assert residue_line(scrubbed).endswith("api key 0 of 20, codename 20 of 20.")


def test_fig2_pooled_over_seeds_sums_the_complete_seeds_only():
    def cells(missed):
        return [dict(_cell(missed), cell=c) for c in ("f2:raw", "t1:SecureFedNesterov", "f2:dp")]

    s = {"dp_epsilon": 8.0}
    assert pooled_fig2({0: cells((5, 10))}, s) == []  # one seed: nothing to pool
    lines = pooled_fig2({0: cells((5, 10)), 1: cells((1, 10)), 2: cells((9, 10))[:2]}, s)
    assert "seeds 0, 1 (4 organization-runs" in lines[1]
    missed = [ln for ln in lines if "missed by the scrubber" in ln]
    assert len(missed) == 3 and missed[0].split("|")[5].strip().startswith("30.0 % [")  # (5+5+1+1) of 40
    no_control = {seed: cells(m)[1:] for seed, m in enumerate([(5, 10), (1, 10), (9, 10)])}  # no f2:raw anywhere
    lines = pooled_fig2(no_control, s)
    assert "seeds 0, 1, 2 (6 organization-runs" in lines[1]
    assert [ln.split("|")[1].strip() for ln in lines[5:] if ln.split("|")[1].strip()] == ["scrubbing",
                                                                                          "scrubbing + DP (ε = 8)"]


def test_greedy_by_measures_every_group_from_the_same_completions():
    canaries = [SimpleNamespace(value=v) for v in ("abcd", "wxyz", "1234")]
    got = greedy_by(["abcd!", "wx--", "x"], canaries, {"removed": {"abcd"}, "missed": {"wxyz", "1234"}, "none": set()})
    assert got["all"] == {"canaries": 3, "exact": 1, "half": 2, "chars": pytest.approx(0.5)}
    assert got["removed"]["exact"] == 1 and got["missed"] == {"canaries": 2, "exact": 0, "half": 1, "chars": 0.25}
    assert "none" not in got


def _t1_org(global_loss: float, local_loss: float, right: int):
    u = lambda loss: {"loss": loss, "top1": 0.5, "tokens": 100}  # noqa: E731
    leak = lambda k: {"c50": {"correct": k, "trials": 10}}  # noqa: E731
    return {"utility": {"global": u(global_loss), "base": u(2.0), "global_others": u(global_loss),
                        "local_others": u(local_loss), "base_others": u(2.0)},
            "leak": {"right": leak(right), "secure": leak(1), "global": leak(0)}}


def test_pooled_tables_sum_counts_over_seeds_and_average_perplexity_ratios():
    import math

    from experiments.federation_report import pooled_tables

    by_seed = {s: [{"cell": "t1:FedAvg", "per_org": {"a": _t1_org(2.0 + math.log(1 + d), 2.1, 3),
                                                      "b": _t1_org(2.0 + math.log(1 + d), 1.9, 5)}}]
               for s, d in ((0, -0.02), (1, -0.04))}
    by_seed[2] = [{"cell": "f5:3", "per_org": {"a": _t1_org(2.0, 2.1, 1)}}]  # one seed only: not pooled
    lines = pooled_tables(by_seed)
    row = next(x for x in lines if x.startswith("| FedAvg |"))
    cols = [c.strip() for c in row.split("|")[1:-1]]
    assert cols[1].startswith("-3.0 ± ")  # the mean over seeds of -2 % and -4 % against the base
    assert cols[3] == "2 of 4"  # global beats local where local's loss is higher (org a of each seed)
    assert cols[4].startswith("40.0 % [")  # right key: (3 + 5) · 2 of 40
    assert cols[7] == "0, 1"
    assert not any(x.startswith("| 3 |") for x in lines)
