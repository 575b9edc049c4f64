"""experiments/noesis_attack.py's fresh-members table: each seed trains its rows on its own draw of
the training documents (members and non-members drawn afresh), keeps that draw's adapters and
scores apart from the fixed subset's, and writes rows of its own table only."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest

from experiments import noesis
from experiments.noesis_attack import FRESH_MODELS, FRESH_TABLE, TABLE, plot_name, scores_path
from experiments.noesis_cells import FULL_DOMAINS, Bench, Budget, adapters_dir, subset
from tiny_models import CODE_SNIPPETS
from umbra.data.corpus import LANGS, Document, write_documents

QUICK = noesis.QUICK
UNUSED = 12  # training documents per language beyond what a draw trains on: the non-members


@pytest.fixture(scope="module")
def private_corpus(tmp_path_factory):
    """More training documents per language than QUICK trains on (the rest: non-members), and a test split."""
    root = tmp_path_factory.mktemp("private-corpus")
    rng = random.Random(3)
    for lang in LANGS:
        n = QUICK.train_docs[lang] + UNUSED
        write_documents(root, "train", lang,
                        [Document(lang, f"{lang}/train/{i}.src", "".join(rng.sample(CODE_SNIPPETS, 2))) for i in range(n)])
        write_documents(root, "test", lang,
                        [Document(lang, f"{lang}/test/{i}.src", "".join(rng.sample(CODE_SNIPPETS, 2))) for i in range(4)])
    return root


def _docs(n: int) -> list[Document]:
    return [Document("go", f"go/{i}.go", "package x\n") for i in range(n)]


def test_without_a_draw_the_subset_is_the_fixed_one_and_each_draw_is_another():
    docs = _docs(40)
    fixed = [d.path for d in subset(docs, 10)]
    assert fixed == [d.path for d in subset(list(reversed(docs)), 10)]  # an order of the paths, not of the list
    assert fixed == [d.path for d in subset(docs, 10, None)]
    draws = [[d.path for d in subset(docs, 10, draw)] for draw in (0, 1, 2)]
    assert len({tuple(fixed), *map(tuple, draws)}) == 4
    assert draws[0] == [d.path for d in subset(docs, 10, 0)]  # a draw is reproducible


def test_a_draws_rows_train_on_its_own_documents_and_keep_them_apart(fim_qwen2_dir, private_corpus, tmp_path):
    benches = {draw: Bench(fim_qwen2_dir, private_corpus, tmp_path, QUICK, draw=draw) for draw in (None, 0, 1)}
    for lang in LANGS:
        trained = {draw: {d.path for d in b.train[lang]} for draw, b in benches.items()}
        for draw, b in benches.items():
            assert len(trained[draw]) == QUICK.train_docs[lang]
            assert not trained[draw] & {d.path for d in b.unused[lang]}  # non-members: never trained on
        assert trained[0] != trained[1] and trained[0] != trained[None]
        assert [d.path for d in benches[0].test[lang]] == [d.path for d in benches[1].test[lang]]  # test fixed
    kept = f"adapters-{QUICK.key()}"  # not the tables' budget: its adapters apart from theirs
    assert {b.adapters.name for b in benches.values()} == {kept, f"{kept}-draw0", f"{kept}-draw1"}


def test_the_fresh_table_trains_per_draw_and_writes_its_own_rows(fim_qwen2_dir, private_corpus, tmp_path):
    out = tmp_path / "out"
    # the floor (experts alone) and NOESIS (a shared stage, then experts): each kind of row a draw
    # trains; that the table runs every one of FRESH_MODELS without --rows, and only those --rows
    # names: test_the_fresh_table_runs_only_the_chosen_models_each_seed_on_its_own_draw
    models = ("share_nothing", "noesis_12ep")
    noesis.main(["--table", "mia-fresh", "--quick", "--seeds", "0", "1", "--model", str(fim_qwen2_dir),
                 "--corpus-dir", str(private_corpus), "--out", str(out), "--rows", *models])
    rows = [json.loads(x) for x in (out / "quick.jsonl").read_text().splitlines()]
    assert {r["table"] for r in rows} == {FRESH_TABLE}
    pairs = {f"{t}<-{v}" for t in LANGS for v in LANGS if v != t}
    assert {(r["row"], r["seed"]) for r in rows} == {(f"{m}:{p}", s) for m in models for p in pairs for s in (0, 1)}
    assert all(0.0 <= r["auc"] <= 1.0 and r["members"] == r["nonmembers"] > 0 for r in rows)
    for seed in (0, 1):
        assert any((out / f"adapters-{QUICK.key()}-draw{seed}").iterdir())
        for m in models:
            assert scores_path(out, m, seed, QUICK.key(), FRESH_TABLE).exists()
            assert not scores_path(out, m, seed, QUICK.key(), TABLE).exists()
    fixed = out / f"adapters-{QUICK.key()}"
    assert not fixed.exists() or not any(fixed.iterdir())


def test_the_fresh_table_runs_only_the_chosen_models_each_seed_on_its_own_draw(monkeypatch, tmp_path):
    ran: list = []

    async def attack(bench, results, seed, table, models):
        ran.append((bench.draw, seed, table, models))

    monkeypatch.setattr(noesis, "Bench", lambda *a, draw=None, **kw: SimpleNamespace(draw=draw))
    monkeypatch.setattr(noesis, "attack", attack)
    noesis.main(["--table", "mia-fresh", "--rows", "noesis_12ep", "share_nothing", "--seeds", "1", "2",
                 "--out", str(tmp_path)])
    assert ran == [(s, s, FRESH_TABLE, ("share_nothing", "noesis_12ep")) for s in (1, 2)]  # the table's order
    ran.clear()
    noesis.main(["--table", "mia-fresh", "--seeds", "0", "--out", str(tmp_path)])
    assert ran == [(0, 0, FRESH_TABLE, FRESH_MODELS)]  # without --rows: every model of the table


def test_the_fresh_tables_plots_and_block_are_its_own(tmp_path):
    from experiments.noesis_report import BLOCKS, attack_fresh

    assert plot_name("noesis_12ep", 2, FRESH_TABLE) == "roc-fresh-noesis_12ep-s2.svg"
    assert plot_name("noesis_12ep", 2) == "roc-noesis_12ep-s2.svg"

    def row(table, model, seed, auc):
        return {"table": table, "row": f"{model}:go<-java", "seed": seed, "auc": auc, "tpr_at_1pct": 0.0,
                "members": 60, "nonmembers": 60, "budget": Budget().key()}

    rows = [row(TABLE, "share_nothing", 0, 0.6), row(FRESH_TABLE, "share_nothing", 0, 0.5),
            row(FRESH_TABLE, "noesis_12ep", 0, 0.52), {**row(FRESH_TABLE, "noesis_12ep", 1, 0.5), "members": 67}]
    lines = attack_fresh(rows)
    cells = [ln.split(" | ") for ln in lines[2:] if ln.startswith("| ")]
    assert [c[0].strip("| ") for c in cells] == ["share_nothing", "noesis_12ep"]  # the fixed table's row is not here
    assert cells[1][3] == "2.00 (1 of 2 seeds)"  # read against the fresh draw's own floor (52 − 50), not the fixed one's
    assert cells[1][6] == "60–67 / 60"  # each draw has its own count of short members
    assert "roc-fresh-share_nothing-s0.svg" in lines[-1]
    assert BLOCKS["attack-fresh"] is attack_fresh


def test_only_the_tables_budget_keeps_the_plain_adapters_folder(tmp_path):
    """A cell caches its adapters by configuration name: a budget trained on other documents (--quick's,
    the full domains') must not read or overwrite the tables' caches, nor a draw its budget's."""
    budgets = {"tables": Budget(), "quick": QUICK, "full": FULL_DOMAINS}
    names = {(b, draw): adapters_dir(tmp_path, budget, draw).name for b, budget in budgets.items() for draw in (None, 0)}
    assert names[("tables", None)] == "adapters" and names[("tables", 0)] == "adapters-draw0"
    assert names[("quick", None)] == f"adapters-{QUICK.key()}"
    assert names[("full", 0)] == f"adapters-{FULL_DOMAINS.key()}-draw0"
    assert len(set(names.values())) == len(names)


def test_a_budget_asking_for_more_documents_than_the_corpus_has_is_refused(fim_qwen2_dir, private_corpus, tmp_path):
    greedy = Budget(train_docs={**QUICK.train_docs, "go": QUICK.train_docs["go"] + UNUSED + 1}, test_docs=4)
    with pytest.raises(ValueError, match=f"go {QUICK.train_docs['go'] + UNUSED} < {QUICK.train_docs['go'] + UNUSED + 1}"):
        Bench(fim_qwen2_dir, private_corpus, tmp_path, greedy)
