"""The drafting policy of speculative decoding (umbra/engine/speculative.py): each draft comes from
the source expected to yield more accepted tokens, by what the engine's drafts yielded so far
(DraftStats), on the real tiny model's draft model (its client blocks, the middle skipped)."""

from __future__ import annotations

from pathlib import Path

import pytest

from umbra.engine import ClientModel, CompletionEngine, EngineConfig
from umbra.engine.config import SpeculationConfig
from umbra.engine.speculative import Drafts, DraftStats, LinkClock, Speculator, prompt_lookup
from umbra.middle.local import LocalMiddle
from umbra.model.adapters.selection import EMPTY

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def engine() -> CompletionEngine:
    model = ClientModel.load(ROOT / "models" / "umbra-code-tiny")
    return CompletionEngine.split(model, LocalMiddle(model.load_middle()))


async def _nothing() -> None:
    pass


def _ids(engine: CompletionEngine, text: str) -> list[int]:
    return engine.model.tokenizer.encode(text)


async def test_the_source_expected_to_yield_more_drafts_first(engine):
    """The same ids, with a lookup match at their end: a measured good drafter model takes the
    frame, measured long lookup runs take it back; what a lookup found first heads the frame."""
    seq = _ids(engine, "def read(path):\n    return open(path).read()\n\ndef read(path):\n    return")
    cfg = SpeculationConfig(k=8)
    more, n = prompt_lookup(seq, 8, cfg.ngram, cfg.min_ngram)
    assert more and n >= 2  # the repeated lines match

    good_model = DraftStats(model_acceptance=0.9)
    good_model.run[n] = 0.2
    drafts = await Speculator(engine.new_session().speculator.draft, LinkClock(), good_model)._drafts(
        cfg, 8, seq, EMPTY, _nothing)
    assert drafts.sources[0] == "model" and len(drafts.ids) == 8

    long_runs = DraftStats(model_acceptance=0.1)
    long_runs.run[n] = 6.0
    drafts = await Speculator(engine.new_session().speculator.draft, LinkClock(), long_runs)._drafts(
        cfg, 8, seq, EMPTY, _nothing)
    assert drafts.sources[: len(more)] == ["lookup"] * len(more) and drafts.ids[: len(more)] == more
    assert drafts.runs[0] == (0, len(more), n)


def test_a_run_is_learned_only_where_its_start_was_verified():
    stats = DraftStats(model_acceptance=0.5, run_prior=1.0)
    drafts = Drafts(ids=[1, 2, 3, 4, 5, 6], sources=["model", "lookup", "lookup", "lookup", "lookup", "lookup"],
                    runs=[(1, 3, 3), (4, 2, 2)])
    stats.learn(drafts, verified=4, accepted=3)  # the model's id and two of the first run's right
    assert stats.model_acceptance == pytest.approx(0.6)  # 0.8 * 0.5 + 0.2 * 1
    assert stats.run[3] == pytest.approx(0.8 * 1.0 + 0.2 * 2)
    assert 2 not in stats.run  # the second run was never reached
    stats.learn(Drafts([7], ["model"], []), verified=1, accepted=0)
    assert stats.model_acceptance == pytest.approx(0.48)
    assert stats.lookup_expected(3, 1) == 1.0 and stats.lookup_expected(2, 5) == 1.0  # capped by the run, the prior
    assert stats.model_expected(3) == pytest.approx(0.48 + 0.48**2 + 0.48**3)


async def test_an_engines_sessions_learn_together(engine):
    """A session starts from what the engine's earlier sessions measured, not from the prior."""
    cfg = EngineConfig(speculation=SpeculationConfig(mode="on"))
    text = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return"
    before = (engine.drafting.model_acceptance, dict(engine.drafting.run))
    async with engine.session(cfg) as s:
        result = await s.complete(text, "\n")
    assert result.speculation is not None and result.speculation.frames >= 1
    assert (engine.drafting.model_acceptance, engine.drafting.run) != before
    assert engine.new_session().speculator.stats is engine.drafting
