"""The share sweep (issue 59): one private-mode configuration and its controls at several client
shares — the tiny model's 3/8 and the deep model's 2/16, 3/16, 4/16 — to see where, if anywhere,
the defended mode crosses the client's own blocks alone + 10 points.

    python experiments/share_sweep.py --point models/umbra-code-tiny:1,2 --point runs/deep-snap:1,1 \
        --point runs/deep-snap:1,2 --point runs/deep-snap:2,2 --seeds 0 --measures utility   # run what is missing
    python experiments/share_sweep.py --point ... --write        # docs/privacy/share_sweep.md and .svg

Each point is a (model directory, E,D split) run of experiments/private_mode.py: the same cells,
tuning, measures and results file (experiments/results/private_mode.jsonl), keyed by the model's
fingerprint and the split, so a point whose model changed (a newer snapshot) starts afresh and never
mixes its rows with the old ones; the tiny model at its default split reuses the frontier's rows."""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.doc_markers import write_block  # noqa: E402
from experiments import measured_modes, private_mode  # noqa: E402
from experiments.private_mode_report import BAR, CLEARANCE, _fmt, measured, summarize  # noqa: E402
from experiments.seed_stats import mean_ci  # noqa: E402
from umbra.attack_grid.frontier import FrontierParams, cells  # noqa: E402

DEFENDED = "noir+clean+noise1"  # the frontier's best configuration that held every attack
MEASURED = "docs/privacy/share-measured.json"  # the product's figures per model (experiments/measured_modes.py)
CONTROLS = ("base", "fclean", "client_alone")
MARK = "share-sweep"


@dataclass(frozen=True)
class Point:
    model: Path
    encoder_blocks: int
    decoder_blocks: int

    @staticmethod
    def parse(text: str) -> "Point":
        model, sep, split = text.rpartition(":")
        if not sep:
            raise argparse.ArgumentTypeError(f"--point takes MODEL_DIR:E,D, got {text!r}")
        plan = private_mode.split_plan(split)
        return Point(Path(model), plan.encoder_blocks, plan.decoder_blocks)


def _args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--point", type=Point.parse, action="append", required=True, metavar="MODEL_DIR:E,D")
    p.add_argument("--variants", default=",".join(CONTROLS + (DEFENDED,)))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--measures", default="utility,attacks", help="of: " + ", ".join(private_mode.MEASURES))
    p.add_argument("--tune-steps", type=int, default=FrontierParams.tune_steps)
    p.add_argument("--corpus", type=Path, default=Path("data/corpus"))
    p.add_argument("--work", type=Path, default=Path("runs/private_mode"))
    p.add_argument("--results", type=Path, default=Path("experiments/results/private_mode.jsonl"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="auto")
    p.add_argument("--write", action="store_true", help="write the doc and the plot, run nothing")
    p.add_argument("--doc", type=Path, default=Path("docs/privacy/share_sweep.md"))
    p.add_argument("--measured", type=Path, default=ROOT / MEASURED,
                   help="--write: the product's figures per model and split (JSON)")
    p.add_argument("--product", type=Path, default=measured_modes.OUT,
                   help="--write: the package's measured.json, rebuilt with --measured")
    return p.parse_args(argv)


def _bench(args, point: Point) -> private_mode.Bench:
    inner = private_mode._args([
        "--model", str(point.model), "--split", f"{point.encoder_blocks},{point.decoder_blocks}",
        "--corpus", str(args.corpus), "--work", str(args.work), "--results", str(args.results),
        "--threads", str(args.threads), "--device", args.device, "--tune-steps", str(args.tune_steps)])
    return private_mode.Bench(inner, replace(FrontierParams(), tune_steps=args.tune_steps))


def _trained_step(model: Path) -> int | None:
    meta = model / "training.json"
    if not meta.is_file():
        return None
    state = json.loads(meta.read_text()).get("state") or {}
    return state.get("step")


def point_record(point: Point, bench: private_mode.Bench, rows: list[dict]) -> dict:
    """One row of the sweep (`rows`: the point's `summarize`d results): the share, each variant's
    top-1 per seed, the defended mode's gain over client-alone and its strongest attack against
    the frequency baseline."""
    layers = bench.public.spec.num_layers
    summary = {r["variant"]: r for r in rows}
    defended = summary.get(DEFENDED, {})
    baseline = defended.get("baseline") or []
    strongest = defended.get("strongest") or []
    return {"model": str(point.model), "step": _trained_step(point.model), "layers": layers,
            "split": f"{point.encoder_blocks},{point.decoder_blocks}",
            "share": (point.encoder_blocks + point.decoder_blocks) / layers,
            "top1": {v: (summary.get(v) or {}).get("top1", []) for v in CONTROLS + (DEFENDED,)},
            "gain": defended.get("gain", []), "strongest": strongest,
            "baseline": float(np.mean(baseline)) if baseline else None,
            "holds": defended.get("holds")}


def product_record(point: Point, bench: private_mode.Bench, rows: list[dict]) -> dict:
    """The product's figures for the point's model at its split (umbra/privacy/measured.json's
    `other_models`): the configurations measured there, by the key the product computes."""
    from umbra.privacy.manifest import sha256_file

    weights = sorted(point.model.glob("*.safetensors"))
    configurations = measured(rows, bench.params, doc=MEASURED)
    return {"name": point.model.name, "weights": {p.name: sha256_file(p) for p in weights},
            "sizes": {p.name: p.stat().st_size for p in weights},
            "split": [point.encoder_blocks, point.decoder_blocks],
            "source": f"experiments/results/private_mode.jsonl, run {bench.results.run} "
                      f"(experiments/share_sweep.py --point {point.model}:{point.encoder_blocks},{point.decoder_blocks})",
            "configurations": configurations}


def table(records: list[dict]) -> str:
    head = ("| model (step) | layers | E,D | client share | seeds | base | fClean | client alone | defended | "
            "defended − alone | strongest attack (baseline) |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    lines = [head]
    for r in sorted(records, key=lambda r: (r["share"], r["model"])):
        step = "" if r["step"] is None else f" ({r['step']})"
        attack = "not measured" if not r["strongest"] else (
            f"{max(r['strongest']):.1f} % ({r['baseline']:.1f} %{', holds' if r['holds'] else ', read'})")
        cells_ = [_fmt(r["top1"][v]) for v in CONTROLS + (DEFENDED,)]
        seeds = max(len(v) for v in r["top1"].values())
        lines.append(f"| {Path(r['model']).name}{step} | {r['layers']} | {r['split']} | {100 * r['share']:.1f} % | {seeds} | "
                     + " | ".join(cells_) + f" | {_fmt(r['gain'])} | {attack} |")
    return "\n".join(lines)


def svg(records: list[dict], path: Path) -> None:
    """Top-1 (y) against the client's share of the blocks (x): client alone, defended and fClean,
    with the client-alone + 10 bar the defended mode must cross."""
    w, h, pad = 560, 360, 50
    rs = sorted((r for r in records if r["top1"]["client_alone"]), key=lambda r: r["share"])
    ys = [v for r in rs for k in ("client_alone", DEFENDED, "fclean") for v in r["top1"][k]]
    ymax = max([10.0] + ys + [np.mean(r["top1"]["client_alone"]) + CLEARANCE for r in rs]) * 1.1
    xmax = 0.5

    def xy(x: float, y: float) -> tuple[float, float]:
        return pad + x / xmax * (w - 2 * pad), h - pad - y / ymax * (h - 2 * pad)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w + 190}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<rect x="{pad}" y="{pad}" width="{w - 2 * pad}" height="{h - 2 * pad}" fill="none" stroke="#888"/>',
           f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">client share of the blocks (%)</text>',
           f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" text-anchor="middle">next-token top-1 (%)</text>']
    for t in range(0, 51, 10):
        x, _ = xy(t / 100, 0)
        out.append(f'<text x="{x:.0f}" y="{h - pad + 14}" text-anchor="middle">{t}</text>')
    for t in range(0, int(ymax) + 1, 10):
        _, y = xy(0, t)
        out.append(f'<text x="{pad - 6}" y="{y + 4:.0f}" text-anchor="end">{t}</text>')
    series = (("client_alone", "#36c", "client blocks alone", ""), ("client_alone+10", "#36c", "alone + 10", "4 3"),
              (DEFENDED, "#d60", "defended (clean residual, s = 1)", ""), ("fclean", "#333", "fClean", ""))
    for i, (key, colour, label, dash) in enumerate(series):
        pts = []
        for r in rs:
            vals = r["top1"]["client_alone"] if key == "client_alone+10" else r["top1"][key]
            if vals:
                m, hw = mean_ci(vals)
                m += CLEARANCE if key == "client_alone+10" else 0.0
                pts.append((r["share"], m, hw))
        if not pts:
            continue
        line = " ".join("{:.1f},{:.1f}".format(*xy(s, m)) for s, m, _ in pts)
        out.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-dasharray="{dash}"/>')
        for s, m, hw in pts:
            x, y = xy(s, m)
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>')
            if key != "client_alone+10" and not math.isnan(hw):
                (x1, y1), (x2, y2) = xy(s, m - hw), xy(s, m + hw)
                out.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{colour}"/>')
        out.append(f'<text x="{w + 5}" y="{pad + 14 * i}" fill="{colour}">{label}</text>')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out + ["</svg>"]) + "\n")


def write(records: list[dict], doc: Path) -> None:
    plot = doc.with_suffix(".svg")
    svg(records, plot)
    body = (f"Next-token top-1 (%) on the corpus test split after {records[0]['tune_steps']} tuning steps, means over "
            f"the seeds measured (from 0; the seeds column) with 95 % t-intervals where there is more than one; "
            f"an attack holds within {BAR:g} point of the frequency-only baseline; the bar is client alone + "
            f"{CLEARANCE:g}.\n\n" + table(records) + f"\n\n![top-1 against the client's share]({plot.name})\n")
    if not doc.is_file():
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(f"# The share sweep\n\n<!-- {MARK}:begin -->\n<!-- {MARK}:end -->\n")
    write_block(doc, MARK, body)


def main(argv=None) -> int:
    args = _args(argv)
    torch.set_num_threads(args.threads)
    wanted = [m.strip() for m in args.measures.split(",") if m.strip()]
    unknown = set(wanted) - set(private_mode.MEASURES)
    if unknown:
        raise SystemExit(f"unknown measures {sorted(unknown)} (known: {', '.join(private_mode.MEASURES)})")
    records, products = [], []
    for point in args.point:
        bench = _bench(args, point)
        if args.write:
            rows = summarize(bench.results.rows())
            records.append({**point_record(point, bench, rows), "tune_steps": args.tune_steps, "seeds": args.seeds})
            if point.model.resolve() != (ROOT / measured_modes.MODEL).resolve():  # the first table's model
                products.append(product_record(point, bench, rows))
            continue
        for cell in cells([v.strip() for v in args.variants.split(",") if v.strip()], [1024.0], args.seeds):
            bench.run(cell, wanted)
    if args.write:
        write(records, args.doc)
        products.sort(key=lambda r: (r["name"], r["split"]))
        args.measured.write_text(json.dumps(products, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        args.product.write_text(measured_modes.render(measured_modes.build(ROOT, share=args.measured)),
                                encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
