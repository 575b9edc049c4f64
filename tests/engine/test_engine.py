"""CompletionEngine: the split engine (encoder -> LocalMiddle -> decoder) and the monolithic
lean loop produce identical greedy tokens; engine construction checks."""

from __future__ import annotations

import pytest

from tiny_models import CODE_SNIPPETS
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, PromptConfig, StopConfig
from umbra.errors import ConfigError
from umbra.middle.local import LocalMiddle
from umbra.model.parts import MiddleBlocks, SplitPlan

FILE = "".join(CODE_SNIPPETS)
CURSORS = [FILE.index("return a + b") + 7, FILE.index("self.y = y") + 5, FILE.index("os.path.exists")]
CFG = EngineConfig(prompt=PromptConfig(budget=200), stop=StopConfig(max_tokens=12, multiline=True,
                                                                      stop_at_block_end=False))


@pytest.mark.parametrize("plan", [None, SplitPlan(2, 1)], ids=["default-plan", "E2-D1"])
async def test_split_and_monolithic_give_identical_greedy_tokens(tiny_dir, plan):
    model = ClientModel.load(tiny_dir, plan)
    split = CompletionEngine.split(model, LocalMiddle(model.load_middle()), CFG)
    mono = CompletionEngine.monolithic(model, CFG)
    async with split.session() as s, mono.session() as m:
        for cursor in CURSORS:  # one session each: prefix reuse on both sides too
            a = await s.complete(FILE[:cursor], FILE[cursor:])
            b = await m.complete(FILE[:cursor], FILE[cursor:])
            assert a.tokens == b.tokens and len(a.tokens) == 12
            assert a.text == b.text
            assert (a.prompt_tokens, a.recomputed_tokens) == (b.prompt_tokens, b.recomputed_tokens)


async def test_one_shot_complete_closes_its_middle_session(client_model, local_middle):
    engine = CompletionEngine.split(client_model, local_middle, CFG)
    result = await engine.complete("def add(a, b):\n    return ", "\n")
    assert result.template == "starcoder" and result.prompt_tokens > 5
    assert not local_middle.runtime.sessions


def test_middle_of_another_width_is_refused(client_model):
    import dataclasses

    other = dataclasses.replace(client_model.spec, hidden_size=32, num_heads=2, num_kv_heads=2, head_dim=16)
    middle = LocalMiddle(MiddleBlocks(other, client_model.plan))
    with pytest.raises(ConfigError, match="hidden size"):
        CompletionEngine.split(client_model, middle)


def test_invalid_engine_config_is_refused(client_model):
    with pytest.raises(ConfigError):
        CompletionEngine.monolithic(client_model, EngineConfig(prefill_chunk=0))
