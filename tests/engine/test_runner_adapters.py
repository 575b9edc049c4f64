"""Runners with adapters: a session's caches follow its adapter set. A decoder-side change is
rebuilt locally from the kept middle outputs and sends nothing; an encoder-side change or a new
soft prompt starts every part over; a soft prompt fills the first positions, is sent once per
session, survives truncation and shrinks the prompt budget. Whatever the history, a warm
session gives what a fresh session with the same set gives."""

from __future__ import annotations

import pytest
import torch

from adapter_helpers import perturb
from umbra.engine import EngineConfig, PromptConfig, StopConfig
from umbra.engine.runner import MonolithicRunner, SplitRunner
from umbra.engine.session import CompletionSession
from umbra.engine.sampling import allowed_mask
from umbra.middle.local import LocalMiddle
from umbra.model.adapters import (AdapterSet, BottleneckConfig, DeepPromptConfig, LoraConfig, Placement,
                                  SoftPromptConfig, build_adapter)

TOL = 1e-5
IDS = torch.randint(5, 500, (30,), generator=torch.Generator().manual_seed(7)).tolist()


class CountingMiddle(LocalMiddle):
    """The real in-process middle, counting the positions it is sent."""

    def __init__(self, blocks):
        super().__init__(blocks)
        self.sent = 0

    async def forward(self, hidden, positions, session, key_padding=None):
        self.sent += hidden.shape[1]
        return await super().forward(hidden, positions, session, key_padding)


@pytest.fixture(scope="module")
def adapters(client_model):
    spec, shape = client_model.spec, client_model.plan.shape(client_model.spec.num_layers)
    make = lambda name, config, seed: perturb(build_adapter(name, config, spec, shape), seed=seed)  # noqa: E731
    return {
        "python": make("python", LoraConfig(rank=4), 1),
        "go": make("go", BottleneckConfig(size=8), 2),
        "deep": make("deep", DeepPromptConfig(length=3), 3),
        "access": make("access", LoraConfig(rank=2, targets=("q_proj", "o_proj")), 4),
        "enc": make("enc", LoraConfig(rank=2, placement=Placement.ENCODER), 5),
        "shared": make("shared", SoftPromptConfig(length=5), 6),
    }


def sets(adapters, *names):
    return AdapterSet([adapters[n] for n in names])


async def fresh_logits(client_model, aset, ids):
    runner = MonolithicRunner(client_model.encoder, client_model.load_middle(), client_model.decoder)
    await runner.use(aset)
    return await runner.run(ids)


async def test_decoder_side_changes_are_rebuilt_locally_and_send_nothing(client_model, adapters):
    middle = CountingMiddle(client_model.load_middle())
    runner = SplitRunner(client_model.encoder, client_model.decoder, middle)
    await runner.use(sets(adapters, "python"))
    await runner.run(IDS[:20])
    for names in [("go",), ("go", "access"), ("deep", "python"), ()]:
        before = middle.sent
        await runner.use(sets(adapters, *names))
        assert middle.sent == before and runner.length == 20  # nothing re-sent, nothing forgotten
        got = await runner.run(IDS[20:22])
        assert middle.sent == before + 2
        want = await fresh_logits(client_model, sets(adapters, *names), IDS[:22])
        assert (got - want).abs().max().item() <= TOL, names
        await runner.truncate(20)
    await runner.close()


async def test_encoder_side_or_soft_prompt_changes_start_over(client_model, adapters):
    middle = CountingMiddle(client_model.load_middle())
    runner = SplitRunner(client_model.encoder, client_model.decoder, middle)
    await runner.use(sets(adapters, "python"))
    await runner.run(IDS[:20])
    await runner.use(sets(adapters, "python", "enc"))
    assert runner.length == 0  # what the encoder sends changed: the caches are void
    got = await runner.run(IDS[:20])
    assert (got - await fresh_logits(client_model, sets(adapters, "python", "enc"), IDS[:20])).abs().max() <= TOL
    await runner.use(sets(adapters, "python", "enc", "shared"))
    assert runner.length == 0
    await runner.close()


async def test_soft_prompt_is_sent_once_and_survives_truncation(client_model, adapters):
    middle = CountingMiddle(client_model.load_middle())
    runner = SplitRunner(client_model.encoder, client_model.decoder, middle)
    shared = sets(adapters, "shared", "python")
    await runner.use(shared)
    first = await runner.run(IDS[:10])
    assert middle.sent == 5 + 10 and runner.prompt_length == 5 and runner.length == 10
    mono = MonolithicRunner(client_model.encoder, client_model.load_middle(), client_model.decoder)
    await mono.use(shared)
    assert (first - await mono.run(IDS[:10])).abs().max() <= TOL
    await runner.truncate(0)  # every token gone, the prompt stays
    assert runner.length == 0 and runner.prompt_length == 5
    again = await runner.run(IDS[:10])
    assert middle.sent == 5 + 20 and (again - first).abs().max() <= TOL
    await runner.use(sets(adapters, "shared", "go"))  # decoder-side change: the prompt is not re-sent
    await runner.run(IDS[10:11])
    assert middle.sent == 5 + 21
    await runner.reset()  # e.g. the cloud evicted the session: the prompt goes again, once
    await runner.run(IDS[:3])
    assert middle.sent == 5 + 21 + 5 + 3
    await runner.close()


async def test_session_prompt_budget_leaves_room_for_the_soft_prompt(client_model, adapters):
    context = 5 + 4 + 8 + 16  # soft prompt + FIM control tokens + completion + 16 prompt tokens
    cfg = EngineConfig(prompt=PromptConfig(budget=1000), stop=StopConfig(max_tokens=8, multiline=True))
    runner = SplitRunner(client_model.encoder, client_model.decoder, LocalMiddle(client_model.load_middle()))
    allowed = allowed_mask(client_model.spec.vocab_size, client_model.tokenizer, client_model.fim)
    session = CompletionSession(runner, client_model.tokenizer, client_model.fim, allowed, cfg, context)
    text = "def f(x):\n    return x\n" * 40
    result = await session.complete(text, "", adapters=sets(adapters, "shared", "python"))
    assert result.adapters == ("python", "shared")
    assert 5 + result.prompt_tokens + result.generated_tokens <= context
    await session.close()
    runner = SplitRunner(client_model.encoder, client_model.decoder, LocalMiddle(client_model.load_middle()))
    session = CompletionSession(runner, client_model.tokenizer, client_model.fim, allowed, cfg, context)
    plain = await session.complete(text, "")
    assert plain.prompt_tokens > result.prompt_tokens  # without the prompt the budget is 5 larger
    await session.close()


async def test_a_lost_cloud_session_found_while_switching_sets_serves_the_new_set(client_model, adapters):
    """The cloud dropped the session, and the request that finds out switches the encoder-side
    set (so `use` itself touches the middle first): the re-prefilled request runs the new set."""
    cfg = EngineConfig(stop=StopConfig(max_tokens=6, multiline=True))
    allowed = allowed_mask(client_model.spec.vocab_size, client_model.tokenizer, client_model.fim)
    prefix, suffix = "def f(x):\n    y = x * 2\n    return ", "\n"

    def session():
        middle = LocalMiddle(client_model.load_middle())
        runner = SplitRunner(client_model.encoder, client_model.decoder, middle)
        return middle, CompletionSession(runner, client_model.tokenizer, client_model.fim, allowed, cfg, 512)

    middle, warm = session()
    await warm.complete(prefix, suffix, adapters=sets(adapters, "python"))
    middle.runtime.sessions.pop(warm.runner.session)  # the cloud dropped our cache
    switched = await warm.complete(prefix, suffix, adapters=sets(adapters, "python", "enc", "shared"))
    assert switched.evicted and switched.adapters == ("enc", "python", "shared")
    _, fresh = session()
    want = await fresh.complete(prefix, suffix, adapters=sets(adapters, "python", "enc", "shared"))
    assert switched.tokens == want.tokens and switched.prompt_tokens == want.prompt_tokens
    await warm.close()
    await fresh.close()
