"""docs/privacy/frontier.md's tables and plot, and umbra/privacy/measured.json, from the rows of
experiments/private_mode.py (means over seeds with 95 % t-intervals)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from benchmarks.doc_markers import write_block
from experiments.seed_stats import mean_ci
from umbra.attack_grid.frontier import VARIANTS, Cell, FrontierParams, control_for, tune_config
from umbra.data.corpus import LANGS

NOT_ATTACKS = ("baseline", "sampler", "frequency_ceiling")  # the floor, a text floor, a yardstick
BOUNDS = ("oracle",)  # probes on the client's own states: what no cloud has, shown but not an attack
BAR = 1.0  # points above the frequency-only baseline an attack may reach and the mode still holds
ADAPTIVE = ("shadow", "decipher")  # attacks that adapt to the defence (a mode is defended only with one measured)
CLEARANCE = 10.0  # points of top-1 a private mode must add over the client-blocks-alone control
TITLES = {"nearest": "(a) nearest", "probe": "(b) probe", "probe_aware": "(b′) noise-aware", "frequency": "(c) frequency",
          "reconstruction": "(d) reconstruction", "gradient": "(e) gradient labels"}
# the attack names of umbra/privacy/measured.json (experiments/measured_modes.py)
PRODUCT_NAMES = {"nearest": "(a) nearest neighbour", "probe": "(b) probe", "probe_aware": "(b′) noise-aware probe",
                 "frequency": "(c) frequency analysis", "reconstruction": "(d) code reconstruction",
                 "gradient": "(e) gradient labels"}
MEASURED = "docs/privacy/frontier-measured.json"  # read by experiments/measured_modes.py
KEPT_SOURCE = ("docs/privacy/frontier.md, the first seed (attacks and top-1 of seed 0; its result rows were not "
               "kept, so the tables from the committed rows do not show it)")


def _group(rows: list[dict]) -> dict[tuple, dict[int, dict]]:
    """(variant, ε) -> seed -> {measure: value} (the first line of a repeated measurement wins)."""
    out: dict[tuple, dict[int, dict]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        out[(r["variant"], r["epsilon"])][r["seed"]].setdefault(r["measure"], r["value"])
    return out


def _fmt(values: list[float], digits: int = 1) -> str:
    if not values:
        return "…"
    m, h = mean_ci(values)
    return f"{m:.{digits}f}" if math.isnan(h) else f"{m:.{digits}f} ± {h:.{digits}f}"


def _eps(e) -> str:
    return "—" if e is None else ("∞" if e == "inf" else f"{e:g}")


def _strongest(scores: dict) -> tuple[str, float] | None:
    attacks = {k: 100 * v["recovery"] for k, v in scores.items()
               if k not in NOT_ATTACKS and k.split("@")[0] not in BOUNDS}
    if not attacks:
        return None
    name = max(attacks, key=attacks.get)
    return name, attacks[name]


def decipher_envelope(measured: dict) -> dict:
    """{"1x": s, "10x": s, "100x": s} -> the same, each volume's recovery the best at that volume or
    any smaller one: an attacker holding k× the traffic can fit the attack on a part of it and label
    the rest with what it learned (the parts are drawn alike), so what it reads cannot shrink as
    traffic grows — while the EM fitted on the whole can fail (noir+path+noise1, seed 0: 0.03 % at
    100× where 10× reads 29 %). A volume taken from a smaller one says so (`from`)."""
    out, best = {}, None
    for k in sorted(measured, key=lambda v: float(v.rstrip("x"))):
        v = measured[k]
        if best is not None and best[1]["recovery"] > v["recovery"]:
            v = {**best[1], "from": best[0]}
        else:
            best = (k, v)
        out[k] = v
    return out


def summarize(rows: list[dict]) -> list[dict]:
    """One record per (variant, ε) with per-seed lists, in VARIANTS order."""
    groups, order = _group(rows), list(VARIANTS)
    controls = {name: {s: m["utility"]["top1"] for s, m in groups.get((name, None), {}).items() if "utility" in m}
                for name in {control_for(v) for v, _ in groups}}
    out = []
    def rank(kv):  # VARIANTS order, then ε ascending (a control's None first)
        (variant, eps), _ = kv
        return order.index(variant) if variant in order else len(order), -1.0 if eps is None else float(eps)

    for (variant, eps), seeds in sorted(groups.items(), key=rank):
        rec = {"variant": variant, "epsilon": eps, "seeds": sorted(seeds), "top1": [], "gain": [], "languages":
               defaultdict(list), "attacks": defaultdict(list), "strongest": [], "baseline": []}
        alone = controls[control_for(variant)]
        for seed, m in sorted(seeds.items()):
            if "utility" in m:
                rec["top1"].append(m["utility"]["top1"])
                for lang, v in m["utility"]["languages"].items():
                    rec["languages"][lang].append(v["top1"])
                if seed in alone:
                    rec["gain"].append(m["utility"]["top1"] - alone[seed])
            scores = dict(m.get("attacks") or {})
            for name in ("shadow", "oracle"):
                scores.update(m.get(name) or {})
            scores.update({f"decipher@{k}": v for k, v in decipher_envelope(m.get("decipher") or {}).items()})
            if scores:
                for k, v in scores.items():
                    rec["attacks"][k].append(100 * v["recovery"])
                strongest = _strongest(scores)
                if strongest is not None:
                    rec["strongest"].append(strongest[1])
                if "baseline" in scores:
                    rec["baseline"].append(100 * scores["baseline"]["recovery"])
        base = float(np.mean(rec["baseline"])) if rec["baseline"] else None
        rec["adaptive"] = any(k.startswith(ADAPTIVE) for k in rec["attacks"])
        rec["holds"] = (None if base is None or not rec["strongest"]
                        else max(rec["strongest"]) <= base + BAR)  # every seed's strongest attack
        out.append(rec)
    return out


def tables(summary: list[dict]) -> str:
    lines = ["| variant | ε | top-1 % | − client alone (points) | strongest attack % | baseline % | holds (≤ baseline + 1) | seeds |",
             "|---|---|---|---|---|---|---|---|"]
    for r in summary:
        holds = {None: "—", True: "✓" if r["adaptive"] else "✓ per-position only", False: "✗"}[r["holds"]]
        if VARIANTS.get(r["variant"]) is not None and VARIANTS[r["variant"]].middle == "skip":
            holds = "nothing sent"
        lines.append(f"| {VARIANTS[r['variant']].label if r['variant'] in VARIANTS else r['variant']} | {_eps(r['epsilon'])} "
                     f"| {_fmt(r['top1'])} | {_fmt(r['gain'])} | {_fmt(r['strongest'])} | {_fmt(r['baseline'])} "
                     f"| {holds} | {len(r['seeds'])} |")
    if any(VARIANTS.get(r["variant"]) is not None and VARIANTS[r["variant"]].seed_invariant and len(r["seeds"]) > 1
           for r in summary):
        lines += ["", "The base model draws no secret and tunes nothing: every seed is the same client, so its seeds "
                      "are one measurement (rows marked `same_as`), hence its zero intervals."]
    every = {k for r in summary for k in r["attacks"]} - set(NOT_ATTACKS)
    layered = sorted(k for k in every if "@" in k and not k.startswith("decipher@"))
    names = [k for k in TITLES if k in every] + sorted(every - set(TITLES) - set(layered))
    lines += ["", "**Each attack's token recovery (%)**, mean ± 95 % t-interval over seeds (shadow: the adaptive "
              "attacker's probes, at the layer its own validation picks as `shadow_layers`; oracle: a bound, probes "
              "trained on the client's own states — not an attack; decipher@k: k× the prompts' traffic, the best "
              "over that volume and smaller ones, since an attacker can run it on part of what it holds):", "",
              "| variant | ε | " + " | ".join(TITLES.get(k, k) for k in names) + " |", "|---|---|" + "---|" * len(names)]
    for r in summary:
        if r["attacks"]:
            lines.append(f"| {r['variant']} | {_eps(r['epsilon'])} | " + " | ".join(_fmt(r["attacks"].get(k, [])) for k in names) + " |")
    if layered:
        lines += ["", "**Per layer (%)**: the shadow's and the oracle's probes at the split layer and each middle layer's output:", "",
                  "| variant | ε | " + " | ".join(layered) + " |", "|---|---|" + "---|" * len(layered)]
        for r in summary:
            if any(k in r["attacks"] for k in layered):
                lines.append(f"| {r['variant']} | {_eps(r['epsilon'])} | " + " | ".join(_fmt(r["attacks"].get(k, [])) for k in layered) + " |")
    lines += ["", "**Top-1 by language (%)**:", "", "| variant | ε | " + " | ".join(LANGS) + " |", "|---|---|" + "---|" * len(LANGS)]
    for r in summary:
        if r["top1"]:
            lines.append(f"| {r['variant']} | {_eps(r['epsilon'])} | " + " | ".join(_fmt(r["languages"].get(g, [])) for g in LANGS) + " |")
    return "\n".join(lines)


def frontier_svg(summary: list[dict], path: Path, kept: list[dict] = ()) -> None:
    """Top-1 (y) against the strongest attack (x), one point per (variant, ε) with its intervals;
    the client-alone control as a horizontal line, the attack bar as a vertical one. `kept`:
    measured records (merge_measured) of configurations with no committed rows, drawn hollow."""
    w, h, pad = 560, 380, 50
    points = [r for r in summary if r["top1"] and r["strongest"]]
    kept = [r for r in kept if r.get("top1") is not None and r["attacks"]]
    alone = next((r for r in summary if r["variant"] == "client_alone" and r["top1"]), None)
    base = [b for r in summary for b in r["baseline"]]
    xmax = max([100.0] + [max(r["strongest"]) for r in points] + [max(r["attacks"].values()) for r in kept])
    ymax = max([10.0] + [max(r["top1"]) for r in summary if r["top1"]]) * 1.15

    def xy(x: float, y: float) -> tuple[float, float]:
        return pad + x / xmax * (w - 2 * pad), h - pad - y / ymax * (h - 2 * pad)

    legend = [f"{r['variant']} {_eps(r['epsilon'])}" for r in points] + [f"{r['label']} (seed 0)" for r in kept]
    width = w + max(230, 6 * max((len(t) for t in legend), default=0) + 20)
    height = max(h, pad + 14 * (len(legend) + 1))
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
           f'<rect x="{pad}" y="{pad}" width="{w - 2 * pad}" height="{h - 2 * pad}" fill="none" stroke="#888"/>',
           f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">strongest attack: token recovery (%)</text>',
           f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" text-anchor="middle">next-token top-1 (%)</text>']
    for t in range(0, int(xmax) + 1, 20):
        x, _ = xy(t, 0)
        svg.append(f'<text x="{x:.0f}" y="{h - pad + 14}" text-anchor="middle">{t}</text>')
    for t in range(0, int(ymax) + 1, 10):
        _, y = xy(0, t)
        svg.append(f'<text x="{pad - 6}" y="{y + 4:.0f}" text-anchor="end">{t}</text>')
    if base:
        x, _ = xy(float(np.mean(base)) + BAR, 0)
        svg.append(f'<line x1="{x:.1f}" y1="{pad}" x2="{x:.1f}" y2="{h - pad}" stroke="#c33" stroke-dasharray="4 3"/>')
        svg.append(f'<text x="{x + 4:.1f}" y="{pad + 12}" fill="#c33">baseline + 1</text>')
    if alone is not None:
        _, y = xy(0, float(np.mean(alone["top1"])))
        svg.append(f'<line x1="{pad}" y1="{y:.1f}" x2="{w - pad}" y2="{y:.1f}" stroke="#36c" stroke-dasharray="4 3"/>')
        svg.append(f'<text x="{w - pad - 4}" y="{y - 4:.1f}" text-anchor="end" fill="#36c">client blocks alone</text>')
        _, y = xy(0, float(np.mean(alone["top1"])) + CLEARANCE)
        svg.append(f'<line x1="{pad}" y1="{y:.1f}" x2="{w - pad}" y2="{y:.1f}" stroke="#36c" stroke-opacity="0.4"/>')
        svg.append(f'<text x="{w - pad - 4}" y="{y - 4:.1f}" text-anchor="end" fill="#36c" fill-opacity="0.7">alone + 10</text>')
    for i, r in enumerate(points):
        mx, hx = mean_ci(r["strongest"])
        my, hy = mean_ci(r["top1"])
        x, y = xy(mx, my)
        colour = "#333" if VARIANTS.get(r["variant"], VARIANTS["base"]).control else "#d60"
        for (x1, y1), (x2, y2) in ((xy(mx - hx, my), xy(mx + hx, my)), (xy(mx, my - hy), xy(mx, my + hy))):
            if not math.isnan(hx + hy):
                svg.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{colour}"/>')
        svg.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}"/><text x="{x + 6:.1f}" y="{y - 5:.1f}">{i + 1}</text>')
        svg.append(f'<text x="{w + 5}" y="{pad + 14 * i}">{i + 1}: {legend[i]}</text>')
    for j, r in enumerate(kept, start=len(points)):
        x, y = xy(max(r["attacks"].values()), r["top1"])
        svg.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="none" stroke="#d60"/><text x="{x + 6:.1f}" y="{y - 5:.1f}">{j + 1}</text>')
        svg.append(f'<text x="{w + 5}" y="{pad + 14 * j}">{j + 1}: {legend[j]}</text>')
    if kept:
        svg.append(f'<text x="{w + 5}" y="{pad + 14 * len(legend) + 4}">hollow: seed 0, rows not kept</text>')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(svg + ["</svg>"]) + "\n")


def measured(summary: list[dict], params: FrontierParams, doc: str = "docs/privacy/frontier.md") -> dict:
    """umbra/privacy/measured.json's configurations for the product's modes (NOIR variants and
    no bundle), keyed by umbra.privacy.mode.config_key — the same key the product computes;
    `doc` is named as their source."""
    from umbra.privacy.mode import config_key, stuning_record

    by_name = {r["variant"]: r for r in summary if r["epsilon"] is None}
    fclean = by_name.get("fclean")
    out = {}
    for r in summary:
        v = VARIANTS.get(r["variant"])
        if v is None or (v.control and v.name != "base") or not r["attacks"]:
            continue
        eps = None if r["epsilon"] is None else (math.inf if r["epsilon"] == "inf" else float(r["epsilon"]))
        record = stuning_record(tune_config(Cell(v, eps, 0), params), cloud_lora=bool(v.cloud_lora)) if v.stuning else None
        attacks = {PRODUCT_NAMES.get(k, k): round(float(np.max(x)), 1) for k, x in r["attacks"].items()
                   if k not in NOT_ATTACKS and k.split("@")[0] not in BOUNDS}  # the worst seed
        baseline = round(float(np.mean(r["baseline"])), 1)
        key = config_key(eps if v.noir else None, record)
        if key in out:  # an experiment on a knob the key does not hold (the gate's lr): the first row speaks
            continue
        alone = by_name.get(control_for(v.name))
        out[key] = {
            "label": v.label + ("" if eps is None else f", ε = {_eps(r['epsilon'])}"),
            "attacks": attacks, "baseline": baseline,
            "holds": _holds(attacks, baseline),
            "top1": round(float(np.mean(r["top1"])), 1) if r["top1"] else None,
            "client_alone_top1": round(float(np.mean(alone["top1"])), 1) if alone and alone["top1"] else None,
            "fclean_top1": round(float(np.mean(fclean["top1"])), 1) if fclean and fclean["top1"] else None,
            "seeds": len(r["seeds"]), "adaptive": r["adaptive"],
            "source": f"{doc} (attacks: the worst seed; top-1: the mean over seeds)"}
    return out


def _holds(attacks: dict[str, float], baseline: float) -> bool:
    """Every attack within BAR points of the frequency-only baseline (a product record's `holds`)."""
    return all(a <= baseline + BAR for a in attacks.values())


def merge_measured(earlier: dict, now: dict) -> dict:
    """The records of `now` (from the committed rows) over those of `earlier` (the file as it is):
    a configuration measured only earlier keeps its record, marked KEPT_SOURCE (its result rows
    were not kept: the product still shows, and refuses by, what was measured); one measured in
    both takes `now`'s top-1 and seeds, and each attack's worst over both (a seed measured earlier
    whose rows were lost is still a seed an attack read)."""
    out = {}
    for key, old in earlier.items():
        if key not in now:
            out[key] = {**old, "source": KEPT_SOURCE}
    for key, rec in now.items():
        old = earlier.get(key)
        if old is not None:
            attacks = {k: max(v, old["attacks"].get(k, v)) for k, v in rec["attacks"].items()}
            attacks.update({k: v for k, v in old["attacks"].items() if k not in attacks})
            rec = {**rec, "attacks": attacks, "adaptive": rec["adaptive"] or old["adaptive"],
                   "holds": _holds(attacks, rec["baseline"])}
        out[key] = rec
    return out


def write_report(rows: list[dict], params: FrontierParams, doc: Path) -> None:
    summary = summarize(rows)
    root = Path(__file__).resolve().parent.parent
    earlier = json.loads((root / MEASURED).read_text(encoding="utf-8")) if (root / MEASURED).is_file() else {}
    records = merge_measured(earlier, measured(summary, params))
    if not doc.is_file():
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text("# The privacy-utility frontier\n")
    write_block(doc, "frontier-tables", tables(summary), append=True)
    frontier_svg(summary, doc.parent / "frontier.svg", [r for r in records.values() if r["source"] == KEPT_SOURCE])
    write_block(doc, "frontier-plot", "![frontier](frontier.svg)", append=True)
    (root / MEASURED).write_text(json.dumps(records, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    from experiments import measured_modes  # the product's file: the older doc tables, overridden by these records

    measured_modes.OUT.write_text(measured_modes.render(measured_modes.build(root)), encoding="utf-8")
