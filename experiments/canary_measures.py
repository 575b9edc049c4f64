"""What one route (an adapter set) reveals of an organization's planted canaries, as SecureGate's
experiments measure it (experiments/securegate.py, experiments/federation.py): inference accuracy over
candidate sets of c values (95 % Wilson intervals), by how often a canary was planted, rank-based
exposure, sampled extraction (precision / recall), greedy extraction (how much of each value the
greedy completion of its prefix reproduces), each also split into groups of canaries (those the
scrubber removes and those it misses), over umbra/evaluation/canaries.py and
memorization.py. Seeds: candidate sets `seed + 1`, exposure samples `seed + 2`, extraction `seed`."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict

import torch
import torch.nn.functional as F

from umbra.engine.runner import MonolithicRunner
from umbra.evaluation.canaries import CandidateSet, Canary, CanaryConfig, PlantedCorpus
from umbra.evaluation.canary_formats import format_pattern
from umbra.evaluation.memorization import (ExtractionConfig, ExtractionResult, InferenceResult,
                                           Score, continuation_rows, exposure, extract, extraction_metrics,
                                           greedy_metrics,
                                           inference_attack, padded_rows, wilson_interval)


def scored_only(tokenizer, decoder, trunk, adapters, batch_size: int = 64, max_context_tokens: int = 128) -> Score:
    """memorization.text_score's Score (the same rows, the same scored tokens, the same sums) with
    the head and the softmax run only at the scored positions: ids [B,T] -> trunk -> decoder blocks
    [B,T,C] -> the positions predicting a scored token [S,C] -> norm, head [S,V] -> NLL summed per row."""

    @torch.no_grad()
    def score(context: str, continuations: Sequence[str]) -> torch.Tensor:
        rows, starts = continuation_rows(tokenizer, context, continuations, max_context_tokens)
        out = torch.zeros(len(rows))
        for i in range(0, len(rows), batch_size):
            chunk = rows[i : i + batch_size]
            ids, scored = padded_rows(chunk, starts[i : i + batch_size])
            width = ids.shape[1]
            pos = torch.arange(width).expand(len(chunk), -1)
            x = decoder.stack(trunk(ids), pos, adapters=adapters)  # [B,T,C]
            take = scored[:, 1:]  # position t predicts token t + 1
            logits = decoder.lm_head(decoder.norm(x[:, :-1][take])).float()  # [S,V]
            nll = F.cross_entropy(logits, ids[:, 1:][take], reduction="none")  # [S]
            row = torch.arange(len(chunk)).unsqueeze(1).expand(-1, width - 1)[take]  # [S]
            out[i : i + len(chunk)] = torch.zeros(len(chunk)).index_add_(0, row, nll)
        return out

    return score


def candidate_sets(planted: PlantedCorpus, c: int, seed: int) -> list[CandidateSet]:
    """The candidate sets of c values the inference attack ranks (seed `seed + 1`)."""
    return planted.candidate_sets(c, seed=seed + 1)


def inference(score: Score, planted: PlantedCorpus, seed: int, cs=(50, 100, 500)) -> dict:
    """{c: InferenceResult} and "by_repeats": {repeats: InferenceResult at c = 50}."""
    out = {c: inference_attack(score, candidate_sets(planted, c, seed)) for c in cs}
    sets = candidate_sets(planted, 50, seed)
    out["by_repeats"] = {rep: inference_attack(score, [s for s in sets if s.canary.repeats == rep])
                         for rep in planted.config.repeats if any(s.canary.repeats == rep for s in sets)}
    return out


def mean_exposure(score: Score, planted: PlantedCorpus, sample: int, seed: int) -> tuple[dict[int, float], float]:
    """({repeats: mean exposure of the canaries planted that often}, the maximum possible exposure)."""
    exps = [exposure(score, c, planted.sample_same_format(c, sample, seed=seed + 2)) for c in planted.canaries]
    reps = planted.config.repeats if planted.config.repeats else CanaryConfig().repeats
    return ({rep: statistics.mean(e.exposure for e in exps if e.repeats == rep) for rep in reps
             if any(e.repeats == rep for e in exps)}, exps[0].max_exposure)


async def completions(model, middle_blocks, planted: PlantedCorpus, adapters, samples: int,
                      seed: int) -> list[str]:
    """Completions sampled (T = 1) from every canary's prefix under `adapters`, all in one list."""
    runner = MonolithicRunner(model.encoder, middle_blocks, model.decoder)
    out = await extract(model, runner, [c.prefix for c in planted.canaries],
                        ExtractionConfig(samples=samples, seed=seed), adapters=adapters)
    return [t for ts in out for t in ts]


def scan(texts: Sequence[str], canaries: Sequence[Canary], org: str) -> ExtractionResult:
    """Extraction precision / recall of `canaries` in `texts`: every value of their formats found
    (`org`: the organization in host and e-mail formats)."""
    patterns = [format_pattern(f, org) for f in sorted({c.fmt for c in canaries})]
    return extraction_metrics(texts, canaries, patterns)


async def extraction(model, middle_blocks, planted: PlantedCorpus, adapters, samples: int, seed: int,
                     org: str | None = None) -> ExtractionResult:
    """Completions sampled (T = 1) from every canary's prefix under `adapters`, scanned for values of
    the canaries' formats (`org`: the organization in host and e-mail formats)."""
    texts = await completions(model, middle_blocks, planted, adapters, samples, seed)
    return scan(texts, planted.canaries, org or planted.config.org)


async def greedy_completions(model, middle_blocks, canaries: Sequence[Canary], adapters,
                             max_tokens: int = 48) -> list[str]:
    """The greedy completion of every canary's prefix under `adapters`, from where the prefix ends
    (measured against the values by memorization.greedy_metrics)."""
    runner = MonolithicRunner(model.encoder, middle_blocks, model.decoder)
    out = await extract(model, runner, [c.prefix for c in canaries],
                        ExtractionConfig(samples=1, temperature=0.0, max_tokens=max_tokens, after_prompt=True),
                        adapters=adapters)
    return [ts[0] for ts in out]


def greedy_by(texts: Sequence[str], canaries: Sequence[Canary], groups: dict[str, set[str]]) -> dict:
    """{"all": ..., group: ...} of greedy_metrics as dicts, the canaries split by value into `groups`."""
    out = {"all": asdict(greedy_metrics(texts, canaries))}
    for name, values in groups.items():
        pairs = [(t, c) for t, c in zip(texts, canaries) if c.value in values]
        if pairs:
            out[name] = asdict(greedy_metrics([t for t, _ in pairs], [c for _, c in pairs]))
    return out


def split_inference(result: InferenceResult, sets: Sequence[CandidateSet], groups: dict[str, set[str]]) -> dict:
    """{group: {"correct", "trials"}} of one inference attack over `sets` (in the attack's order),
    the canaries split by value into `groups`."""
    if len(result.ranks) != len(sets):
        raise ValueError(f"{len(result.ranks)} ranks for {len(sets)} candidate sets")
    out = {}
    for name, values in groups.items():
        ranks = [r for r, s in zip(result.ranks, sets) if s.canary.value in values]
        out[name] = {"correct": sum(r == 1 for r in ranks), "trials": len(ranks)}
    return out


def pooled(results: list[InferenceResult]) -> tuple[int, int, float, float, float]:
    """(correct, trials, accuracy, Wilson low, high) of several organizations' attacks together."""
    correct, trials = sum(r.correct for r in results), sum(r.trials for r in results)
    low, high = wilson_interval(correct, trials)
    return correct, trials, correct / trials if trials else 0.0, low, high
