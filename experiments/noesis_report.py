"""docs/noesis.md's tables from the results file (experiments/results/noesis.jsonl; `experiments/noesis.py
--write`): means over the seeds that finished, with 95 % t-intervals, each table between its own markers."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

import numpy as np

from benchmarks.doc_markers import replace_block
from experiments.noesis_cells import TABLE_BUDGETS, Budget
from experiments.seed_stats import mean_ci
from umbra.data.corpus import LANGS

ROWS2 = {"base": ("Base model, no tuning", "—"), "share_nothing": ("(i) Share Nothing (experts only)", "0 (nothing shared)"),
         "solo_dp": ("(ii) Solo (each language's client blocks, DP)", "1"),
         "monolithic_dp": ("(iii) Monolithic: all client blocks, DP", "1"),
         "common_lora_dp": ("(iv) Single Common Adapter (LoRA r4, DP)", "1"),
         "prompt_only_dp": ("(v) Prompt-Tuning Only (pt32, DP)", "1"),
         "noesis": ("NOESIS (pt32 DP + experts)", "1"), "noesis_nonprivate": ("NOESIS, non-private", "∞")}


def _load(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _by(rows: list[dict], table: str) -> dict[str, list[dict]]:
    """row -> its runs, one per seed (the first recorded, should two runs have finished the same cell)."""
    out: dict[str, list[dict]] = defaultdict(list)
    seen = set()
    for r in rows:
        if r["table"] == table and (r["row"], r["seed"]) not in seen:
            seen.add((r["row"], r["seed"]))
            out[r["row"]].append(r)
    return out


def _cell(values: list[float]) -> str:
    m, h = mean_ci(values)
    return f"{m:.2f}" if math.isnan(h) else f"{m:.2f} ± {h:.2f}"


def _acc_table(cells: dict[str, list[dict]], labels: dict[str, tuple[str, str]]) -> list[str]:
    lines = ["| row | ε | " + " | ".join(LANGS) + " | mean | seeds |", "|---|---|" + "---|" * (len(LANGS) + 2)]
    for row, (label, eps) in labels.items():
        runs = cells.get(row)
        if not runs:
            continue
        accs = [[r["accuracy"][lang] for r in runs] for lang in LANGS]
        means = [float(np.mean([r["accuracy"][lang] for lang in LANGS])) for r in runs]
        lines.append(f"| {label} | {eps} | " + " | ".join(_cell(a) for a in accs) + f" | {_cell(means)} | {len(runs)} |")
    return lines


def table2(rows: list[dict], table: str = "2") -> list[str]:
    cells = _by(rows, table)
    lines = _acc_table(cells, ROWS2)
    seeds_of = {row: {r["seed"]: r for r in cells.get(row, [])} for row in ("noesis", "share_nothing", "noesis_nonprivate")}
    # The gain pairs NOESIS with Share Nothing by seed; what DP costs and the share bridged also need
    # the non-private run of the seed, which may lag (it is the slowest row).
    paired = sorted(seeds_of["noesis"].keys() & seeds_of["share_nothing"].keys())
    with_np = [s for s in paired if s in seeds_of["noesis_nonprivate"]]

    def over_share_nothing(row: str, lang: str, seeds: list[int]) -> list[float]:
        return [seeds_of[row][s]["accuracy"][lang] - seeds_of["share_nothing"][s]["accuracy"][lang] for s in seeds]

    if paired:
        lines.append("| NOESIS − Share Nothing (points) | | "
                     + " | ".join(_cell(over_share_nothing("noesis", lang, paired)) for lang in LANGS)
                     + f" | | {len(paired)} |")
    if with_np:
        costs, bridged = [], []
        for lang in LANGS:
            g, gap = (over_share_nothing(row, lang, with_np) for row in ("noesis", "noesis_nonprivate"))
            costs.append(_cell([a - b for a, b in zip(g, gap)]))  # NOESIS − non-private, paired by seed
            gm, gh = mean_ci(gap)
            if gm > 0 and (math.isnan(gh) or gm > gh):  # a gap to bridge: non-private clearly above Share Nothing
                bridged.append(f"{100 * float(np.mean(g)) / gm:.0f} %" + (f" (of {gm:.2f}, one seed)" if math.isnan(gh) else ""))
            elif math.isnan(gh):  # one seed, non-private at or below Share Nothing: no interval to be within
                bridged.append(f"— (no gap: non-private {gm:+.2f}, one seed)")
            else:
                bridged.append(f"— (gap {gm:.2f} ± {gh:.2f}, within noise)")
        lines.append("| NOESIS − non-private (points: what DP costs) | | " + " | ".join(costs) + f" | | {len(with_np)} |")
        lines.append("| share of the gap to non-private bridged | | " + " | ".join(bridged) + f" | | {len(with_np)} |")
    return lines


def on_budget(table: str):
    """The block of a table of TABLE_BUDGETS: Table 2's NOESIS rows and their controls, and how that
    table's budget departs from Table 2's."""
    budget = TABLE_BUDGETS[table]

    def block(rows: list[dict]) -> list[str]:
        return table2(rows, table) + ["", f"Budget key `{budget.key()}`: Table 2's but for {_departures(budget)}."]
    return block


def _departures(budget: Budget) -> str:
    """What `budget` changes of Table 2's, in words: "the training documents (python 6,549 / ...) and ..."."""
    said = {"train_docs": lambda v: "the training documents (" + " / ".join(f"{k} {v[k]:,}" for k in LANGS) + ")",
            "expected_batch": lambda v: f"the expected batch ({v})",
            "form": lambda v: f"the documents' form ({v}, experiments/stripped_form.py)"}
    tables = asdict(Budget())
    changed = [said.get(k, lambda v, k=k: f"{k} ({v})")(v) for k, v in asdict(budget).items() if v != tables[k]]
    return ", ".join(changed[:-1]) + (" and " if len(changed) > 1 else "") + changed[-1]


def table3(rows: list[dict]) -> list[str]:
    labels = {k: (k, "1") for k in ("pt8", "pt32", "pt120", "rc1", "rc4", "rc64")}
    lines = _acc_table(_by(rows, "3"), labels)
    params = {r["row"]: r["facts"].get("parameters") for r in rows if r["table"] == "3" and "parameters" in r["facts"]}
    if params:
        lines.append("")
        lines.append("Shared parameters: " + ", ".join(f"{k} {params[k]:,}" for k in labels if k in params))
    return lines


def table5(rows: list[dict]) -> list[str]:
    labels = {"noesis": ("NOESIS", "1"), "without_prompt": ("− shared prompt (removed after training)", "1"),
              "without_experts": ("− experts (removed after training)", "1")}
    return _acc_table(_by(rows, "5"), labels)


def epsilons(rows: list[dict]) -> list[str]:
    """NOESIS − Share Nothing per language at each ε (points, over the seeds both finished), and with
    a stage 1 six times longer (table "long")."""
    sn = {r["seed"]: r for r in _by(rows, "2").get("share_nothing", [])}
    runs = {"1": _by(rows, "2").get("noesis", []), **{e: _by(rows, "eps").get(f"noesis@{e}", [])
                                                        for e in ("2", "4", "8", "16", "32")},
            "∞": _by(rows, "2").get("noesis_nonprivate", []),
            "1, stage 1 × 12 epochs": _by(rows, "long").get("noesis_12ep", []),
            "∞, stage 1 × 12 epochs": _by(rows, "long").get("noesis_nonprivate_12ep", [])}
    lines = ["| ε | " + " | ".join(f"{lang}: NOESIS | − Share Nothing" for lang in LANGS) + " | seeds |",
             "|---|" + "---|---|" * len(LANGS) + "---|"]
    for eps, rs in runs.items():
        rs = [r for r in rs if r["seed"] in sn]
        if not rs:
            continue
        cells = []
        for lang in LANGS:
            cells.append(_cell([r["accuracy"][lang] for r in rs]))
            cells.append(_cell([r["accuracy"][lang] - sn[r["seed"]]["accuracy"][lang] for r in rs]))
        lines.append(f"| {eps} | " + " | ".join(cells) + f" | {len(rs)} |")
    return lines


def sweep(rows: list[dict]) -> list[str]:
    cells = _by(rows, "sweep")
    eps = ("0.5", "1", "2", "4", "8", "16", "32", "inf")
    lines = ["| family | parameters | C | " + " | ".join(f"ε={e}" for e in eps) + " |", "|---|---|---|" + "---|" * len(eps)]
    most = max((len(rs) for rs in cells.values()), default=0)  # a cell over fewer seeds says how many
    base = cells.get("base")
    if base:
        m = [float(np.mean([r["accuracy"][lang] for lang in LANGS])) for r in base]
        lines.append(f"| zero-shot base | 0 | — | {_cell(m)} (any ε) |" + " |" * (len(eps) - 1))
    for family in ("soft_prompt", "deep_prompt", "lora", "bottleneck", "full"):
        runs = {e: cells.get(f"{family}@{e}") for e in eps}
        if not any(runs.values()):
            continue
        count = next((r[0]["facts"].get("parameters") for r in runs.values() if r and "parameters" in r[0]["facts"]), None)
        vals = [_cell([float(np.mean([r["accuracy"][lang] for lang in LANGS])) for r in rs])
                + (f" (n={len(rs)})" if len(rs) < most else "") if rs else "—" for rs in runs.values()]
        clip = _clip_norms(rs for e, rs in runs.items() if rs and e != "inf")
        lines.append(f"| {family} | {count:,} | {clip} | " + " | ".join(vals) + " |" if count else
                     f"| {family} | ? | {clip} | " + " | ".join(vals) + " |")
    return lines


def _clip_norms(runs) -> str:
    """The DP clip bounds C the private rows of a family ran at, "—" without one (rows from before
    the per-family bound record none: they ran at the budget's)."""
    norms = sorted({r["facts"].get("clip_norm") or Budget().clip_norm for rs in runs for r in rs})
    return " / ".join(f"{c:g}" for c in norms) or "—"


def attack(rows: list[dict], table: str | None = None) -> list[str]:
    """The membership table of `table` (the fixed members' "mia-doc" by default), each row read
    against the negative control's AUC on the same pair and seed."""
    from experiments.noesis_attack import MODELS, TABLE, plot_name

    table = table or TABLE
    cells = _by(rows, table)
    lines = ["| model | target ← via | AUC % (95 % CI) | AUC − floor (points) | TPR @ 1 % FPR % (95 % CI) | "
             "raw-score AUC % | members / non-members | seeds |", "|---|---|---|---|---|---|---|---|"]
    order = {name: i for i, name in enumerate(MODELS)}
    floor_model = next(iter(MODELS))  # the negative control: each row is read against it, pair by pair
    floors = {row.split(":", 1)[1]: {r["seed"]: r["auc"] for r in runs}
              for row, runs in cells.items() if row.split(":", 1)[0] == floor_model}
    for row, runs in sorted(cells.items(), key=lambda kv: (order.get(kv[0].split(":")[0], len(order)), kv[0])):
        model, key = row.split(":", 1)
        pair = key.replace("<-", " ← ")
        above = "—" if model == floor_model else _above_floor(runs, floors.get(key, {}))
        auc = _cell([100 * r["auc"] for r in runs])
        tpr = _cell([100 * r["tpr_at_1pct"] for r in runs])
        ci = runs[0].get("auc_ci")
        auc_txt = f"{auc} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci and len(runs) == 1 else auc
        tci = runs[0].get("tpr_ci")
        tpr_txt = f"{tpr} [{100 * tci[0]:.1f}, {100 * tci[1]:.1f}]" if tci and len(runs) == 1 else tpr
        raw = _cell([100 * r["raw_auc"] for r in runs if "raw_auc" in r]) if any("raw_auc" in r for r in runs) else "—"
        lines.append(f"| {model} | {pair} | {auc_txt} | {above} | {tpr_txt} | {raw} | "
                     f"{_span(runs, 'members')} / {_span(runs, 'nonmembers')} | {len(runs)} |")
    first = min((r["seed"] for rs in cells.values() for r in rs), default=None)
    if first is not None:
        models = sorted({row.split(":", 1)[0] for row in cells}, key=lambda m: order.get(m, len(order)))
        lines += ["", " ".join(f"![{m}, seed {first}](noesis/{plot_name(m, first, table)})" for m in models)]
    return lines


def attack_fresh(rows: list[dict]) -> list[str]:
    """The membership table with members drawn afresh per seed."""
    return attack(rows, _attack_tables()["attack-fresh"])


def _attack_tables() -> dict[str, str]:
    """The membership blocks and the results table each is drawn from (and its plots)."""
    from experiments.noesis_attack import FRESH_TABLE, TABLE

    return {"attack": TABLE, "attack-fresh": FRESH_TABLE}


def _span(runs: list[dict], key: str) -> str:
    """A count over seeds: one number, or its range where the seeds differ (fresh draws)."""
    lo, hi = min(r[key] for r in runs), max(r[key] for r in runs)
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def _above_floor(runs: list[dict], floor: dict[int, float]) -> str:
    """A row's AUC minus the negative control's on the same pair (`floor`: seed -> AUC), paired by
    seed, in points: what the model's shared parameters add above the fixed sets' own difference.
    "—" where the floor has no seed in common with the row."""
    diffs = [100 * (r["auc"] - floor[r["seed"]]) for r in runs if r["seed"] in floor]
    if not diffs:
        return "—"
    return _cell(diffs) + ("" if len(diffs) == len(runs) else f" ({len(diffs)} of {len(runs)} seeds)")


BLOCKS = {"table2": table2, "table3": table3, "table5": table5, "eps": epsilons, "sweep": sweep, "attack": attack,
          "attack-fresh": attack_fresh, **{table: on_budget(table) for table in TABLE_BUDGETS}}


def _tables(block: str) -> set[str]:
    """The results tables a block is drawn from."""
    tables = {"table2": {"2"}, "table3": {"3"}, "table5": {"5"}, "eps": {"eps", "2", "long"}, "sweep": {"sweep"},
              **{table: {table} for table in TABLE_BUDGETS}}
    return tables.get(block) or {_attack_tables()[block]}


def write_report(results: Path, out: Path, doc: Path, budget: Budget, blocks=tuple(BLOCKS)) -> list[str]:
    """The tables of `blocks` from `results`; the ROC plots from the scores kept under `out` (where
    they are). A block with no rows of this budget is left as it is (so a run on another machine, or a
    results file that lacks a table, never blanks a table already written). A block of TABLE_BUDGETS is
    drawn from its own budget's rows. Returns the blocks written."""
    loaded = _load(results)
    rows = [r for r in loaded if r.get("budget") == budget.key()]
    text = doc.read_text()
    written = []
    for name in blocks:
        own = TABLE_BUDGETS.get(name)  # a block drawn from rows of another budget than the tables'
        block_rows = rows if own is None else [r for r in loaded if r.get("budget") == own.key()]
        if any(r["table"] in _tables(name) for r in block_rows):
            text = replace_block(text, f"noesis-{name}", "\n".join(BLOCKS[name](block_rows)))
            written.append(name)
    budget_txt = "```\n" + json.dumps(asdict(budget), indent=1) + f"\n```\nbudget key `{budget.key()}`"
    doc.write_text(replace_block(text, "noesis-budget", budget_txt))
    from experiments.noesis_attack import write_plots

    for block, table in _attack_tables().items():
        if block in written:
            seeds = sorted({r["seed"] for r in rows if r["table"] == table})
            write_plots(out, doc.parent / "noesis", seeds, budget.key(), table)
    return written
