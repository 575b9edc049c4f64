"""Speculative sampling (temperature > 0; umbra/engine/decoding.py `Continuation.verify`) keeps
the distribution: on the default model through the real middle blocks, the first two tokens of
many seeded speculative completions follow the exact distributions computed from the model's
own logits (chi-square goodness of fit: the first token, and the second given the likeliest
first), while drafts are both accepted and rejected; and with a seed a speculative completion
samples the very tokens of step-by-step decoding (the same draws, one per position)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from scipy.stats import chisquare

from umbra.engine import ClientModel, CompletionEngine, EngineConfig, PromptConfig, SamplingConfig, StopConfig
from umbra.engine.config import SpeculationConfig
from umbra.engine.fim import build_prompt
from umbra.engine.runner import MonolithicRunner
from umbra.engine.sampling import Sampler
from umbra.middle.local import LocalMiddle

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "models" / "umbra-code-tiny"
PREFIX = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef add(a, b):\n    return"
SAMPLES = 1500
STOP = -1  # bin of a first token that ends the completion (a stop id)


@pytest.fixture(scope="module")
def model() -> ClientModel:
    return ClientModel.load(DEFAULT_MODEL)


def _config(seed: int) -> EngineConfig:
    return EngineConfig(prompt=PromptConfig(token_healing=False), sampling=SamplingConfig(temperature=1.0, seed=seed),
                        stop=StopConfig(max_tokens=2, multiline=True, stop_at_block_end=False),
                        speculation=SpeculationConfig(mode="on", k=4))


async def _expected(model: ClientModel, engine: CompletionEngine) -> tuple[torch.Tensor, int, torch.Tensor]:
    """p(first token), the likeliest first token a, p(second token | a): from the model's logits."""
    cfg = _config(0)
    prompt = build_prompt(model.tokenizer, model.fim, PREFIX, "", cfg.prompt, None)
    sampler = Sampler(cfg.sampling, engine.allowed)
    runner = MonolithicRunner(model.encoder, model.load_middle(), model.decoder)
    p1 = sampler.probs(await runner.run(prompt.ids))
    a = int(torch.argmax(p1))
    p2 = sampler.probs(await runner.run([a]))
    return p1, a, p2


def _gof(counts: dict[int, int], p: torch.Tensor, stop_ids) -> float:
    """Chi-square p-value of `counts` (id -> count; STOP for stop ids) against p, bins with an
    expected count under 5 pooled."""
    n = sum(counts.values())
    expected = {int(i): float(p[i]) * n for i in torch.nonzero(p > 0).flatten()}
    stop_mass = sum(expected.pop(s, 0.0) for s in stop_ids)
    if stop_mass:
        expected[STOP] = stop_mass
    big = {i for i, e in expected.items() if e >= 5}
    obs = [counts.get(i, 0) for i in sorted(big)] + [n - sum(counts.get(i, 0) for i in big)]
    exp = [expected[i] for i in sorted(big)] + [n - sum(expected[i] for i in big)]
    assert len(big) >= 3, "the test needs a distribution spread over several tokens"
    return float(chisquare(obs, exp).pvalue)


async def _draw(engine: CompletionEngine, a: int):
    firsts: dict[int, int] = {}
    seconds: dict[int, int] = {}
    drafted = accepted = 0
    async with engine.session() as session:
        for seed in range(SAMPLES):
            result = await session.complete(PREFIX, "", _config(seed))
            first = result.tokens[0] if result.tokens else STOP
            firsts[first] = firsts.get(first, 0) + 1
            if first == a:
                second = result.tokens[1] if len(result.tokens) > 1 else STOP
                seconds[second] = seconds.get(second, 0) + 1
            c = result.speculation
            drafted += c.lookup_drafted + c.model_drafted
            accepted += c.lookup_accepted + c.model_accepted
    return firsts, seconds, drafted, accepted


async def test_speculative_sampling_keeps_the_distribution(model):
    engine = CompletionEngine.split(model, LocalMiddle(model.load_middle()))
    p1, a, p2 = await _expected(model, engine)
    firsts, seconds, drafted, accepted = await _draw(engine, a)
    assert 0 < accepted < drafted  # drafts were accepted and rejected: both branches of the rule ran
    assert sum(seconds.values()) > 200
    assert _gof(firsts, p1, model.fim.stop_ids) > 1e-3
    assert _gof(seconds, p2, model.fim.stop_ids) > 1e-3


async def test_a_seeded_sampled_completion_is_the_same_speculative_or_not(model):
    engine = CompletionEngine.split(model, LocalMiddle(model.load_middle()))
    differ = 0
    for seed in range(12):
        spec = EngineConfig(sampling=SamplingConfig(temperature=0.8, seed=seed),
                            stop=StopConfig(max_tokens=16, multiline=True), speculation=SpeculationConfig(mode="on"))
        plain = await engine.complete(PREFIX, "", replace(spec, speculation=SpeculationConfig(mode="off")))
        fast = await engine.complete(PREFIX, "", spec)
        assert fast.speculation is not None and plain.speculation is None
        assert (fast.text, fast.tokens) == (plain.text, plain.tokens), seed
        differ += plain.tokens != (await engine.complete(PREFIX, "", replace(spec, sampling=SamplingConfig(
            temperature=0.8, seed=seed + 100)))).tokens
    assert differ > 0  # the seed matters: these are samples, not the greedy completion
