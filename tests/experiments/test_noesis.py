"""experiments/noesis.py's runner: `--rows` names the rows each table really runs, refuses a row the
table does not have, and a cell outside the chosen rows is neither trained nor written; a row made
off the CPU records its device."""

from __future__ import annotations

import asyncio
import functools
import json
from dataclasses import asdict, replace
from types import SimpleNamespace

import pytest
import torch

from experiments import noesis
from experiments.noesis_cells import TABLE_BUDGETS, Budget


@pytest.mark.parametrize("table", ["2", "3", "eps", "long", "sweep", *TABLE_BUDGETS])
def test_rows_are_the_rows_each_table_runs(table, monkeypatch):
    seen: list[str] = []

    async def record(bench, results, table_, row, seed, make, same_as=None):
        seen.append(row)

    monkeypatch.setattr(noesis, "cell", record)
    run = {"2": noesis.table2, "3": noesis.table3, "eps": noesis.epsilons, "long": noesis.longer,
           "sweep": noesis.sweep, **{t: functools.partial(noesis.on_budget, table=t) for t in TABLE_BUDGETS}}[table]
    asyncio.run(run(SimpleNamespace(budget=Budget()), noesis.Results(None), 0))
    assert tuple(seen) == noesis.ROWS[table]


def test_a_row_the_table_lacks_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        noesis.main(["--table", "2", "--rows", "noesis", "nosuch"])
    assert exc.value.code == 2
    assert "table 2 has no rows ['nosuch']" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--rows", "noesis"], ["--table", "mia", "--rows", "noesis"]])
def test_rows_need_a_table_of_rows(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        noesis.main(argv)
    assert exc.value.code == 2
    assert "--rows needs a table of rows: 2, 3, 5, eps, long, sweep, mia-fresh, full" in capsys.readouterr().err


def test_only_the_chosen_rows_run(tmp_path):
    results = noesis.Results(tmp_path / "r.jsonl", frozenset({"noesis"}))
    bench = SimpleNamespace(budget=Budget(), device=None)
    made: list[str] = []

    def maker(row):
        async def make():
            made.append(row)
            return {"python": 1.0}, {}
        return make

    for row in ("base", "noesis"):
        asyncio.run(noesis.cell(bench, results, "2", row, 0, maker(row)))
    assert made == ["noesis"]
    rows = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [(r["row"], r["seed"], r["budget"]) for r in rows] == [("noesis", 0, Budget().key())]
    assert "device" not in rows[0]  # a CPU row looks as rows always did


@pytest.mark.parametrize("device,recorded", [(torch.device("cpu"), None), (torch.device("meta"), "meta")])
def test_a_row_made_off_the_cpu_says_where(tmp_path, device, recorded):
    results = noesis.Results(tmp_path / "r.jsonl")

    async def make():
        return {"python": 1.0}, {}

    asyncio.run(noesis.cell(SimpleNamespace(budget=Budget(), device=device), results, "2", "base", 0, make))
    (row,) = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert row.get("device") == recorded


def _recording_bench(calls: list, budget: Budget = Budget()):
    async def shared(family, epsilon, seed, epochs=None, **shape):
        calls.append(("shared", family, epsilon, epochs))
        return f"{family}@{epsilon}", {}

    async def experts(name, shared_, seed):
        calls.append(("experts", name, shared_))
        return {"go": f"{name}-go"}

    return SimpleNamespace(shared=shared, experts=experts, budget=budget)


def test_the_attacks_negative_control_is_table_2s_share_nothing_experts_alone():
    from experiments import noesis_attack

    calls: list = []
    shared, experts = asyncio.run(noesis_attack._model(_recording_bench(calls), "share_nothing", 1))
    assert shared == () and experts["go"] == "sn-s1-go"
    assert calls == [("experts", "sn-s1", ())]  # no stage 1; the same cache name as Table 2's row
    assert list(noesis_attack.MODELS)[0] == "share_nothing"  # the floor runs first

    calls.clear()
    shared, _ = asyncio.run(noesis_attack._model(_recording_bench(calls), "noesis_12ep", 2))
    assert shared == ("soft_prompt@1.0",)
    assert calls == [("shared", "soft_prompt", 1.0, noesis_attack.LONG_EPOCHS),
                     ("experts", "noesis-ep12-s2", ("soft_prompt@1.0",))]
    calls.clear()  # --quick checks the pipeline: its longer-trained rows train one epoch
    asyncio.run(noesis_attack._model(_recording_bench(calls, noesis.QUICK), "noesis_12ep", 2))
    assert calls[0] == ("shared", "soft_prompt", 1.0, 1.0)
    assert Budget().key() == "84f49845bf"  # the tables' rows keep the key they were recorded under


@pytest.fixture
def budgets_run(monkeypatch, tmp_path):
    """main_async with a Bench that records its budget and tables that run nothing: (table, quick) -> budget."""
    budgets: list = []

    class Recording:
        def __init__(self, model_dir, corpus_dir, out, budget, device=None, draw=None):
            budgets.append(budget)

    async def nothing(bench, results, seed, table=None):
        return None

    monkeypatch.setattr(noesis, "Bench", Recording)
    for name in ("on_budget", "table2"):
        monkeypatch.setattr(noesis, name, nothing)

    def run(table: str, quick: bool = False) -> Budget:
        asyncio.run(noesis.main_async(SimpleNamespace(threads=1, out=str(tmp_path), quick=quick, table=table,
                                                      device="cpu", rows=None, results="r.jsonl", model="m",
                                                      corpus_dir="c", seeds=[0])))
        return budgets[-1]
    return run


def test_each_table_runs_on_its_own_budget_at_the_tables_sampling_rate(budgets_run):
    tables = Budget()
    assert budgets_run("2") == tables
    for table, budget in TABLE_BUDGETS.items():
        assert budgets_run(table) == budget != tables
    docs = lambda b: sum(b.train_docs.values())  # noqa: E731
    q = lambda b: b.expected_batch / docs(b)  # noqa: E731
    rest = lambda b: {k: v for k, v in asdict(b).items() if k not in ("train_docs", "expected_batch", "form")}  # noqa: E731
    # the same sampling rate q = B / N (so the same σ for an ε), every other field Table 2's
    for budget in TABLE_BUDGETS.values():  # B a whole number of documents: within one of Table 2's q × N
        assert abs(budget.expected_batch - q(tables) * docs(budget)) < 1 and rest(budget) == rest(tables)
    full, stripped, scarce, scarce_java = (TABLE_BUDGETS[t] for t in ("full", "stripped", "stripped-scarce",
                                                                       "stripped-scarce-java"))
    assert full.form == "raw" and full.train_docs["python"] >= 10 * full.train_docs["go"] > 0
    assert stripped == replace(tables, form="stripped")
    # the paper's scarcity: Go 50 times scarcer than Python, Python and Java as in Table 2
    assert scarce.form == "stripped" and scarce.train_docs == {**tables.train_docs, "go": 30}
    assert scarce.train_docs["python"] == 50 * scarce.train_docs["go"]
    # ... and Java as scarce as Go, all else the scarce table's
    assert scarce_java.train_docs == {**scarce.train_docs, "java": 30}
    assert replace(scarce_java, train_docs=scarce.train_docs, expected_batch=scarce.expected_batch) == scarce


def test_quick_keeps_the_tables_document_form(budgets_run):
    assert budgets_run("stripped", quick=True) == replace(noesis.QUICK, form="stripped")
    assert budgets_run("2", quick=True) == noesis.QUICK
