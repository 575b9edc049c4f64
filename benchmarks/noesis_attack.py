"""Cross-domain membership inference (seed 000 App. C.4) for benchmarks/noesis.py --table mia.

The attacker holds the parameters routed to one language (via: the shared parameters and via's
expert) and asks whether a document of another language (target) was in training. Since via's
expert never saw target's documents, whatever separates members from non-members came through
the shared parameters — the DP ones in NOESIS.

Members: target's training documents (the first ATTACK_DOCS of the rows' fixed subset; all of
Go's 150). Non-members: as many documents of target's training split that no row trains on —
the same projects, the same distribution, so a score cannot separate them by topic. Each
document is scored on the block at its middle (as the accuracy tables are). Two scores:
- calibrated (the attack reported): the document's mean log-likelihood per token under the model
  minus that under the public base model — the difficulty calibration of Watson et al. (2022),
  which the attacker can always run, since the base is public;
- raw: the mean log-likelihood alone (seed 000's score), kept for comparison.

Models: NOESIS (pt32 at ε = 1 + experts), the same non-private, and the positive control — a
non-private Mix-LoRA whose shared part is a common LoRA of rank 64 (seed 000 App. C.2.1), the
shared parameters with the capacity to memorize; the attack must be clearly above chance there,
or its failure on NOESIS would mean nothing."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from umbra.data.corpus import LANGS
from umbra.evaluation.membership import auc, membership_result, roc_curve, write_roc_svg

MODELS = ("mixlora_rc64_nonprivate", "noesis_nonprivate", "noesis")
ATTACK_DOCS = 500  # members per target language (and as many non-members)


async def _model(bench, name: str, seed: int):
    if name == "noesis":
        shared, _ = await bench.shared("soft_prompt", 1.0, seed, prompt_length=32)
        return shared, await bench.experts(f"noesis-s{seed}", (shared,), seed)
    if name == "noesis_nonprivate":
        shared, _ = await bench.shared("soft_prompt", math.inf, seed, prompt_length=32)
        return shared, await bench.experts(f"noesis-inf-s{seed}", (shared,), seed)
    shared, _ = await bench.shared("lora", math.inf, seed, rank=64)
    return shared, await bench.experts(f"mix-rc64-inf-s{seed}", (shared,), seed)


def attack_sets(bench) -> dict[str, tuple]:
    """Per target language: (member blocks, non-member blocks), equal in number."""
    out = {}
    for lang in LANGS:
        k = min(ATTACK_DOCS, len(bench.train[lang]), len(bench.unused[lang]))
        out[lang] = (bench.middle_blocks(bench.train[lang][:k]), bench.middle_blocks(bench.unused[lang][:k]))
    return out


def scores_path(out: Path, name: str, seed: int, budget_key: str) -> Path:
    return out / "mia-scores" / f"{name}-s{seed}-{budget_key}.npz"


async def attack(bench, results, seed: int) -> None:
    """Every (target, via) pair of every model; the calibrated scores are kept in
    OUT/mia-scores/<model>-s<seed>-<budget>.npz, from which --write draws the ROC plots."""
    sets = attack_sets(bench)
    base = {}  # the public base model's scores: the calibration
    for name in MODELS:
        rows = [f"{name}:{t}<-{v}" for t in LANGS for v in LANGS if v != t]
        if all(results.done("mia", r, seed) for r in rows):
            continue
        shared, experts = await _model(bench, name, seed)
        scores = {}
        for target in LANGS:
            members, nonmembers = sets[target]
            if target not in base:
                base[target] = [(await bench.scores(b, ())).log_likelihood for b in (members, nonmembers)]
            for via in LANGS:
                if via == target:
                    continue
                routed = (shared, experts[via])
                raw = [(await bench.scores(b, routed)).log_likelihood for b in (members, nonmembers)]
                m, n = raw[0] - base[target][0], raw[1] - base[target][1]
                r = membership_result(m, n, seed=seed)
                scores[f"{target}<-{via}:members"], scores[f"{target}<-{via}:nonmembers"] = m, n
                results.add({"table": "mia", "row": f"{name}:{target}<-{via}", "seed": seed, "auc": r.auc,
                             "auc_ci": list(r.auc_ci), "tpr_at_1pct": r.tpr_at_1pct, "tpr_ci": list(r.tpr_ci),
                             "raw_auc": auc(raw[0], raw[1]), "members": r.members, "nonmembers": r.nonmembers,
                             "budget": bench.budget.key()})
        path = scores_path(bench.out, name, seed, bench.budget.key())
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, **scores)


def write_plots(out: Path, plots: Path, seeds, budget_key: str) -> list[Path]:
    """One ROC plot per (model, seed) whose scores were kept: plots/roc-<model>-s<seed>.svg."""
    written = []
    for name in MODELS:
        for seed in seeds:
            path = scores_path(out, name, seed, budget_key)
            if not path.exists():
                continue
            kept = np.load(path)
            pairs = sorted({k.split(":")[0] for k in kept.files})
            curves = {p.replace("<-", " ← "): roc_curve(kept[f"{p}:members"], kept[f"{p}:nonmembers"]) for p in pairs}
            written.append(write_roc_svg(curves, plots / f"roc-{name}-s{seed}.svg",
                                         f"{name}, seed {seed}: cross-domain MIA (calibrated score)"))
    return written
