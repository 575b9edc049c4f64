"""Measurements of a model: utility (next-token accuracy, perplexity, FIM line exact match) and
memorization of an organization's secrets (canaries planted in its code; the inference attack,
exposure, extraction and perplexity of memorization.py).

    planted = plant_canaries(documents, CanaryConfig(org="acme"))
    score = text_score(model.tokenizer, route_logits(model.decoder, Trunk(model.encoder, middle), adapters))
    inference_attack(score, planted.candidate_sets(c=50))"""

from __future__ import annotations

from typing import TYPE_CHECKING

from umbra.lazy import exports

# Names resolve on first use (PEP 562): the canaries load without torch and the model code.
_HOME = {
    "CandidateSet": "canaries", "Canary": "canaries", "CanaryConfig": "canaries", "PlantedCorpus": "canaries",
    "plant_canaries": "canaries",
    "ExposureResult": "memorization", "ExtractionConfig": "memorization", "ExtractionResult": "memorization",
    "InferenceResult": "memorization", "Trunk": "memorization", "exposure": "memorization", "extract": "memorization",
    "extraction_metrics": "memorization", "inference_attack": "memorization", "perplexity": "memorization",
    "route_logits": "memorization", "text_score": "memorization", "wilson_interval": "memorization",
    "MembershipResult": "membership", "auc": "membership", "bootstrap_ci": "membership",
    "membership_result": "membership", "roc_curve": "membership", "tpr_at_fpr": "membership",
    "write_roc_svg": "membership",
}
__all__ = sorted(_HOME)

if TYPE_CHECKING:
    from umbra.evaluation.canaries import CandidateSet, Canary, CanaryConfig, PlantedCorpus, plant_canaries
    from umbra.evaluation.memorization import (ExposureResult, ExtractionConfig, ExtractionResult, InferenceResult,
                                               Trunk, exposure, extract, extraction_metrics, inference_attack,
                                               perplexity, route_logits, text_score, wilson_interval)
    from umbra.evaluation.membership import (MembershipResult, auc, bootstrap_ci, membership_result, roc_curve,
                                             tpr_at_fpr, write_roc_svg)


__getattr__ = exports(__name__, _HOME)
