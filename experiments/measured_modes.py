"""Write `umbra/privacy/measured.json` — the measured figures the product shows for its privacy
modes (umbra/privacy/mode.py) — from the tables of docs/privacy/attacks.md and
docs/privacy/utility.md, which `experiments/privacy_attacks.py` and `experiments/privacy_utility.py`
generate. Every number in the file is a cell of one of those tables; a configuration whose utility
was not measured gets null.

    python experiments/measured_modes.py            # rewrite the file
    python experiments/measured_modes.py --check    # exit 1 if the file differs from the docs

Which rows become which configuration (keys by `umbra.privacy.mode.config_key`):
  * "no defence" → no bundle; "INDVocab + LTokenizer" at ε → an untuned bundle at ε. Their
    attacks are (a)–(d) and (b′): the traffic of completions. The tables' (e) for these rows is the
    gradient of the first steps of tuning such a client, not traffic an untuned client sends.
  * "both + STuning" (exact gradient), "…, noised gradient" (σ = 0.1), "…, inversion penalty"
    (λ = 10), each 300 steps: attacks (a)–(e), (e) on the tuning gradient sent through the cloud.
    The "middle run locally" rows share those keys (the key does not say where the middle ran) and
    differ only by sending no gradient; the through-the-cloud rows are kept, the stricter reading.
  * "INDVocab only" and "LTokenizer only" are not configurations `umbra init` makes (a bundle always
    has π; LTokenizer only is ε = ∞).
The grid's parameters (300 steps, σ = 0.1, λ = 10) are checked against the tables' headers. Not
attacks, so left out: the frequency sampler, the (c) ceiling (it reads the truth) and the guess bound.
The client-blocks-alone control is in no table yet: null."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from umbra.privacy.manifest import sha256_file  # noqa: E402
from umbra.privacy.measured import parse_measured  # noqa: E402
from umbra.privacy.mode import config_key, config_label  # noqa: E402

ATTACKS_DOC = "docs/privacy/attacks.md"
UTILITY_DOC = "docs/privacy/utility.md"
OUT = ROOT / "umbra" / "privacy" / "measured.json"
FRONTIER = "docs/privacy/frontier-measured.json"  # experiments/private_mode_report.py: hygienic, 3 seeds, controls
SHARE = "docs/privacy/share-measured.json"  # experiments/share_sweep.py --write: other models (the deep default)
MODEL = "models/umbra-code-tiny"  # the base model every figure was measured on
STEPS, SIGMA, LAMBDA = 300, 0.1, 10.0  # the grid's STuning (checked against the tables' headers)
INFERENCE_ATTACKS = ("(a) nearest neighbour", "(b) probe", "(b′) noise-aware probe", "(c) frequency analysis",
                     "(d) code reconstruction")
TUNING_ATTACK = "(e) gradient labels"
# attack-table configuration -> (STuning σ, λ) or None for untuned rows
ATTACK_ROWS = {"no defence": None, "INDVocab + LTokenizer": None, "both + STuning": (0.0, 0.0),
               "both + STuning, noised gradient": (SIGMA, 0.0), "both + STuning, inversion penalty": (0.0, LAMBDA)}
UTILITY_ROWS = {"base, untuned": None, "NOIR untuned": None, "**NOIR + STuning**": (0.0, 0.0),
                f"NOIR + STuning, noised gradient (σ = {SIGMA:g})": (SIGMA, 0.0),
                f"NOIR + STuning, inversion penalty (λ = {LAMBDA:g})": (0.0, LAMBDA)}


class DocError(Exception):
    pass


def table_after(text: str, marker: str) -> list[dict[str, str]]:
    """The first markdown table after `marker`, as rows of {header: cell}."""
    at = text.find(marker)
    if at < 0:
        raise DocError(f"no {marker!r}")
    rows, header = [], None
    for ln in text[at:].splitlines():
        if not ln.startswith("|"):
            if header is not None:
                break
            continue
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set(ln.replace("|", "").strip()) <= set("-: "):
            rows.append(dict(zip(header, cells)))
    if not rows:
        raise DocError(f"no table after {marker!r}")
    return rows


def epsilon_of(cell: str) -> float | None:
    cell = cell.strip()
    return None if cell in ("—", "-") else float("inf") if cell in ("∞", "inf") else float(cell)


def stuning(spec: tuple[float, float] | None) -> dict | None:
    if spec is None:
        return None
    sigma, weight = spec
    return {"steps": STEPS, "gradient_noise": {"noise_multiplier": sigma}, "inversion_penalty": {"weight": weight},
            "train_embedding": False, "cloud_lora": False}


def percent(cell: str) -> float | None:
    cell = cell.strip().strip("*").rstrip("%").strip()
    return None if cell in ("—", "-", "", "(running)") else float(cell)


def build(root: Path = ROOT, share: Path | None = None) -> dict:
    """measured.json's content from the docs under `root` (`share`: the share sweep's records,
    default root/SHARE)."""
    attacks_text = (root / ATTACKS_DOC).read_text(encoding="utf-8")
    utility_text = (root / UTILITY_DOC).read_text(encoding="utf-8")
    generated = attacks_text[attacks_text.find("<!-- BEGIN GENERATED"):]
    for needle in (f"--tune-steps {STEPS}", f"σ = {SIGMA:g}", f"λ = {LAMBDA:g}"):
        if needle not in generated:
            raise DocError(f"{ATTACKS_DOC}: the table's header no longer says {needle!r}")
    if f"{STEPS} steps" not in utility_text or f"σ = {SIGMA:g}" not in utility_text:
        raise DocError(f"{UTILITY_DOC}: the table's header no longer says {STEPS} steps and σ = {SIGMA:g}")
    cache = re.search(r"Cache key `(\w+)`", generated)
    run = re.search(r"### Results \(final; run `(\w+)`\)", utility_text)
    if cache is None or run is None:
        raise DocError("the tables' cache key / run id are missing")

    utility: dict[str, float | None] = {}
    fclean = None
    for row in table_after(utility_text, "<!-- utility-table:begin -->"):
        model = row["model"]
        top1 = percent(row["next-token top-1"])
        if model.startswith("fClean"):
            fclean = top1
        elif model in UTILITY_ROWS:
            eps = None if model == "base, untuned" else epsilon_of(row["ε"])
            utility[config_key(eps, stuning(UTILITY_ROWS[model]))] = top1
    if fclean is None:
        raise DocError(f"{UTILITY_DOC}: no fClean row")

    configurations = {}
    for row in table_after(generated, "**Token recovery rate (%)**"):
        name = row["configuration"]
        if name not in ATTACK_ROWS:
            continue
        eps = None if name == "no defence" else epsilon_of(row["ε"])
        record = stuning(ATTACK_ROWS[name])
        names = INFERENCE_ATTACKS + ((TUNING_ATTACK,) if record is not None else ())
        attacks = {a: percent(row[a]) for a in names}
        attacks = {a: v for a, v in attacks.items() if v is not None}
        baseline = percent(row["frequency-only baseline"])
        key = config_key(eps, record)
        measured = {"label": config_label(eps, record), "attacks": attacks, "baseline": baseline,
                    "holds": all(v <= baseline + 1.0 for v in attacks.values()),
                    "top1": utility.get(key), "client_alone_top1": None, "fclean_top1": fclean,
                    "seeds": 1, "adaptive": False,
                    "source": f"{ATTACKS_DOC} (token recovery table)"
                              + (f"; {UTILITY_DOC} (utility table)" if utility.get(key) is not None else "")}
        configurations[key] = measured
    source = (f"experiments/measured_modes.py from {ATTACKS_DOC} (attack grid cache key {cache.group(1)}) "
              f"and {UTILITY_DOC} (utility run {run.group(1)}); seed 0, 300 STuning steps, no adaptive "
              f"attacker, no client-blocks-alone control")
    frontier = root / FRONTIER
    if frontier.is_file():  # the frontier's records replace the older tables' for the same key
        configurations.update(json.loads(frontier.read_text(encoding="utf-8")))
        source += f"; overridden where measured by {FRONTIER} (experiments/private_mode.py)"
    weights = sorted((root / MODEL).glob("*.safetensors"))
    data = {"source": source,
            "model": {"name": Path(MODEL).name, "weights": {p.name: sha256_file(p) for p in weights}},
            "configurations": configurations}
    parse_measured(data)  # the product's own checks (holds consistent, every field typed)
    share = root / SHARE if share is None else share
    if share.is_file():  # the share sweep's models, each at its split
        data["other_models"] = json.loads(share.read_text(encoding="utf-8"))
        for entry in data["other_models"]:
            parse_measured(entry)
    return data


def render(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="exit 1 if the file differs from what the docs give")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    text = render(build())
    if args.check:
        same = args.out.is_file() and args.out.read_text(encoding="utf-8") == text
        print(f"{args.out}: {'up to date' if same else 'differs from the docs'}", file=sys.stderr)
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(json.loads(text)['configurations'])} configurations)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
