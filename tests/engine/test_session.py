"""CompletionSession through LocalMiddle: prefix reuse, seeded sampling, stop rules end to end,
cancellation between steps, and recovery when the middle loses the session."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import time

import pytest
import torch

from tiny_models import CODE_SNIPPETS
from umbra.engine import CancelToken, CompletionEngine, EngineConfig, PromptConfig, SamplingConfig, StopConfig
from umbra.errors import Cancelled, ConfigError, SessionError

FILE = "".join(CODE_SNIPPETS)
CURSOR = FILE.index("    return a + b") + len("    return ")
PREFIX, SUFFIX = FILE[:CURSOR], FILE[CURSOR:]
# token healing off: these tests pin stop rules and reuse to exact token counts (healing has its own)
CFG = EngineConfig(prompt=PromptConfig(budget=256, token_healing=False), stop=StopConfig(max_tokens=8, multiline=True,
                                                                      stop_at_block_end=False))


@pytest.fixture
def engine(client_model, local_middle):
    return CompletionEngine.split(client_model, local_middle, CFG)


async def test_prefix_reuse_runs_only_new_tokens_and_matches_a_fresh_session(engine, local_middle):
    async with engine.session() as s:
        first = await s.complete(PREFIX, SUFFIX)
        assert first.reused_tokens == 0 and first.recomputed_tokens == first.prompt_tokens
        assert first.generated_tokens == 8 and first.stop_reason == "max_tokens"
        typed = PREFIX + "a"  # one keystroke
        second = await s.complete(typed, SUFFIX)
        suffix_tokens = len(s.tokenizer.encode(SUFFIX))
        assert second.reused_tokens >= first.prompt_tokens - suffix_tokens - 4
        assert second.recomputed_tokens <= suffix_tokens + 4
        assert second.recomputed_tokens == second.prompt_tokens - second.reused_tokens
        # the client caches and the middle session were truncated to the common prefix
        runner = s.runner
        assert runner.enc_cache.length == runner.dec_cache.length == runner.length == s.cached_tokens
        assert local_middle.runtime.sessions[runner.session].length == runner.length
        again = await s.complete(typed, SUFFIX)  # identical request: only the last prompt token
        assert again.recomputed_tokens == 1 and again.tokens == second.tokens
    async with engine.session() as fresh:
        ref = await fresh.complete(typed, SUFFIX)
    assert ref.reused_tokens == 0
    assert ref.tokens == second.tokens and ref.text == second.text


async def test_sampling_is_deterministic_for_a_seed(engine):
    def cfg(seed):
        return dataclasses.replace(CFG, sampling=SamplingConfig(temperature=1.0, top_p=0.9, seed=seed),
                                   stop=StopConfig(max_tokens=16, multiline=True, stop_at_block_end=False))

    a = await engine.complete(PREFIX, SUFFIX, cfg(5))
    b = await engine.complete(PREFIX, SUFFIX, cfg(5))
    c = await engine.complete(PREFIX, SUFFIX, cfg(6))
    greedy = await engine.complete(PREFIX, SUFFIX, dataclasses.replace(cfg(5), sampling=SamplingConfig()))
    assert a.tokens == b.tokens and a.text == b.text
    assert a.tokens != c.tokens
    assert a.tokens != greedy.tokens


def _biased(client_model, token_id: int, bias: float):
    """The same model with an LM-head bias on one token (a real, slightly different model)."""
    decoder = copy.deepcopy(client_model.decoder)
    head = torch.nn.Linear(decoder.lm_head.in_features, decoder.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(decoder.lm_head.weight)
        head.bias.zero_()
        head.bias[token_id] = bias
    decoder.lm_head = head.requires_grad_(False)
    return dataclasses.replace(client_model, decoder=decoder)


async def test_stop_at_the_fim_end_token(client_model, local_middle):
    eos = client_model.tokenizer.token_id("<|endoftext|>")
    engine = CompletionEngine.split(_biased(client_model, eos, 100.0), local_middle, CFG)
    result = await engine.complete(PREFIX, SUFFIX)
    assert (result.text, result.tokens, result.stop_reason) == ("", (), "eos")


async def test_single_line_stops_at_newline(client_model, local_middle):
    newline = client_model.tokenizer.encode("\n")[0]
    cfg = dataclasses.replace(CFG, stop=StopConfig(max_tokens=8, multiline=False))
    engine = CompletionEngine.split(_biased(client_model, newline, 100.0), local_middle, cfg)
    mid_line = await engine.complete("x = ", "1\n")  # cursor inside a line: stop at once
    assert (mid_line.text, mid_line.stop_reason, len(mid_line.tokens)) == ("", "newline", 1)
    at_end = await engine.complete("x = 1", "\n")  # end of line: blank lines never end it
    assert at_end.stop_reason == "max_tokens" and at_end.text == ""


async def test_max_tokens(engine):
    result = await engine.complete(PREFIX, SUFFIX, dataclasses.replace(CFG, stop=StopConfig(
        max_tokens=3, multiline=True, stop_at_block_end=False)))
    assert len(result.tokens) == 3 and result.stop_reason == "max_tokens"


async def _wait_for(session, n):
    while session.cached_tokens < n:
        await asyncio.sleep(0)


@pytest.mark.parametrize("how", ["token", "task"])
async def test_cancellation_between_decode_steps_keeps_the_session_usable(engine, how):
    long = dataclasses.replace(CFG, stop=StopConfig(max_tokens=40, multiline=True, stop_at_block_end=False))
    async with engine.session(long) as s:
        cancel = CancelToken()
        task = asyncio.create_task(s.complete(PREFIX, SUFFIX, cancel=cancel))
        prompt_len = len(s.tokenizer.encode(PREFIX)) + len(s.tokenizer.encode(SUFFIX)) + 3
        await _wait_for(s, prompt_len + 3)  # three decode steps in
        cancel.cancel() if how == "token" else task.cancel()
        with pytest.raises(Cancelled if how == "token" else asyncio.CancelledError):
            await task
        assert prompt_len + 3 <= s.cached_tokens < prompt_len + 40  # stopped early, cache consistent
        assert s.runner.length == s.cached_tokens
        after = await s.complete(PREFIX, SUFFIX, dataclasses.replace(CFG))
        assert after.recomputed_tokens == 1  # the prompt was still cached
    ref = await engine.complete(PREFIX, SUFFIX)
    assert after.tokens == ref.tokens


async def test_streaming_hands_out_the_completion_step_by_step(engine):
    """on_text: one call per decode step that does not end the completion, then the rest; the
    deltas are the completion, the same as without streaming; a stop string ends it."""
    long = dataclasses.replace(CFG, sampling=SamplingConfig(temperature=1.0, seed=3),
                               stop=StopConfig(max_tokens=24, multiline=True, stop_at_block_end=False))
    plain = await engine.complete(PREFIX, SUFFIX, long)
    deltas: list[str] = []
    async with engine.session() as s:
        streamed = await s.complete(PREFIX, SUFFIX, long, on_text=deltas.append)
    assert streamed.tokens == plain.tokens and "".join(deltas) == streamed.text == plain.text
    assert len(deltas) in (23, 24) and sum(map(bool, deltas[:-1])) > 5  # text arrived while decoding
    middle = len(plain.text) // 2
    stop = plain.text[middle: middle + 2]
    cut = dataclasses.replace(long, stop=dataclasses.replace(long.stop, strings=(stop,)))
    stopped = await engine.complete(PREFIX, SUFFIX, cut)
    assert stopped.stop_reason == "stop_string" and stopped.text == plain.text[: plain.text.index(stop)].rstrip()
    assert len(stopped.tokens) < len(plain.tokens)


async def test_a_stream_cancelled_between_steps_runs_no_further_step(engine):
    long = dataclasses.replace(CFG, stop=StopConfig(max_tokens=40, multiline=True, stop_at_block_end=False))
    steps: list[str] = []

    def on_text(delta):
        steps.append(delta)
        if len(steps) == 3:
            task.cancel()  # the consumer went away while step 3's text was being handed over

    async with engine.session(long) as s:
        task = asyncio.ensure_future(s.complete(PREFIX, SUFFIX, on_text=on_text))
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(steps) == 3  # cancelled at the next cancellation point, before another step
        assert s.runner.length == s.cached_tokens


async def test_cancelled_token_stops_before_any_compute(engine):
    cancel = CancelToken()
    cancel.cancel()
    async with engine.session() as s:
        with pytest.raises(Cancelled):
            await s.complete(PREFIX, SUFFIX, cancel=cancel)
        assert s.cached_tokens == 0


async def test_lost_middle_session_is_reprefilled_once(engine, local_middle):
    async with engine.session() as s:
        first = await s.complete(PREFIX, SUFFIX)
        local_middle.runtime.sessions.pop(s.runner.session)  # the cloud dropped our cache
        second = await s.complete(PREFIX, SUFFIX)
    assert second.evicted and second.reused_tokens == 0
    assert second.tokens == first.tokens


async def test_closed_session_refuses_requests(engine):
    s = engine.new_session()
    await s.complete("x = ", "")
    await s.close()
    with pytest.raises(SessionError):
        await s.complete("x = ", "")


async def test_prompt_and_completion_fit_the_context_window(client_model, local_middle):
    big = EngineConfig(prompt=PromptConfig(budget=4096), stop=StopConfig(max_tokens=16, multiline=True,
                                                                         stop_at_block_end=False))
    engine = CompletionEngine.split(client_model, local_middle, big, context_length=300)
    assert engine.context_length == 300
    long_file = FILE * 8
    cursor = len(long_file) // 2
    result = await engine.complete(long_file[:cursor], long_file[cursor:])
    assert 250 < result.prompt_tokens and result.prompt_tokens + 16 <= 300
    assert len(result.tokens) == 16
    too_long = dataclasses.replace(big, stop=StopConfig(max_tokens=299))
    with pytest.raises(ConfigError, match="no room"):
        await engine.complete("x", "", too_long)


async def test_typing_in_a_file_larger_than_the_budget_reruns_only_the_tail(engine):
    """Ten keystrokes in a file far over budget: the prefix cut stays put, so each request runs
    the edited tokens plus the (budgeted) suffix, never the whole prompt again."""
    big_file = FILE * 4
    cursor = big_file.index("numbers = ", len(big_file) // 2)
    before, after = big_file[:cursor], big_file[cursor:]
    cfg = dataclasses.replace(CFG, stop=StopConfig(max_tokens=2, multiline=True, stop_at_block_end=False))
    async with engine.session(cfg) as s:
        first = await s.complete(before, after)
        assert first.prompt_tokens > 200 and first.recomputed_tokens == first.prompt_tokens
        suffix_budget = 256 - round(256 * 0.75)
        for typed in ("t", "to", "tot", "tota", "total", "total ", "total =", "total = ", "total = s", "total = su"):
            r = await s.complete(before + typed, after)
            assert r.prompt_tokens > 200
            assert r.recomputed_tokens <= suffix_budget + 6, (typed, r.recomputed_tokens)


async def test_token_healing_regenerates_the_last_prefix_token(client_model, local_middle):
    """The cursor after "return ": the first generated token starts with the healed text (never a
    stop: the document holds that text), and the completion is what follows it."""
    healing = dataclasses.replace(CFG, prompt=PromptConfig(budget=256))
    prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
    heal = client_model.tokenizer.decode(client_model.tokenizer.encode(prefix)[-1:])
    result = await CompletionEngine.split(client_model, local_middle, healing).complete(prefix, suffix)
    generated = client_model.tokenizer.decode(list(result.tokens))
    assert result.tokens and generated.startswith(heal)
    assert result.prompt_tokens == len(client_model.tokenizer.encode(prefix)) + len(
        client_model.tokenizer.encode(suffix)) + 3 - 1  # three FIM markers, minus the healed token
    eos = client_model.tokenizer.token_id("<|endoftext|>")
    stopped = await CompletionEngine.split(_biased(client_model, eos, 100.0), local_middle, healing).complete(
        prefix, suffix)
    assert (stopped.stop_reason, len(stopped.tokens)) == ("eos", 1)  # one token re-creates the heal first
    first = client_model.tokenizer.decode(list(stopped.tokens))
    assert first.startswith(heal) and stopped.text == first[len(heal):]
    favoured = client_model.tokenizer.encode("\n")[0]  # a token that does not start with the healed text
    assert not client_model.tokenizer.decode([favoured]).startswith(heal)
    steered = await CompletionEngine.split(_biased(client_model, favoured, 100.0), local_middle, healing).complete(
        prefix, suffix)
    assert steered.tokens[0] != favoured


async def test_a_deadline_stops_the_decode_and_trims_the_text(engine):
    long = dataclasses.replace(CFG, stop=StopConfig(max_tokens=32, multiline=True, stop_at_block_end=False))
    async with engine.session() as s:
        full = await s.complete(PREFIX, SUFFIX, long)
        past = await s.complete(PREFIX, SUFFIX, long, deadline=time.monotonic())  # passed before the first step
        later = await s.complete(PREFIX, SUFFIX, long, deadline=time.monotonic() + 600)
        with pytest.raises(ConfigError, match="streamed"):  # a deadline could take back streamed text
            await s.complete(PREFIX, SUFFIX, long, deadline=time.monotonic() + 600, on_text=lambda delta: None)
    assert full.generated_tokens == 32
    assert past.stop_reason == "deadline" and past.generated_tokens == 1  # the prompt's logits give one token
    assert full.text.startswith(past.text)
    assert later.tokens == full.tokens and later.text == full.text


async def test_a_degenerate_loop_stops_after_one_copy(client_model, local_middle):
    from umbra.engine.repetition import loop_cut

    cfg = dataclasses.replace(CFG, stop=StopConfig(max_tokens=48, multiline=True, stop_at_block_end=False))
    engine = CompletionEngine.split(client_model, local_middle, cfg)
    free = await engine.complete(PREFIX, SUFFIX)
    cut = loop_cut(free.tokens, 12)
    assert cut is not None, "the tiny random model is expected to loop here"  # what makes this test bite
    stopped = await engine.complete(PREFIX, SUFFIX, dataclasses.replace(cfg, stop=dataclasses.replace(cfg.stop,
                                                                                                      repetition=12)))
    assert stopped.stop_reason == "repetition" and stopped.generated_tokens < free.generated_tokens
    assert stopped.tokens == free.tokens[:stopped.generated_tokens]
    assert stopped.text == client_model.tokenizer.decode(list(free.tokens[:cut])).rstrip()
