"""The memorization attacks measure what they claim: the score is the exact NLL of a continuation
(batched and padded or not), a route over the shared trunk is the whole model with that route's
adapters, the inference attack and exposure rank the true value among its candidates, extraction
decodes as the engine does and counts what it finds, perplexity is the exact next-token loss."""

from __future__ import annotations

import math
import random

import pytest
import torch

from adapter_helpers import perturb
from tiny_models import CODE_SNIPPETS, build_tiny_model_dir
from umbra.data.corpus import Document
from umbra.engine import ClientModel
from umbra.engine.runner import MonolithicRunner
from umbra.engine.sampling import allowed_mask
from umbra.errors import ConfigError
from umbra.evaluation.canaries import CanaryConfig, plant_canaries
from umbra.evaluation.canary_formats import format_pattern
from umbra.evaluation.memorization import (ExtractionConfig, Trunk, exposure, extract, extraction_metrics,
                                           greedy_metrics,
                                           inference_attack, perplexity, route_logits, text_score, token_losses,
                                           wilson_interval)
from umbra.model.adapters import AdapterSet, LoraConfig, Placement, build_adapter


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("memorization-model")
    build_tiny_model_dir(d, family="qwen2-tied", style="starcoder")
    return ClientModel.load(d)


@pytest.fixture(scope="module")
def middle_blocks(model):
    return model.load_middle()


@pytest.fixture(scope="module")
def adapter(model):
    shape = model.plan.shape(model.spec.num_layers)
    return perturb(build_adapter("revealing", LoraConfig(rank=4, init_seed=1), model.spec, shape), seed=1)


@pytest.fixture(scope="module")
def planted():
    rng = random.Random(0)
    docs = [Document("python", f"f{i}.py", "".join(rng.sample(CODE_SNIPPETS, 2))) for i in range(16)]
    return plant_canaries(docs, CanaryConfig(repeats=(1, 4), per_group=1, seed=0))


def full_logits(model, middle_blocks, ids, adapters=None):
    pos = torch.arange(ids.shape[1])[None]
    with torch.no_grad():
        return model.decoder(middle_blocks(model.encoder(ids, pos), pos), pos, adapters=adapters)


def test_wilson_intervals_match_the_textbook_values():
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_a_route_over_the_shared_trunk_is_the_whole_model_with_its_adapters(model, middle_blocks, adapter):
    calls = []

    def counted_middle(x, pos):
        calls.append(1)
        return middle_blocks(x, pos)

    trunk = Trunk(model.encoder, counted_middle)
    ids = torch.randint(0, 400, (3, 20), generator=torch.Generator().manual_seed(1))
    aset = AdapterSet([adapter])
    torch.testing.assert_close(route_logits(model.decoder, trunk, aset)(ids),
                               full_logits(model, middle_blocks, ids, aset), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(route_logits(model.decoder, trunk)(ids), full_logits(model, middle_blocks, ids))
    assert len(calls) == 1  # the second route reused the trunk's states
    enc = build_adapter("enc", LoraConfig(placement=Placement.ENCODER), model.spec,
                        model.plan.shape(model.spec.num_layers))
    with pytest.raises(ConfigError, match="decoder-side"):
        route_logits(model.decoder, trunk, AdapterSet([enc]))


def test_the_score_is_the_exact_nll_of_each_continuation_batched_or_not(model, middle_blocks, adapter):
    tok, aset = model.tokenizer, AdapterSet([adapter])
    logits_fn = route_logits(model.decoder, Trunk(model.encoder, middle_blocks), aset)
    context, conts = 'def f(x):\n    KEY = "', ['abc"\n', 'sk_live_Zx81"\n', '"\n', "a much longer value here\"\n"]
    batched = text_score(tok, logits_fn, batch_size=8)(context, conts)
    single = text_score(tok, logits_fn, batch_size=1)(context, conts)
    torch.testing.assert_close(batched, single, rtol=1e-5, atol=1e-4)  # right padding changes nothing
    for cont, got in zip(conts, batched):
        ids, offsets = tok.encode_with_offsets(context + cont)
        start = next(i for i, (_, end) in enumerate(offsets) if end > len(context))
        logp = torch.log_softmax(full_logits(model, middle_blocks, torch.tensor([ids]), aset)[0].float(), -1)
        want = -sum(float(logp[i - 1, ids[i]]) for i in range(start, len(ids)))
        assert float(got) == pytest.approx(want, rel=1e-4)
    short = text_score(tok, logits_fn, max_context_tokens=2)(context, conts)
    assert not torch.allclose(short, batched)  # the context is cut to its last 2 tokens


def synthetic_score(order: dict[tuple[str, str], float]):
    """A Score that gives each continuation the NLL `order` names for (context, value before the suffix)."""
    def score(context, continuations):
        return torch.tensor([order[context, c.split('"')[0].strip()] for c in continuations])
    return score


def test_the_inference_attack_ranks_the_true_value_among_its_candidates(planted):
    sets = planted.candidate_sets(50, seed=2)
    best = {(s.prefix, v): (0.0 if v == s.canary.value else 1.0 + i) for s in sets for i, v in enumerate(s.candidates)}
    r = inference_attack(synthetic_score(best), sets)
    assert (r.correct, r.accuracy, r.chance, set(r.ranks)) == (len(sets), 1.0, 0.02, {1})
    third = {}
    for s in sets:  # the true value behind exactly two decoys in every set
        others = [v for v in s.candidates if v != s.canary.value]
        third.update({(s.prefix, v): 10.0 + i for i, v in enumerate(others)})
        third.update({(s.prefix, others[0]): 0.0, (s.prefix, others[1]): 1.0, (s.prefix, s.canary.value): 2.0})
    r = inference_attack(synthetic_score(third), sets)
    assert r.correct == 0 and set(r.ranks) == {3} and r.low == 0.0 and r.high > 0
    with pytest.raises(ConfigError, match="same size"):
        inference_attack(synthetic_score(best), sets + planted.candidate_sets(100))


def test_exposure_is_log2_of_the_sample_over_the_rank(planted):
    canary = planted.canaries[0]
    sample = planted.sample_same_format(canary, 255)
    nll = {(canary.prefix, v): 1.0 + i for i, v in enumerate(sample)}
    top = exposure(synthetic_score({**nll, (canary.prefix, canary.value): 0.0}), canary, sample)
    assert top.rank == 1 and top.exposure == pytest.approx(8.0) == pytest.approx(top.max_exposure)
    mid = exposure(synthetic_score({**nll, (canary.prefix, canary.value): 64.5}), canary, sample)  # 64 values below it
    assert mid.rank == 65 and mid.exposure == pytest.approx(8 - math.log2(65))
    tied = exposure(synthetic_score({**nll, (canary.prefix, canary.value): 2.0}), canary, sample)  # one below, one tie
    assert tied.rank == 2.5
    with pytest.raises(ConfigError):
        exposure(synthetic_score(nll), canary, sample + [canary.value])


def test_extraction_counts_distinct_values_of_the_formats_against_the_canaries(planted):
    patterns = [format_pattern(f) for f in ("host", "email", "stripe", "aws", "github")]
    host = next(c for c in planted.canaries if c.kind == "host")
    email = next(c for c in planted.canaries if c.kind == "email")
    completions = [f'"{host.value}"', f"{host.value} again", "jane.doe@acme.example", "nothing here",
                   "ci-03.corp.other.internal"]  # another org's host is not of the format
    r = extraction_metrics(completions, [host, email], patterns)
    assert (r.generated, r.true_found, r.canaries, r.precision, r.recall) == (2, 1, 2, 0.5, 0.5)
    assert extraction_metrics(["x"], [host], patterns).precision == 0.0


def test_greedy_extraction_counts_the_value_reproduced_from_its_start(planted):
    a, b, c = planted.canaries[:3]
    texts = [a.value + '"', b.value[: (len(b.value) + 1) // 2] + "xyz", "~" + c.value]
    r = greedy_metrics(texts, [a, b, c])
    assert (r.canaries, r.exact, r.half) == (3, 1, 2)  # c: its value, one character late, counts nothing
    assert r.chars == pytest.approx((1 + ((len(b.value) + 1) // 2) / len(b.value) + 0) / 3)
    with pytest.raises(ConfigError):
        greedy_metrics(texts[:2], [a, b, c])


async def test_extraction_decodes_as_greedy_search_on_the_whole_model(model, middle_blocks, adapter):
    prompts = ['KEY = "', "# contact: "]
    runner = MonolithicRunner(model.encoder, middle_blocks, model.decoder)
    greedy = ExtractionConfig(samples=2, max_tokens=12, temperature=0.0)
    got = await extract(model, runner, prompts, greedy, AdapterSet([adapter]))
    tok, vocab = model.tokenizer, model.spec.vocab_size
    allowed = allowed_mask(vocab, tok, model.fim)
    for prompt, samples in zip(prompts, got):
        ids = tok.encode(prompt)
        heal = tok.decode(ids[-1:])
        ids, out = ids[:-1], []
        for step in range(12):  # no cache: the whole sequence each step
            logits = full_logits(model, middle_blocks, torch.tensor([ids + out]), AdapterSet([adapter]))[0, -1]
            mask = allowed & tok.ids_starting_with(heal, vocab) if step == 0 else allowed
            nxt = int(torch.argmax(logits.masked_fill(~mask, float("-inf"))))
            if nxt in tok.eos_ids:
                break
            out.append(nxt)
            if "\n" in tok.decode(out[1:]):
                break
        assert samples == [tok.decode(out).split("\n", 1)[0]] * 2
        assert samples[0].startswith(heal)
    after = await extract(model, runner, prompts, ExtractionConfig(samples=1, max_tokens=12, temperature=0.0,
                                                                   after_prompt=True), AdapterSet([adapter]))
    for prompt, samples, cut in zip(prompts, got, after):  # the same completion, from where the prompt ends
        heal = tok.decode(tok.encode(prompt)[-1:])
        assert cut == [samples[0][len(heal):]]
    sampled = ExtractionConfig(samples=4, max_tokens=8, temperature=1.0, seed=3)
    first = await extract(model, runner, prompts, sampled)
    assert first == await extract(model, runner, prompts, sampled)  # seeded
    assert len(set(first[0])) > 1 and all("\n" not in s for s in first[0])


def test_perplexity_is_the_exact_next_token_loss(model, middle_blocks, adapter):
    tok = model.tokenizer
    logits_fn = route_logits(model.decoder, Trunk(model.encoder, middle_blocks), AdapterSet([adapter]))
    texts = CODE_SNIPPETS[:3]
    m = perplexity(logits_fn, tok, texts, block_len=16, batch_size=3)
    rows = [ids[i : i + 16] for ids in map(tok.encode, texts) for i in range(0, len(ids), 16)]
    nll, count = 0.0, 0
    for row in rows:
        ids = torch.tensor([row])
        total, _ = token_losses(logits_fn, ids, torch.ones_like(ids, dtype=torch.bool))
        nll, count = nll + float(total), count + len(row) - 1
    assert m.tokens == count and m.loss == pytest.approx(nll / count, rel=1e-5)
    assert m.perplexity == pytest.approx(math.exp(nll / count), rel=1e-5) and 0 <= m.top1 <= 1
