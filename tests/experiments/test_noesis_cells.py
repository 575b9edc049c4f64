"""experiments/noesis_cells.py's document forms: a budget in the stripped form trains and evaluates on
the same documents as the raw one (those left with no code token dropped), their text in the form;
the raw budgets keep the keys their recorded rows carry."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from experiments import noesis
from experiments.noesis_cells import STRIPPED, Bench, Budget, _in_form, adapters_dir, subset
from experiments.stripped_form import stripped
from umbra.data.corpus import LANGS, Document, read_documents, write_documents

RESULTS = Path(__file__).resolve().parents[2] / "experiments" / "results" / "noesis.jsonl"
SOURCE = {"python": "import os\n\ndef f{i}(x):\n    # add\n    return x + {i}\n",
          "java": "class C{i} {{ // c\n  int f() {{ return {i}; }}\n}}\n",
          "go": "package p\n\n// F{i} doc\nfunc F{i}() string {{ return \"{i}\" }}\n"}
COMMENT = {"python": "# nothing but a comment\n", "java": "/* only */\n", "go": "// only\n"}


@pytest.fixture(scope="module")
def code_corpus(tmp_path_factory):
    """Real-looking code per language (and one comments-only file in each split and language)."""
    root = tmp_path_factory.mktemp("code-corpus")
    for lang in LANGS:
        for split, n in (("train", noesis.QUICK.train_docs[lang] + 3), ("test", noesis.QUICK.test_docs + 2)):
            docs = [Document(lang, f"{lang}/{split}/{i}", SOURCE[lang].format(i=i)) for i in range(n)]
            write_documents(root, split, lang, [*docs, Document(lang, f"{lang}/{split}/empty", COMMENT[lang])])
    return root


def test_the_stripped_budget_is_the_tables_but_for_the_form():
    assert STRIPPED == replace(Budget(), form="stripped")
    assert STRIPPED.key() != Budget().key() and adapters_dir(Path("o"), STRIPPED).name == f"adapters-{STRIPPED.key()}"


def test_the_raw_budgets_key_is_the_one_table_2s_recorded_rows_carry():
    keys = {json.loads(line)["budget"] for line in RESULTS.read_text().splitlines()
            if json.loads(line)["table"] == "2"}
    assert keys == {Budget().key()}  # adding the `form` field re-keyed none of the rows recorded before it


def test_a_stripped_bench_reads_the_same_documents_in_that_form(fim_qwen2_dir, code_corpus, tmp_path):
    quick = replace(noesis.QUICK, form="stripped")
    bench = Bench(fim_qwen2_dir, code_corpus, tmp_path, quick)
    for lang in LANGS:
        raw = {split: {d.path: d.text for d in read_documents(code_corpus, split, lang)} for split in ("train", "test")}
        # the tables' order of the documents, the comments-only one (nothing left to predict) dropped
        order = {split: [p for p in (d.path for d in subset([Document(lang, p, t) for p, t in docs.items()], None))
                         if not p.endswith("/empty")] for split, docs in raw.items()}
        k = quick.train_docs[lang]
        assert [d.path for d in bench.train[lang]] == order["train"][:k]
        assert [d.path for d in bench.unused[lang]] == order["train"][k:]
        assert [d.path for d in bench.test[lang]] == order["test"][: quick.test_docs]
        for split, docs in (("train", bench.train[lang]), ("train", bench.unused[lang]), ("test", bench.test[lang])):
            assert [d.text for d in docs] == [stripped(raw[split][d.path], lang) for d in docs]
        first = bench.train[lang][0].text
        assert ("<NUM_LIT>" in first or "<STR_LIT>" in first) and "\n" not in first


def test_an_unknown_form_is_refused():
    with pytest.raises(ValueError, match="unknown document form 'pretty': raw or stripped"):
        _in_form([Document("go", "a.go", "package a\n")], "pretty")
