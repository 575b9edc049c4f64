"""The tables of experiments/federation.py from its results (experiments/results/federation.jsonl)."""

from __future__ import annotations

import math

from experiments.seed_stats import mean_ci
from umbra.evaluation.memorization import wilson_interval

ROUTES = (("right", "right key"), ("secure", "wrong / no key"), ("global", "global adapter alone"),
          ("other_keys", "other organizations' keys"))


def _leak(rows: list[dict]) -> tuple[int, int]:
    return sum(r["c50"]["correct"] for r in rows), sum(r["c50"]["trials"] for r in rows)


def pct(correct: int, trials: int) -> str:
    low, high = wilson_interval(correct, trials)
    return f"{100 * correct / trials:.1f} % [{100 * low:.1f}, {100 * high:.1f}]" if trials else "–"


def route_rows(cell: dict, route: str) -> list[dict]:
    out = []
    for org in cell["per_org"].values():
        got = org["leak"].get(route)
        if got is not None:
            out.extend(got if isinstance(got, list) else [got])
    return out


def ppl(u: dict) -> float:
    return math.exp(u["loss"])


def pooled_utility(cell: dict, key: str) -> tuple[float, float]:
    us = [o["utility"][key] if "utility" in o else o[key] for o in cell["per_org"].values()]
    tokens = sum(u["tokens"] for u in us)
    return (math.exp(sum(u["loss"] * u["tokens"] for u in us) / tokens),
            sum(u["top1"] * u["tokens"] for u in us) / tokens)


def beats(cell: dict) -> tuple[int, int]:
    """Organizations where the global adapter's loss on the others' code is below their local one's."""
    orgs = list(cell["per_org"].values())
    get = (lambda o, k: o["utility"][k]) if "utility" in orgs[0] else (lambda o, k: o[k])
    return sum(get(o, "global_others")["loss"] < get(o, "local_others")["loss"] for o in orgs), len(orgs)


def extraction(cell: dict, route: str, group: str | None = None) -> str:
    """Pooled extraction precision / recall of a route (`group`: only that group of canaries)."""
    xs = [o["leak"][route]["extraction"] if group is None else o["leak"][route].get("extraction_by", {}).get(group)
          for o in cell["per_org"].values() if "extraction" in o["leak"][route]]
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    gen, hit, n = (sum(x[k] for x in xs) for k in ("generated", "true_found", "canaries"))
    return f"{100 * hit / gen if gen else 0.0:.1f} % / {100 * hit / n:.1f} % ({hit} of {gen}){greedy(cell, route, group)}"


def greedy(cell: dict, route: str, group: str | None = None) -> str:
    """Pooled greedy extraction of a route: canaries whose value the greedy completion reproduces at
    least half of (of all), the whole of, and the mean share of characters ("" before it was measured)."""
    xs = [o["leak"][route]["greedy"].get(group or "all") for o in cell["per_org"].values()
          if "greedy" in o["leak"][route]]
    xs = [x for x in xs if x is not None]
    if not xs:
        return ""
    n, half, exact = (sum(x[k] for x in xs) for k in ("canaries", "half", "exact"))
    chars = sum(x["chars"] * x["canaries"] for x in xs) / n
    return f" · greedy ≥ ½: {half} of {n}, whole {exact}, {100 * chars:.0f} % of chars"


def group_leak(cell: dict, route: str, group: str) -> tuple[int, int]:
    rows = [r["c50_by"][group] for r in route_rows(cell, route) if "c50_by" in r]
    return sum(r["correct"] for r in rows), sum(r["trials"] for r in rows)


GROUPS = (("removed", "removed by the scrubber"), ("missed", "missed by the scrubber"))


def group_kinds(cell: dict, group: str) -> str:
    kinds = sorted({k for o in cell["per_org"].values() for k in o.get("groups", {}).get(group, [])})
    return ", ".join(k.replace("_", " ") for k in kinds) or "none"


def fig2(f2: list[tuple[str, dict]]) -> list[str]:
    """Fig. 2: per condition (control / scrubbing / scrubbing + DP) and group of canaries, each route's
    inference accuracy and extraction precision / recall, and the secure side's utility."""
    lines = ["| Fig. 2 | canaries | right key: inference | extraction: sampled P / R · greedy | wrong / no key: "
             "inference | extraction | global alone: inference | extraction | ppl own: global · wrong/no-key "
             "route |", "|---|---|---|---|---|---|---|---|---|"]
    for label, cell in f2:
        for i, (group, name) in enumerate(GROUPS):
            if not group_leak(cell, "secure", group)[1]:
                continue
            u = (f"{pooled_utility(cell, 'global')[0]:.2f} · {pooled_utility(cell, 'secure_route')[0]:.2f}"
                 if i == 0 else "″")
            lines.append(f"| {label if i == 0 else ''} | {name} ({group_kinds(cell, group)}) | "
                         + " | ".join(f"{pct(*group_leak(cell, r, group))} | {extraction(cell, r, group)}"
                                      for r in ("right", "secure", "global")) + f" | {u} |")
    return lines


def fig2_cells(s: dict) -> tuple[tuple[str, str], ...]:
    return (("no scrubbing (control)", "f2:raw"), ("scrubbing", "t1:SecureFedNesterov"),
            (f"scrubbing + DP (ε = {s['dp_epsilon']:g})", "f2:dp"))


def pooled_fig2(rows_by_seed: dict[int, list[dict]], s: dict) -> list[str]:
    """Fig. 2 pooled over the seeds that have its cells: every seed's organizations (chosen and
    planted by that seed) counted together. A cell fewer than two seeds ran is left out (the control
    at K = 8, say); empty when fewer than two seeds have the rest."""
    done = {seed: {r["cell"]: r for r in rows} for seed, rows in sorted(rows_by_seed.items())}
    cells = [(label, c) for label, c in fig2_cells(s) if sum(c in by for by in done.values()) >= 2]
    done = {seed: by for seed, by in done.items() if cells and all(c in by for _, c in cells)}
    if len(done) < 2:
        return []
    f2 = [(label, _merged({seed: by[c] for seed, by in done.items()})) for label, c in cells]
    n = len(f2[0][1]["per_org"])
    return ["", f"Fig. 2 pooled over seeds {', '.join(map(str, done))} ({n} organization-runs; each seed picks and plants "
                "its own organizations): the same columns, counts summed before the intervals.", ""] + fig2(f2)


def _merged(cells: dict[int, dict]) -> dict:
    """One seed's cell per seed, as one cell whose organizations are every seed's (seed:name)."""
    return {"per_org": {f"{seed}:{name}": o for seed, c in cells.items() for name, o in c["per_org"].items()}}


def _vs_base(cells: dict[int, dict], key: str, base: str) -> str:
    """Perplexity of `key` against `base`'s on the same code (the base model's, say), in % (−: better), the
    mean over seeds ± its 95 % t-interval: each seed has its own organizations, so their perplexities
    differ more between seeds than between strategies, and only the ratio is comparable."""
    m, h = mean_ci([100 * (pooled_utility(c, key)[0] / pooled_utility(c, base)[0] - 1) for c in cells.values()])
    return f"{m:+.1f} %" if math.isnan(h) else f"{m:+.1f} ± {h:.1f} %"


def _pooled_row(label: str, cells: dict[int, dict], ratios: list[tuple[str, str]]) -> str:
    """| label | each ratio's perplexity over seeds | beats | right key | wrong / no key | global alone | seeds |"""
    merged = _merged(cells)
    k, n = beats(merged)
    return (f"| {label} | " + " | ".join(_vs_base(cells, key, base) for key, base in ratios) + f" | {k} of {n} | "
            + " | ".join(pct(*_leak(route_rows(merged, r))) for r in ("right", "secure", "global"))
            + f" | {', '.join(map(str, cells))} |")


def pooled_tables(rows_by_seed: dict[int, list[dict]]) -> list[str]:
    """Table 1 and Fig. 5 over the seeds that ran each cell (at least two): perplexities against the
    base model's on the same code, as the mean over seeds with its 95 % t-interval; the "beats" counts
    and canary counts summed over every seed's organizations (each seed picks and plants its own),
    Wilson intervals on the sums."""
    by_seed = {seed: {r["cell"]: r for r in rows} for seed, rows in sorted(rows_by_seed.items())}
    names = sorted({c for by in by_seed.values() for c in by})
    seeds_of = {c: {seed: by[c] for seed, by in by_seed.items() if c in by} for c in names}
    seeds_of = {c: cells for c, cells in seeds_of.items() if len(cells) >= 2}
    lines = []
    t1 = [c for c in seeds_of if c.startswith("t1:")]
    if t1:
        lines += ["", "Table 1 over seeds (perplexity against the base model's on the same code, mean ± 95 % t-interval "
                  "over seeds; counts summed over every seed's organizations):", "",
                  "| strategy | global adapter ppl vs base | local secure adapters on the others' code, vs base | global "
                  "beats local on the others' code | right key | wrong / no key | global alone | seeds |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [_pooled_row(c[3:].replace("-0.5", " (η = 0.5)"), seeds_of[c],
                              [("global", "base"), ("local_others", "base_others")]) for c in t1]
    f5 = sorted((c for c in seeds_of if c.startswith("f5:")), key=lambda c: int(c[3:]))
    if f5:
        lines += ["", "Fig. 5 over seeds (the same pooling):", "",
                  "| organizations | ppl on others' code: global vs local | global beats local on others' | right key "
                  "(3 tracked) | wrong / no key (3 tracked) | global alone (all) | seeds |", "|---|---|---|---|---|---|---|"]
        lines += [_pooled_row(c[3:], seeds_of[c], [("global_others", "local_others")]) for c in f5]
    return lines


def residue_line(nest: dict) -> str:
    by: dict[str, list[int]] = {}
    for o in nest["per_org"].values():
        for k, (left, planted) in o["residue"].items():
            by.setdefault(k, [0, 0])
            by[k][0] += left
            by[k][1] += planted
    return ("Canary occurrences the scrubber (`umbra.scrub`) left in the organizations' scrubbed training views, "
            "of those planted: " + ", ".join(f"{k.replace('_', ' ')} {a} of {b}" for k, (a, b) in by.items()) + ".")


def report(rows: list[dict], s: dict) -> str:
    by = {r["cell"]: r for r in rows}
    spec, sspec = s["spec"], s["scale_spec"]
    minutes = sum(r["seconds"] for r in rows) / 60
    cmd = "nice -n 10 .venv-federation/bin/python experiments/federation.py" + (" --quick" if s["quick"] else "") + \
        f" --seed {s['seed']}"
    lines = [
        f"Command: `{cmd}` ({minutes:.1f} min of cells on this machine's 2 shared CPU cores, {s['threads']} torch "
        f"thread). Seed {s['seed']} (organizations, canaries, LoRA init, batch order, DP noise). The embedded default "
        f"model; organizations = projects of the private Python domain (one each: non-IID by construction), "
        f"{spec['files']} training files, {spec['query']} query files, {spec['heldout']} held-out files of < "
        f"{spec['max_chars']:,} characters each, {len(spec['kinds']) * spec['per_group'] * 3} canaries "
        f"per organization ({', '.join(k.replace('_', ' ') for k in spec['kinds'])}; "
        f"1, 4 and 16 copies; attack context "
        f"{s['context_tokens']} tokens). Secure LoRA "
        f"rank {s['rank']}, AdamW lr {s['lr']:g}, T = {s['rounds']} rounds × K = {s['epochs']} epoch; local adapters "
        f"T·K epochs; fusion (eq. 7) ≤ {s['fusion_iters']} iterations at ψ = 0.001. Flower's FedAdagrad/FedAdam/"
        f"FedYogi at η = 0.01 (τ 1e-3, β 0.9 / 0.99), FedAvgM and SecureFedNesterov at momentum 0.5, η = 1 "
        f"(SecureFedNesterov also at η = 0.5). Every "
        f"federation ran Flower's `Strategy.start` over the in-process `LocalGrid` (which ends where Flower's "
        f"simulation engine ends on the same organizations: tests/federation/test_simulation.py). Inference "
        f"accuracy at c = 50 (chance 2 %), pooled over the organizations' canaries, 95 % Wilson intervals.",
        "",
    ]
    order = ("FedAvg", "FedAdagrad", "FedAdam", "FedYogi", "FedAvgM", "SecureFedNesterov")  # then the others
    t1 = sorted((by[c] for c in by if c.startswith("t1:")),
                key=lambda c: (order.index(c["strategy"]) if c["strategy"] in order else len(order), c["strategy"]))
    if t1:
        lines += ["| strategy | global adapter: ppl / top-1 | local secure adapters, own code | local, the others' "
                  "code | global beats local on the others' code | right key | wrong / no key | global alone | "
                  "other organizations' keys |", "|---|---|---|---|---|---|---|---|---|"]
        for cell in t1:
            g, lo, loo = (pooled_utility(cell, k) for k in ("global", "local", "local_others"))
            k, n = beats(cell)
            name = cell["strategy"].replace("-0.5", " (η = 0.5)")
            lines.append(f"| {name} | {g[0]:.2f} / {100 * g[1]:.1f} % | {lo[0]:.2f} / {100 * lo[1]:.1f} % | "
                         f"{loo[0]:.2f} / {100 * loo[1]:.1f} % | {k} of {n} | " +
                         " | ".join(pct(*_leak(route_rows(cell, r))) if route_rows(cell, r) else "–" for r, _ in ROUTES)
                         + " |")
        base = pooled_utility(t1[0], "base"), pooled_utility(t1[0], "base_others")
        lines += ["", f"Utility is pooled over the organizations' held-out code (tokens weighted); the global adapter is "
                  f"one adapter, so its figure is the same on each organization's own and on the others' code. The "
                  f"base model without adapter: {base[0][0]:.2f} / {100 * base[0][1]:.1f} %. \"Beats\": the global "
                  f"adapter's loss on the other organizations' held-out code is below that organization's local secure "
                  f"adapter's."]
        nest = by.get("t1:SecureFedNesterov")
        if nest:
            lines += ["", "| SecureFedNesterov, per organization | right key | wrong / no key | global alone | "
                      "exposure r=16: right · wrong/no | α · β | ppl own: global · wrong/no-key route · right-key route |",
                      "|---|---|---|---|---|---|---|"]
            for name, o in nest["per_org"].items():
                le, u = o["leak"], o["utility"]
                lines.append(f"| {name} | {pct(*_leak([le['right']]))} | {pct(*_leak([le['secure']]))} | "
                             f"{pct(*_leak([le['global']]))} | {le['right']['exposure']['16']:.2f} · "
                             f"{le['secure']['exposure']['16']:.2f} (max {le['right']['max_exposure']:.1f}) | "
                             f"({o['alpha'][0]:.2f}, {o['alpha'][1]:.2f}) · ({o['beta'][0]:.2f}, {o['beta'][1]:.2f}) | "
                             f"{ppl(u['global']):.2f} · {ppl(u['secure_route']):.2f} · {ppl(u['right_route']):.2f} |")
            lines += ["", residue_line(nest)]
    f2 = [(label, by[c]) for label, c in fig2_cells(s) if c in by]
    if f2:
        lines += [""] + fig2(f2)
        dp = by.get("f2:dp")
        if dp:
            p = dp["privacy"][0]
            spent = max(x["epsilon_spent"] for x in dp["privacy"])
            lines += ["", f"DP: document-level DP-SGD on each organization's secure adapter (federated and local), "
                      f"one file = one unit, C = {s['dp_clip']:g}, expected batch {s['dp_batch']} files of "
                      f"{p['documents']} (q = {p['sample_rate']:.3f}), σ = {p['noise_multiplier']:.3f}, "
                      f"{p['steps']} steps over the {s['rounds']} rounds, ε spent {spent:.2f} at δ = {s['dp_delta']:g} "
                      f"(opacus RDP). Extraction: {s['samples']} samples (T = 1) per canary prefix; P = true canaries "
                      f"among the distinct values of the canaries' formats generated, R = canaries recovered; per group of "
                      f"canaries, the values of that group's formats. Inference at c = 50 (chance 2 %), 95 % Wilson "
                      f"intervals. Groups: a canary is \"missed\" when an occurrence of it is left in the "
                      f"organization's scrubbed training or query view."]
    f5 = sorted((by[c] for c in by if c.startswith("f5:")), key=lambda c: len(c["orgs"]))
    if f5:
        lines += ["", f"Fig. 5 (scaling): SecureFedNesterov, T = {s['scale_rounds']} round(s), organizations of "
                  f"{sspec['files']} training files < {sspec['max_chars']:,} characters ({sspec['heldout']} held out); "
                  "the first 3 organizations' keys measured (right key, wrong / no key), the global adapter against "
                  "every organization's canaries.", "",
                  "| organizations | right key (3 tracked) | wrong / no key (3 tracked) | global alone (all) | ppl on "
                  "others' code: global · local (pooled) | global beats local on others' | minutes |",
                  "|---|---|---|---|---|---|---|"]
        for cell in f5:
            go, lo = pooled_utility(cell, "global_others"), pooled_utility(cell, "local_others")
            k, n = beats(cell)
            lines.append(f"| {len(cell['orgs'])} | {pct(*_leak(route_rows(cell, 'right')))} | "
                         f"{pct(*_leak(route_rows(cell, 'secure')))} | {pct(*_leak(route_rows(cell, 'global')))} | "
                         f"{go[0]:.2f} · {lo[0]:.2f} | {k} of {n} | {cell['seconds'] / 60:.1f} |")
    return "\n".join(lines)
