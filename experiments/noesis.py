"""NOESIS's tables (seed 000 Tables 2, 3, 5 and App. C.4; seed 002's DP × PEFT sweep) on the
embedded default model and the private domains of `umbra data private`.

    python experiments/noesis.py --table 2 --seeds 0 1 2          # train + evaluate, resumable
    python experiments/noesis.py --table 3 | 5 | eps | long | sweep | mia | mia-fresh --seeds 0 1 2
    python experiments/noesis.py --table full | stripped | stripped-scarce | stripped-scarce-java --seeds 0 1 2
    python experiments/noesis.py --write [BLOCK ...]              # tables and plots -> docs/noesis.md

Each (table, row, seed) cell is trained once, evaluated per language (top-1 next-token accuracy
on the first 128-token block of 200 test documents per language) and appended to
RESULTS (experiments/results/noesis.jsonl, committed, so the tables' raw rows outlive the machine);
a rerun skips finished cells, so a long grid resumes across sessions. Trained
adapters are kept under OUT/adapters for the cells that reuse them. The budget (noesis_cells.Budget)
is the same for every row and written beside the tables. The tables of noesis_cells.TABLE_BUDGETS rerun
Table 2's NOESIS rows and their controls on another budget, each with its adapters kept apart: `full`
on every training document, `stripped` on Table 2's documents in the stripped and tokenized form of
seed 000's data, `stripped-scarce` so and with Go 50 times scarcer than Python, as in the paper, `stripped-scarce-java`
so and with Java as scarce as Go."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.noesis_attack import FRESH_MODELS, FRESH_TABLE, attack, long_epochs  # noqa: E402
from experiments.noesis_cells import EXPERTS, TABLE_BUDGETS, Bench, Budget, ran_where  # noqa: E402
from umbra.data.corpus import LANGS  # noqa: E402
from umbra.model.device import resolve_device  # noqa: E402

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, math.inf)
SWEEP_FAMILIES = ("soft_prompt", "deep_prompt", "lora", "bottleneck", "full")
QUICK = Budget(train_docs={"python": 40, "java": 20, "go": 10}, test_docs=20, expected_batch=8, epochs=0.5,
               expert_epochs=1, expert_doc_chars=300, long_epochs=1.0)
TABLE3 = {"pt8": ("soft_prompt", {"prompt_length": 8}), "pt32": ("soft_prompt", {"prompt_length": 32}),
          "pt120": ("soft_prompt", {"prompt_length": 120}), "rc1": ("lora", {"rank": 1}),
          "rc4": ("lora", {"rank": 4}), "rc64": ("lora", {"rank": 64})}


TABLE2_ROWS = ("base", "share_nothing", "prompt_only_dp", "noesis", "noesis_nonprivate", "common_lora_dp",
               "monolithic_dp", "solo_dp")
# Table 2's NOESIS rows and their controls: the rows of the tables of another budget (TABLE_BUDGETS)
BUDGET_ROWS = ("base", "share_nothing", "prompt_only_dp", "noesis", "noesis_nonprivate")


def _eps_row(eps: float) -> str:
    return "inf" if math.isinf(eps) else f"{eps:g}"


EPS_ROWS = (2.0, 4.0, 8.0, 16.0, 32.0)  # Table 2 holds ε = 1 and ∞
ROWS = {"2": TABLE2_ROWS, "3": tuple(TABLE3), "5": ("noesis", "without_prompt", "without_experts"),
        "eps": tuple(f"noesis@{e:g}" for e in EPS_ROWS),
        "long": ("noesis_12ep", "noesis_nonprivate_12ep"),
        "sweep": ("base", *(f"{f}@{_eps_row(e)}" for f in SWEEP_FAMILIES for e in EPSILONS)),
        "mia-fresh": FRESH_MODELS,  # its rows: the models attacked (each over every language pair)
        **dict.fromkeys(TABLE_BUDGETS, BUDGET_ROWS)}


class Results:
    """The results file: one line per finished cell; several runs (seeds, tables) may append to it at
    once, so lookups re-read it."""

    def __init__(self, path: Path, rows: frozenset[str] | None = None):
        self.path = path
        self.rows_wanted = rows  # --rows: only these rows' cells run (None: all of the table)

    @property
    def rows(self) -> list[dict]:
        return [json.loads(x) for x in self.path.read_text().splitlines()] if self.path.exists() else []

    def find(self, table: str, row: str, seed: int) -> dict | None:
        return next((r for r in self.rows if r["table"] == table and r["row"] == row and r["seed"] == seed), None)

    def done(self, table: str, row: str, seed: int) -> bool:
        return self.find(table, row, seed) is not None

    def add(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        print(json.dumps(record), flush=True)


async def cell(bench: Bench, results: Results, table: str, row: str, seed: int, make, same_as=None) -> None:
    """Run one cell unless it is done. `same_as` (table, row) names a cell of another table with the
    identical configuration and budget: when that one is done, its result is copied, not retrained."""
    if results.done(table, row, seed) or (results.rows_wanted is not None and row not in results.rows_wanted):
        return
    twin = results.find(*same_as, seed) if same_as else None
    if twin is not None and twin["budget"] == bench.budget.key():
        results.add({**twin, "table": table, "row": row, "facts": {**twin["facts"], "same_as": list(same_as)}})
        return
    t0 = time.perf_counter()
    accuracy, facts = await make()
    results.add({"table": table, "row": row, "seed": seed, "accuracy": accuracy, "facts": facts,
                 "budget": bench.budget.key(), "seconds": round(time.perf_counter() - t0, 1),
                 **ran_where(bench.device)})


def _experts(row: str, seed: int) -> str:
    """The cache name of a shared row's experts (noesis_cells.EXPERTS) at `seed`."""
    return EXPERTS[row].format(seed=seed)


def _routed(shared=(), experts=None) -> dict:
    return {lang: tuple(shared) + ((experts[lang],) if experts else ()) for lang in LANGS}


async def table2(bench: Bench, results: Results, seed: int, table: str = "2", rows=TABLE2_ROWS) -> None:
    """Table 2's `rows` as results table `table` (the tables of TABLE_BUDGETS: some of them on another budget)."""
    b = bench

    async def base():
        return await b.accuracy({}), {}

    async def share_nothing():
        return await b.accuracy(_routed((), await b.experts(_experts("share_nothing", seed), (), seed))), {}

    async def solo():
        acc, facts = {}, {}
        for lang in LANGS:
            m = b.fresh_model()
            _, facts[lang] = await b.shared("full", 1.0, seed, langs=(lang,), model=m)
            acc[lang] = (await b.accuracy({lang: ()}, model=m))[lang]
        return acc, facts

    async def monolithic():
        m = b.fresh_model()
        _, facts = await b.shared("full", 1.0, seed, model=m)
        return await b.accuracy({}, model=m), facts

    async def common_lora():
        a, facts = await b.shared("lora", 1.0, seed, rank=4)
        return await b.accuracy(_routed((a,))), facts

    async def prompt_only():
        p, facts = await b.shared("soft_prompt", 1.0, seed, prompt_length=32)
        return await b.accuracy(_routed((p,))), facts

    async def noesis():
        p, facts = await b.shared("soft_prompt", 1.0, seed, prompt_length=32)
        return await b.accuracy(_routed((p,), await b.experts(_experts("noesis", seed), (p,), seed))), facts

    async def noesis_nonprivate():
        p, facts = await b.shared("soft_prompt", math.inf, seed, prompt_length=32)
        return await b.accuracy(_routed((p,), await b.experts(_experts("noesis_nonprivate", seed), (p,), seed))), facts

    twins = {"base": ("sweep", "base"), "monolithic_dp": ("sweep", "full@1")}
    makers = {"base": base, "share_nothing": share_nothing, "prompt_only_dp": prompt_only, "noesis": noesis,
              "noesis_nonprivate": noesis_nonprivate, "common_lora_dp": common_lora, "monolithic_dp": monolithic,
              "solo_dp": solo}
    for row in rows:
        await cell(b, results, table, row, seed, makers[row], same_as=twins.get(row))


async def on_budget(bench: Bench, results: Results, seed: int, table: str) -> None:
    """Table 2's NOESIS rows and their controls as results table `table`, on its budget (TABLE_BUDGETS):
    does NOESIS's gain over Share Nothing appear with every training document (4.4 times less DP
    noise per coordinate), in the paper's data form (which every language shares and the base model
    never saw), or in that form with the scarce language as scarce as the paper's?"""
    await table2(bench, results, seed, table=table, rows=BUDGET_ROWS)


async def table3(bench: Bench, results: Results, seed: int) -> None:
    for row, (family, shape) in TABLE3.items():
        async def make(row=row, family=family, shape=shape):
            s, facts = await bench.shared(family, 1.0, seed, **shape)
            name = _experts("noesis", seed) if row == "pt32" else f"noesis-{row}-s{seed}"
            return await bench.accuracy(_routed((s,), await bench.experts(name, (s,), seed))), facts
        await cell(bench, results, "3", row, seed, make)


async def table5(bench: Bench, results: Results, seed: int) -> None:
    p, _ = await bench.shared("soft_prompt", 1.0, seed, prompt_length=32)
    experts = await bench.experts(_experts("noesis", seed), (p,), seed)
    for row, routed in (("noesis", _routed((p,), experts)), ("without_prompt", _routed((), experts)),
                        ("without_experts", _routed((p,)))):
        async def make(routed=routed):
            return await bench.accuracy(routed), {}
        await cell(bench, results, "5", row, seed, make)


async def epsilons(bench: Bench, results: Results, seed: int) -> None:
    """NOESIS at larger ε (the same stage 1 as the sweep's soft prompt, plus experts): where it
    overtakes Share Nothing, if not at ε = 1. ε = 1 and ∞ are Table 2's NOESIS rows."""
    for eps in EPS_ROWS:
        async def make(eps=eps):
            p, facts = await bench.shared("soft_prompt", eps, seed, prompt_length=32)
            experts = await bench.experts(f"noesis-e{eps:g}-s{seed}", (p,), seed)
            return await bench.accuracy(_routed((p,), experts)), facts
        await cell(bench, results, "eps", f"noesis@{eps:g}", seed, make)


async def longer(bench: Bench, results: Results, seed: int) -> None:
    """NOESIS with stage 1 trained 12 epochs instead of the budget's 2 (seed 000 C.3's count), at
    ε = 1 and non-private: does a longer stage 1 let the shared prompt carry what the experts do not?
    (The ε = 1 run is the one the attack's `noesis_12ep` row uses.)"""
    for row, eps in (("noesis_12ep", 1.0), ("noesis_nonprivate_12ep", math.inf)):
        async def make(eps=eps, name=_experts(row, seed)):
            p, facts = await bench.shared("soft_prompt", eps, seed, epochs=long_epochs(bench.budget),
                                         prompt_length=32)
            return await bench.accuracy(_routed((p,), await bench.experts(name, (p,), seed))), facts
        await cell(bench, results, "long", row, seed, make)


async def sweep(bench: Bench, results: Results, seed: int) -> None:
    async def base():
        return await bench.accuracy({}), {"parameters": 0}
    await cell(bench, results, "sweep", "base", seed, base, same_as=("2", "base"))
    for family in SWEEP_FAMILIES:
        for eps in EPSILONS:
            async def make(family=family, eps=eps):
                model = bench.fresh_model() if family == "full" else None
                a, facts = await bench.shared(family, eps, seed, model=model)
                return await bench.accuracy(_routed((a,) if a is not None else ()), model=model), facts
            row = f"{family}@{_eps_row(eps)}"
            await cell(bench, results, "sweep", row, seed, make,
                       same_as=("2", "monolithic_dp") if row == "full@1" else None)


async def main_async(args) -> None:
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    budget = TABLE_BUDGETS.get(args.table, Budget())
    if args.quick:  # the tiny budget, in the table's document form
        budget = replace(QUICK, form=budget.form)
    device = resolve_device(args.device)
    rows = None if args.rows is None else frozenset(args.rows)
    results = Results(out / "quick.jsonl" if args.quick else Path(args.results), rows)  # quick rows stay uncommitted
    if args.table == "mia-fresh":  # each seed trains on its own draw of the training documents
        models = tuple(m for m in FRESH_MODELS if rows is None or m in rows)
        for seed in args.seeds:
            bench = Bench(Path(args.model), Path(args.corpus_dir), out, budget, device, draw=seed)
            await attack(bench, results, seed, FRESH_TABLE, models)
        return
    bench = Bench(Path(args.model), Path(args.corpus_dir), out, budget, device)
    run = {"2": table2, "3": table3, "5": table5, "eps": epsilons, "long": longer, "sweep": sweep}
    for seed in args.seeds:
        if args.table == "mia":
            await attack(bench, results, seed)
        elif args.table in TABLE_BUDGETS:
            await on_budget(bench, results, seed, args.table)
        else:
            await run[args.table](bench, results, seed)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--table", choices=("2", "3", "5", "eps", "long", "sweep", "mia", "mia-fresh", *TABLE_BUDGETS),
                   default=None)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--rows", nargs="+", metavar="ROW", default=None,
                   help="only these rows of --table (several processes can share a table's cells)")
    p.add_argument("--out", default=str(ROOT / "runs" / "noesis"))
    p.add_argument("--results", default=str(ROOT / "experiments" / "results" / "noesis.jsonl"),
                   help="the finished cells (committed; adapters and MIA scores stay under --out)")
    p.add_argument("--model", default=str(ROOT / "models" / "umbra-code-tiny"))
    p.add_argument("--corpus-dir", default=str(ROOT / "data" / "corpus" / "private"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="auto",
                   help="where the model runs: auto (a CUDA accelerator when there is one), cpu, cuda, cuda:N")
    p.add_argument("--write", nargs="*", metavar="BLOCK", default=None,
                   help="render docs/noesis.md's tables from the results: all, or these blocks "
                        "(table2 table3 table5 eps sweep attack attack-fresh full stripped stripped-scarce "
                        "stripped-scarce-java); "
                        "a block without rows is left as it is")
    p.add_argument("--quick", action="store_true",
                   help="a tiny budget, to check the pipeline (not for the tables; its 12-epoch rows train one)")
    args = p.parse_args(argv)
    if args.rows is not None:
        if args.table in (None, "mia"):
            p.error("--rows needs a table of rows: " + ", ".join(ROWS))
        unknown = sorted(set(args.rows) - set(ROWS[args.table]))
        if unknown:
            p.error(f"table {args.table} has no rows {unknown}; it has {list(ROWS[args.table])}")
    if args.table is not None:
        asyncio.run(main_async(args))
    if args.write is not None:
        from experiments.noesis_report import BLOCKS, write_report

        unknown = set(args.write) - set(BLOCKS)
        if unknown:
            p.error(f"unknown blocks {sorted(unknown)}; from {sorted(BLOCKS)}")
        written = write_report(Path(args.results), Path(args.out), ROOT / "docs" / "noesis.md", Budget(),
                               tuple(args.write) or tuple(BLOCKS))
        print(f"docs/noesis.md: wrote {', '.join(written) or 'nothing (no rows of this budget)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
