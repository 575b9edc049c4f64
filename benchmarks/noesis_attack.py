"""Cross-domain membership inference (seed 000 App. C.4) for benchmarks/noesis.py --table mia.

The attacker holds the parameters routed to one language (via: the shared parameters and via's
expert) and asks whether a document of another language (target) was in training. Its score is
the document's mean log-likelihood per token under that model (the block at the document's
middle, as the accuracy tables use); members are target's training documents, non-members its
test documents. Since via's expert never saw target's documents, whatever the score separates
came through the shared parameters — the DP ones in NOESIS.

Models: NOESIS (pt32 at ε = 1 + experts), the same non-private, and the positive control — a
non-private Mix-LoRA whose shared part is a common LoRA of rank 64 (seed 000 App. C.2.1), the
shared parameters with the capacity to memorize; the attack must be clearly above chance there,
or its failure on NOESIS would mean nothing."""

from __future__ import annotations

import math
from pathlib import Path

from umbra.data.corpus import LANGS
from umbra.evaluation.membership import membership_result, roc_curve, write_roc_svg

MODELS = ("mixlora_rc64_nonprivate", "noesis_nonprivate", "noesis")


async def _model(bench, name: str, seed: int):
    if name == "noesis":
        shared, _ = await bench.shared(f"pt32-dp-s{seed}", "soft_prompt", 1.0, seed, prompt_length=32)
        return shared, await bench.experts(f"noesis-s{seed}", (shared,), seed)
    if name == "noesis_nonprivate":
        shared, _ = await bench.shared(f"pt32-inf-s{seed}", "soft_prompt", math.inf, seed, prompt_length=32)
        return shared, await bench.experts(f"noesis-inf-s{seed}", (shared,), seed)
    shared, _ = await bench.shared(f"rc64-inf-s{seed}", "lora", math.inf, seed, rank=64)
    return shared, await bench.experts(f"mix-rc64-inf-s{seed}", (shared,), seed)


async def attack(bench, results, seed: int, plots: Path | None = None) -> None:
    plots = plots or Path(__file__).resolve().parents[1] / "docs" / "noesis"
    for name in MODELS:
        rows = [f"{name}:{t}<-{v}" for t in LANGS for v in LANGS if v != t]
        if all(results.done("mia", r, seed) for r in rows):
            continue
        shared, experts = await _model(bench, name, seed)
        curves = {}
        for target in LANGS:
            member_blocks = bench.middle_blocks(bench.members[target])
            test_blocks = bench.middle_blocks(bench.test[target])
            for via in LANGS:
                if via == target:
                    continue
                routed = (shared, experts[via])
                members = (await bench.scores(member_blocks, routed)).log_likelihood
                nonmembers = (await bench.scores(test_blocks, routed)).log_likelihood
                r = membership_result(members, nonmembers, seed=seed)
                curves[f"{target} ← {via}"] = roc_curve(members, nonmembers)
                results.add({"table": "mia", "row": f"{name}:{target}<-{via}", "seed": seed, "auc": r.auc,
                             "auc_ci": list(r.auc_ci), "tpr_at_1pct": r.tpr_at_1pct, "tpr_ci": list(r.tpr_ci),
                             "members": r.members, "nonmembers": r.nonmembers, "budget": bench.budget.key()})
        plots.mkdir(parents=True, exist_ok=True)
        write_roc_svg(curves, plots / f"roc-{name}-s{seed}.svg", f"{name}, seed {seed}: cross-domain MIA")
