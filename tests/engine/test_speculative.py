"""Speculative split decoding (umbra/engine/speculative.py) on the default model through the real
middle blocks: the completion of every request equals step-by-step decoding's — over many cursors
in this repository's Python and TypeScript, with each draft source alone and both, FIM suffixes,
stop strings, max_tokens budgets and token healing — while frames of k + 1 positions verify
drafts that really are accepted; the first frame is the prompt's new ids + k drafts (prefill and first
verify in one trip), every later frame has k + 1 positions whatever the acceptance (or climbs the
ladder by what the cloud saw); a
verify cancelled in flight and a session evicted mid-request leave the next result unchanged;
sampled requests and a fast link decode step by step; a streamed completion adds up to the same text."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from umbra.engine import CancelToken, ClientModel, CompletionEngine, EngineConfig, SamplingConfig, StopConfig
from umbra.engine.config import SpeculationConfig
from umbra.engine.speculative import prompt_lookup
from umbra.errors import Cancelled
from umbra.middle.local import LocalMiddle

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "models" / "umbra-code-tiny"
SOURCES = ["umbra/engine/stops.py", "umbra/engine/fim.py", "umbra/wire.py", "vscode-extension/src/debounce.ts",
           "vscode-extension/src/languages.ts"]
DRAFTS = {"lookup": dict(lookup=True, draft_model=False), "model": dict(lookup=False, draft_model=True),
          "both": dict(lookup=True, draft_model=True)}


class ShapedMiddle(LocalMiddle):
    """The real in-process middle, recording each forward's position count; optionally slow (a
    link's delay), or holding multi-position forwards until released (a verify in flight)."""

    def __init__(self, blocks, delay: float = 0.0):
        super().__init__(blocks)
        self.delay, self.frames = delay, []
        self.hold: asyncio.Event | None = None
        self.held = asyncio.Event()
        self.evict_at: int | None = None  # evict the session at this many verify frames
        self.events: list[tuple[str, int]] = []  # what the cloud sees, in order: forwards and truncates

    async def truncate(self, session, length):
        self.events.append(("truncate", length))
        return await super().truncate(session, length)

    async def forward(self, hidden, positions, session, key_padding=None):
        self.frames.append(hidden.shape[1])
        self.events.append(("forward", hidden.shape[1]))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.hold is not None and hidden.shape[1] > 1 and len(self.frames) > 1:
            self.held.set()
            await self.hold.wait()
        if self.evict_at is not None and sum(t > 1 for t in self.frames[1:]) >= self.evict_at:
            self.evict_at = None
            self.runtime.close(session)  # the cloud dropped it: the next call raises SessionError
        return await super().forward(hidden, positions, session, key_padding)

    def round_trips(self, session: str) -> int:
        """A delayed middle stands for one across a link: each forward is a trip."""
        return len(self.frames) if self.delay else 0


@pytest.fixture(scope="module")
def model() -> ClientModel:
    return ClientModel.load(DEFAULT_MODEL)


def _cursors(n: int, seed: int = 0, before: int = 1500) -> list[tuple[str, str]]:
    """n cursors in real source files: mid-identifier, after blanks, at line starts (healing), with
    up to `before` characters of the file before them."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        text = (ROOT / SOURCES[i % len(SOURCES)]).read_text()
        at = rng.randrange(200, len(text) - 50)
        out.append((text[max(0, at - before) : at], text[at : at + rng.choice((0, 80, 400))]))
    return out


def _config(spec: dict, mode: str, **stop) -> EngineConfig:
    return EngineConfig(stop=StopConfig(**stop), speculation=SpeculationConfig(mode=mode, **spec))


STOPS = [dict(max_tokens=16, multiline=True), dict(max_tokens=16, multiline=False), dict(max_tokens=1),
         dict(max_tokens=3, multiline=True), dict(max_tokens=12, multiline=True, strings=(")", "\n\n"))]


async def test_speculation_equals_step_by_step_decoding_for_every_request(model):
    engine = CompletionEngine.split(model, LocalMiddle(model.load_middle()))
    accepted = {"lookup": 0, "model": 0}
    more_per_frame = 0
    for i, (prefix, suffix) in enumerate(_cursors(30, before=600)):  # 600: as many accepted drafts as 1,500, less prefill
        stop = STOPS[i % len(STOPS)]
        plain = await engine.complete(prefix, suffix, _config({}, "off", **stop))
        assert plain.speculation is None and plain.round_trips == 0  # in process: no trip
        for name, spec in DRAFTS.items():
            fast = await engine.complete(prefix, suffix, _config(spec, "on", **stop))
            assert (fast.text, fast.tokens, fast.stop_reason) == (plain.text, plain.tokens, plain.stop_reason), (i, name)
            counts = fast.speculation
            accepted["lookup"] += counts.lookup_accepted
            accepted["model"] += counts.model_accepted
            more_per_frame += counts.frames < fast.generated_tokens - 1
    assert accepted["lookup"] > 0 and accepted["model"] > 0  # both sources really drafted the output
    assert more_per_frame >= 10  # frames that carried more than one token


async def test_every_frame_has_k_plus_one_positions_whatever_the_acceptance(model):
    middle = ShapedMiddle(model.load_middle())
    engine = CompletionEngine.split(model, middle)
    for k in (2, 4):
        for prefix, suffix in _cursors(6, seed=1):
            middle.frames.clear()
            cfg = replace(_config(DRAFTS["both"], "on", max_tokens=16, multiline=True),
                          speculation=SpeculationConfig(mode="on", k=k, k_max=k))
            result = await engine.complete(prefix, suffix, cfg)
            # the prompt's new ids head the first verify frame (one trip), every later frame has k + 1
            assert middle.frames[0] == result.recomputed_tokens + k, (k, middle.frames)
            decode = middle.frames[1:]
            assert len(decode) == result.speculation.frames - 1 and set(decode) <= {k + 1}, (k, middle.frames)


async def test_no_draft_past_the_max_tokens_budget_and_every_frame_keeps_its_size(model):
    """Where max_tokens ends the completion before a frame's k drafts could all be used, the
    positions past the budget are padding (nothing drafted there), the frame still k + 1, the
    output that of step-by-step decoding."""
    middle = ShapedMiddle(model.load_middle())
    engine = CompletionEngine.split(model, middle)
    k = 4
    for budget in (1, 2, 3):
        for prefix, suffix in _cursors(4, seed=2):
            middle.frames.clear()
            cfg = EngineConfig(stop=StopConfig(max_tokens=budget, multiline=True),
                               speculation=SpeculationConfig(mode="on", k=k, k_max=k, **DRAFTS["both"]))
            result = await engine.complete(prefix, suffix, cfg)
            frames = list(middle.frames)
            plain = await engine.complete(prefix, suffix, replace(cfg, speculation=SpeculationConfig(mode="off")))
            assert (result.text, result.tokens) == (plain.text, plain.tokens)
            counts = result.speculation
            drafted = counts.lookup_drafted + counts.model_drafted
            # frame j (0-based) starts with at least j tokens chosen: budget - j - 1 drafts can count
            assert drafted <= sum(max(0, budget - j - 1) for j in range(counts.frames)), (budget, counts)
            assert drafted + counts.padded == k * counts.frames, counts
            assert frames[0] == result.recomputed_tokens + k and set(frames[1:]) <= {k + 1}, frames


async def test_the_ladder_follows_only_what_the_cloud_saw(model):
    """With k_max > k a frame's size is k + 1 after a frame the next one trims (a rejection), and
    one rung up after a frame left whole: a function of the truncates the cloud already saw."""
    middle = ShapedMiddle(model.load_middle())
    engine = CompletionEngine.split(model, middle)
    climbed = 0
    for prefix, suffix in _cursors(8, seed=6):
        spec = SpeculationConfig(mode="on", k=2, k_max=8)
        cfg = EngineConfig(stop=StopConfig(max_tokens=32, multiline=True), speculation=spec)
        plain = await engine.complete(prefix, suffix, _config({}, "off", max_tokens=32, multiline=True))
        middle.events.clear()
        result = await engine.complete(prefix, suffix, cfg)
        assert (result.text, result.tokens) == (plain.text, plain.tokens)
        frames = [(n, i) for i, (what, n) in enumerate(middle.events) if what == "forward"]
        verify = frames[-(result.speculation.frames - 1):] if result.speculation.frames > 1 else []
        k = 2
        for (n, at), (_, before) in zip(verify, frames[-result.speculation.frames:]):
            trimmed = any(what == "truncate" for what, _ in middle.events[before + 1 : at])
            k = 2 if trimmed else min(2 * k, 8)
            assert n == k + 1, (middle.events, k)
            climbed += k > 2
    assert climbed > 0  # some frames really went up the ladder


async def test_a_verify_cancelled_in_flight_leaves_the_next_result_unchanged(model):
    prefix, suffix = _cursors(1, seed=2)[0]
    cfg = _config(DRAFTS["both"], "on", max_tokens=16, multiline=True)
    expected = await CompletionEngine.split(model, LocalMiddle(model.load_middle())).complete(
        prefix, suffix, _config({}, "off", max_tokens=16, multiline=True))
    middle = ShapedMiddle(model.load_middle())
    engine = CompletionEngine.split(model, middle)
    session = engine.new_session(cfg)
    for how in ("task", "token"):
        middle.hold, middle.held = asyncio.Event(), asyncio.Event()
        cancel = CancelToken()
        task = asyncio.ensure_future(session.complete(prefix, suffix, cancel=cancel))
        await asyncio.wait_for(middle.held.wait(), 60)  # a verify frame is in flight
        if how == "task":
            task.cancel()
        else:
            cancel.cancel()
        middle.hold.set()
        with pytest.raises(asyncio.CancelledError if how == "task" else Cancelled):
            await task
        middle.hold = None
        again = await session.complete(prefix, suffix)
        assert (again.text, again.tokens) == (expected.text, expected.tokens) and again.speculation.frames > 0
    await session.close()


async def test_a_session_evicted_during_speculation_is_rerun_with_the_same_result(model):
    prefix, suffix = _cursors(1, seed=3)[0]
    stop = dict(max_tokens=16, multiline=True)
    expected = await CompletionEngine.split(model, LocalMiddle(model.load_middle())).complete(
        prefix, suffix, _config({}, "off", **stop))
    middle = ShapedMiddle(model.load_middle())
    middle.evict_at = 2
    result = await CompletionEngine.split(model, middle).complete(prefix, suffix, _config(DRAFTS["both"], "on", **stop))
    assert result.evicted and middle.evict_at is None
    assert (result.text, result.tokens) == (expected.text, expected.tokens)


async def test_sampled_requests_speculate_and_a_fast_link_decodes_step_by_step(model):
    prefix, suffix = _cursors(1, seed=4)[0]
    middle = ShapedMiddle(model.load_middle())
    engine = CompletionEngine.split(model, middle)
    sampled = EngineConfig(sampling=SamplingConfig(temperature=0.8, seed=1), stop=StopConfig(max_tokens=8),
                           speculation=SpeculationConfig(mode="on"))
    assert (await engine.complete(prefix, suffix, sampled)).speculation is not None  # the sampling rule (its own test)
    auto = EngineConfig(stop=StopConfig(max_tokens=8), speculation=SpeculationConfig(mode="auto", min_trip_ms=40))
    engine.link.trip_ms = None
    assert (await engine.complete(prefix, suffix, auto)).speculation is None  # nothing measured yet
    assert engine.link.trip_ms is not None
    engine.link.trip_ms = None
    slow_cut = replace(auto, speculation=SpeculationConfig(mode="auto", min_trip_ms=1000))
    await engine.complete(prefix, suffix, slow_cut)
    assert (await engine.complete(prefix, suffix, slow_cut)).speculation is None  # in process: far below 1 s
    engine.link.trip_ms = 1e6  # however slow a step, an in-process middle (no trips) is not speculated on
    assert (await engine.complete(prefix, suffix, auto)).speculation is None
    engine.link.trip_ms = None
    middle.delay = 0.06  # a 60 ms link: measured on the next step-by-step request, then speculated on
    first = await engine.complete(prefix, suffix, auto)
    assert engine.link.trip_ms >= 40
    second = await engine.complete(prefix, suffix, auto)
    assert second.speculation is not None and second.tokens == first.tokens


def test_prompt_lookup_takes_the_latest_longest_match():
    seq = [1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 2, 3]
    assert prompt_lookup(seq, 3, ngram=3, min_ngram=2) == ([7, 8, 5], 2)  # "2 3" last seen before 7
    assert prompt_lookup(seq + [7], 2, ngram=3, min_ngram=2) == ([8, 5], 3)  # "2 3 7"
    assert prompt_lookup([4, 5, 6], 3, ngram=3, min_ngram=1) == ([], 0)
    assert prompt_lookup([4, 5, 4], 3, ngram=2, min_ngram=1) == ([5, 4], 1)
    assert prompt_lookup([1, 2, 3, 1, 2], 4, ngram=2, min_ngram=2) == ([3, 1, 2], 2)
    assert torch.tensor(prompt_lookup(list(range(50)) * 2, 4, 3, 2)[0]).tolist() == [0, 1, 2, 3]


async def test_a_streamed_speculative_completion_adds_up_to_the_same_text(model):
    engine = CompletionEngine.split(model, LocalMiddle(model.load_middle()))
    for prefix, suffix in _cursors(4, seed=5):
        stop = dict(max_tokens=16, multiline=True)
        plain = await engine.complete(prefix, suffix, _config({}, "off", **stop))
        deltas: list[str] = []
        async with engine.session(_config(DRAFTS["both"], "on", **stop)) as session:
            fast = await session.complete(prefix, suffix, on_text=deltas.append)
        assert fast.text == plain.text == "".join(deltas) and fast.speculation.frames > 0


def test_auto_speculates_on_a_slow_link_bundle_or_not():
    """`auto` decides on the link alone, never the acceptance, the language or a held key: under
    a bundle too (with a fixed k per frame: test_speculative_bundle.py); `on` always."""
    from umbra.engine.speculative import LinkClock, Speculator

    clock = LinkClock()
    clock.observe(0.5)  # a 500 ms trip
    spec = Speculator(None, clock)
    auto, on = SpeculationConfig(mode="auto"), SpeculationConfig(mode="on")
    assert spec.wanted(auto, greedy=True) and spec.wanted(auto, greedy=True, private=True)
    assert spec.wanted(on, greedy=True, private=True)
    assert spec.wanted(on, greedy=False, private=True) and spec.wanted(auto, greedy=False)  # the sampling rule
    assert not spec.wanted(auto, greedy=True, remote=False) and spec.wanted(on, greedy=True, remote=False)


@pytest.mark.parametrize("field, value", [("mode", "always"), ("k", 0), ("k", 17), ("k_max", 33),
                                          ("ngram", 1), ("min_ngram", 0), ("min_trip_ms", -1.0),
                                          ("min_acceptance", 0.0), ("min_acceptance", 1.0)])
def test_a_speculation_setting_out_of_range_is_a_config_error(field, value):
    """Every field is checked (min_ngram, min_trip_ms and min_acceptance once went unchecked: the
    ladder's property sat inside validate())."""
    from umbra.errors import ConfigError

    SpeculationConfig().validate()
    with pytest.raises(ConfigError):
        replace(SpeculationConfig(), **{field: value}).validate()
    assert SpeculationConfig(k=4, k_max=16).rungs == (4, 8, 16) and SpeculationConfig(k=12).rungs == (12, 24)
