"""Client-only completion (umbra/engine/client_only.py) on the default model: the completion is
the split model's with the middle skipped — the same as a split engine over the real identity
middle (umbra/middle/skip.py), which is what the draft model of speculation runs — with no round
trip, no speculation even when asked for, and prefix reuse across keystrokes."""

from __future__ import annotations

from pathlib import Path

import pytest

from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig
from umbra.engine.client_only import MODE, client_only_engine
from umbra.engine.config import SpeculationConfig
from umbra.middle.local import LocalMiddle
from umbra.middle.skip import SkipMiddle

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "models" / "umbra-code-tiny"
SOURCE = (ROOT / "umbra" / "engine" / "stops.py").read_text()


@pytest.fixture(scope="module")
def model() -> ClientModel:
    return ClientModel.load(DEFAULT_MODEL)


def _cursors(n: int) -> list[tuple[str, str]]:
    step = (len(SOURCE) - 400) // n
    return [(SOURCE[max(0, at - 1200) : at], SOURCE[at : at + 200]) for at in range(300, 300 + n * step, step)]


async def test_client_only_is_the_model_with_the_middle_skipped(model):
    engine = client_only_engine(model)
    skipped = CompletionEngine.split(model, SkipMiddle(model.spec.hidden_size))
    split = CompletionEngine.split(model, LocalMiddle(model.load_middle()))
    cfg = EngineConfig(stop=StopConfig(max_tokens=12, multiline=True))
    differs = 0
    for prefix, suffix in _cursors(6):
        alone = await engine.complete(prefix, suffix, cfg)
        via_identity = await skipped.complete(prefix, suffix, cfg)
        assert (alone.text, alone.tokens, alone.stop_reason) == (via_identity.text, via_identity.tokens,
                                                                 via_identity.stop_reason)
        assert alone.round_trips == 0 and alone.speculation is None
        differs += alone.tokens != (await split.complete(prefix, suffix, cfg)).tokens
    assert engine.mode == MODE == "client-only"
    assert differs > 0  # the middle really is skipped: the split model completes otherwise


async def test_client_only_never_speculates_and_reuses_its_prefix(model):
    engine = client_only_engine(model)
    on = EngineConfig(stop=StopConfig(max_tokens=8), speculation=SpeculationConfig(mode="on"))
    prefix, suffix = _cursors(1)[0]
    async with engine.session(on) as session:
        first = await session.complete(prefix, suffix)
        typed = await session.complete(prefix + first.text[:1], suffix)
    assert first.speculation is None and typed.speculation is None
    assert first.round_trips == typed.round_trips == 0
    assert typed.reused_tokens > 0 and typed.recomputed_tokens < first.recomputed_tokens
