"""The OpenAI-compatible API of `umbra serve` (lsp/routes/openai_completions.py, models.py),
driven by the official `openai` Python client against the real app under uvicorn, completing
through the real cloud service on loopback (`loopback_cloud`): completions equal the in-process baseline
and Umbra's own POST /v1/infill, fill-in-the-middle with `suffix` or a FIM template prompt,
streams add up to the same text and end with [DONE], `stop` cuts before the sequence, `n` with
a `seed` is reproducible, bad bodies are 4xx in OpenAI's error shape, and a dropped stream stops
its decode within one step (the server's own counters)."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time

import httpx
import openai
import pytest
import pytest_asyncio
from lsp_helpers import API_TOKEN, CLOUD_TOKEN_ENV, Monolithic, serving

from lsp.options import CompletionOptions
from lsp.settings import LocalSettings

pytestmark = pytest.mark.asyncio(loop_scope="module")

OPTIONS = CompletionOptions(max_tokens=24, multiline=True)  # the server's completion settings
PREFIX = "import os\n\n\ndef add(a, b):\n    total = a + b\n    return "
SUFFIX = "\n\n\nprint(add(1, 2))\n"


@pytest.fixture(scope="module")
def server(lsp_model_dir, secret_service, loopback_cloud):
    """(base URL, backend) of one `umbra serve` app completing through the module's cloud (the real
    service in a thread, on loopback; the self-started one is test_serve_cmd.py's)."""
    apps: list = []
    settings = LocalSettings(model_dir=lsp_model_dir, threads=1, keyring_service=f"umbra-test-{secrets.token_hex(6)}",
                             max_tokens=OPTIONS.max_tokens, multiline=OPTIONS.multiline,
                             cloud_url=loopback_cloud.base_url, cloud_token_env=CLOUD_TOKEN_ENV)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CLOUD_TOKEN_ENV, loopback_cloud.token)
        with serving(settings, apps=apps) as url:
            yield url, apps[0].state.backend


@pytest.fixture(scope="module")
def model_id(lsp_model_dir) -> str:
    return lsp_model_dir.name


@pytest.fixture(scope="module")
def mono(lsp_model_dir) -> Monolithic:
    return Monolithic(lsp_model_dir)


@pytest_asyncio.fixture(loop_scope="module")
async def client(server):
    async with openai.AsyncOpenAI(base_url=f"{server[0]}/v1", api_key=API_TOKEN, max_retries=0, timeout=120) as c:
        yield c


@pytest_asyncio.fixture(loop_scope="module")
async def http(server):
    async with httpx.AsyncClient(base_url=server[0], timeout=120, headers={"Authorization": f"Bearer {API_TOKEN}"}) as c:
        yield c


async def test_models_lists_the_served_model_and_a_wrong_one_is_404(client, model_id):
    models = await client.models.list()
    assert [m.id for m in models.data] == [model_id] and models.data[0].object == "model"
    assert models.data[0].owned_by == "umbra" and models.data[0].created > 0
    assert (await client.models.retrieve(model_id)).id == model_id
    with pytest.raises(openai.NotFoundError) as err:
        await client.completions.create(model="gpt-3.5-turbo-instruct", prompt=PREFIX)
    assert err.value.code == "model_not_found" and err.value.param == "model"
    assert model_id in err.value.message and err.value.type == "invalid_request_error"
    with pytest.raises(openai.NotFoundError):
        await client.models.retrieve("other")


async def test_fim_completion_equals_the_baseline_and_the_native_api(client, http, model_id, mono):
    expected = await mono.complete(PREFIX, SUFFIX, OPTIONS)
    r = await client.completions.create(model=model_id, prompt=PREFIX, suffix=SUFFIX)
    assert r.object == "text_completion" and r.id.startswith("cmpl-") and r.model == model_id
    (choice,) = r.choices
    assert choice.text == expected != "" and choice.index == 0 and choice.logprobs is None
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5 and 0 < r.usage.completion_tokens <= OPTIONS.max_tokens
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    native = (await http.post("/v1/infill", json={"prefix": PREFIX, "suffix": SUFFIX})).json()
    assert native["completion"] == choice.text and native["promptTokens"] == r.usage.prompt_tokens
    assert native["generatedTokens"] == r.usage.completion_tokens
    assert 1 <= r.usage.to_dict()["umbra_round_trips"] <= 4 + r.usage.completion_tokens  # Umbra's extra (open + prefill: one)
    assert choice.finish_reason == ("length" if native["stopReason"] == "max_tokens" else "stop")

    # a FIM template in the prompt (what Continue sends) is the same request
    template = await client.completions.create(model=model_id, prompt=f"<fim_prefix>{PREFIX}<fim_suffix>{SUFFIX}<fim_middle>")
    assert template.choices[0].text == expected
    # without a suffix the prompt is all prefix; max_tokens caps it ("length")
    short = await client.completions.create(model=model_id, prompt=PREFIX, max_tokens=3)
    assert short.choices[0].text == await mono.complete(PREFIX, "", CompletionOptions(max_tokens=3, multiline=True))
    assert short.usage.completion_tokens <= 3
    echo = await client.completions.create(model=model_id, prompt=PREFIX, suffix=SUFFIX, echo=True)
    assert echo.choices[0].text == PREFIX + expected


async def test_streaming_adds_up_to_the_same_text_and_ends_with_done(client, http, model_id):
    plain = (await client.completions.create(model=model_id, prompt=PREFIX, suffix=SUFFIX, max_tokens=20)).choices[0]
    stream = await client.completions.create(model=model_id, prompt=PREFIX, suffix=SUFFIX, max_tokens=20, stream=True,
                                             stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    texts = [c.choices[0].text for c in chunks if c.choices and c.choices[0].finish_reason is None]
    assert "".join(texts) == plain.text and len([t for t in texts if t]) > 1  # text came in pieces
    assert all(c.object == "text_completion" and c.id == chunks[0].id for c in chunks)
    ends = [c.choices[0] for c in chunks if c.choices and c.choices[0].finish_reason is not None]
    assert [(e.index, e.text, e.finish_reason) for e in ends] == [(0, "", plain.finish_reason)]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0  # include_usage

    async with http.stream("POST", "/v1/completions", json={"model": model_id, "prompt": PREFIX, "suffix": SUFFIX,
                                                             "max_tokens": 4, "stream": True}) as raw:
        assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/event-stream")
        lines = [line async for line in raw.aiter_lines() if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"


async def test_stop_sequences_cut_before_them(client, model_id):
    plain = (await client.completions.create(model=model_id, prompt=PREFIX, suffix=SUFFIX)).choices[0].text
    middle = len(plain) // 2
    stop = plain[middle: middle + 2]
    r = await client.completions.create(model=model_id, prompt=PREFIX, suffix=SUFFIX, stop=stop)
    assert r.choices[0].text == plain[: plain.index(stop)].rstrip() and r.choices[0].finish_reason == "stop"
    several = await client.completions.create(model=model_id, prompt=PREFIX, suffix=SUFFIX,
                                              stop=["\x00never", stop, "\x01never", "\x02never", "\x03", "\x04"])
    assert several.choices[0].text == r.choices[0].text  # more than OpenAI's 4, as Continue sends
    streamed = await client.completions.create(model=model_id, prompt=PREFIX, suffix=SUFFIX, stop=[stop], stream=True)
    assert "".join([c.choices[0].text async for c in streamed]) == r.choices[0].text


async def test_n_choices_with_a_seed_are_reproducible(client, model_id):
    def ask(**kw):
        return client.completions.create(model=model_id, prompt=PREFIX, suffix=SUFFIX, max_tokens=12,
                                         **{"temperature": 1.0, **kw})

    three = await ask(n=3, seed=7)
    assert [c.index for c in three.choices] == [0, 1, 2]
    texts = [c.text for c in three.choices]
    assert [c.text for c in (await ask(n=3, seed=7)).choices] == texts  # same seed, same choices
    assert (await ask(seed=7)).choices[0].text == texts[0]  # choice j samples with seed + j
    assert (await ask(seed=8)).choices[0].text == texts[1]
    assert len(set(texts)) > 1
    streamed = await ask(n=3, seed=7, stream=True)
    by_choice = ["", "", ""]
    async for chunk in streamed:
        for c in chunk.choices:
            by_choice[c.index] += c.text
    assert by_choice == texts
    unseeded = [c.text for c in (await ask(n=8, temperature=1.5)).choices]
    assert len(set(unseeded)) > 1  # no seed: fresh randomness for each choice
    two_prompts = await client.completions.create(model=model_id, prompt=[PREFIX, "x = "], n=2, seed=7,
                                                  temperature=1.0, max_tokens=12, suffix=SUFFIX)
    assert [c.index for c in two_prompts.choices] == [0, 1, 2, 3]
    assert [c.text for c in two_prompts.choices[:2]] == texts[:2]  # prompt i's choice j is index i * n + j


@pytest.mark.parametrize("body, param, words", [
    ({"prompt": "x"}, "model", "Field required"),
    ({"model": "M"}, "prompt", "Field required"),
    ({"model": "M", "prompt": "x", "max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
    ({"model": "M", "prompt": "x", "temperature": 3}, "temperature", "less than or equal to 2"),
    ({"model": "M", "prompt": "x", "top_p": 0}, "top_p", "greater than 0"),
    ({"model": "M", "prompt": "x", "n": 17}, "n", "less than or equal to 16"),
    ({"model": "M", "prompt": ["a", "b"], "n": 9}, None, "at most 16"),
    ({"model": "M", "prompt": "x", "stop": [f"s{i}" for i in range(17)]}, "stop", "at most 16"),
    ({"model": "M", "prompt": "x", "stop": ""}, "stop", "at least 1 character"),
    ({"model": "M", "prompt": [1, 2, 3]}, "prompt", "token ids are not accepted"),
    ({"model": "M", "prompt": []}, "prompt", "empty list"),
    ({"model": "M", "prompt": "x", "logprobs": 2}, "logprobs", "not supported"),
    ({"model": "M", "prompt": "x", "best_of": 3}, "best_of", "not supported"),
    ({"model": "M", "prompt": "x", "presence_penalty": 0.5}, "presence_penalty", "not supported"),
    ({"model": "M", "prompt": "x", "logit_bias": {"50256": -100}}, "logit_bias", "not supported"),
    ({"model": "M", "prompt": "x", "stream_options": {"include_usage": True}}, None, "needs stream"),
    ({"model": "M", "prompt": "x", "max_tokens": "8"}, "max_tokens", "valid integer"),
    ({"model": "M", "prompt": "x", "session": "a b"}, "session", "pattern"),
    ({"model": "M", "prompt": "x", "max_tokens": 600}, None, "leaves no room"),  # the engine's own check
    ({"model": "M", "prefix": "x", "suffix": ""}, "prompt", "POST /v1/infill"),  # Umbra's own body
])
async def test_bad_bodies_are_400_in_openais_shape(http, model_id, body, param, words):
    body = {**body, "model": model_id} if body.get("model") == "M" else body
    r = await http.post("/v1/completions", json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param and words in error["message"], error


async def test_the_openai_client_raises_on_bad_bodies(client, http, model_id):
    with pytest.raises(openai.BadRequestError) as err:
        await client.completions.create(model=model_id, prompt="x", max_tokens=0)
    assert err.value.status_code == 400 and err.value.param == "max_tokens"
    with pytest.raises(openai.BadRequestError) as err:
        await client.completions.create(model=model_id, prompt="x", stream=True, logprobs=1)
    assert err.value.param == "logprobs"
    r = await http.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]


async def test_access_checks_answer_in_openais_shape(server, model_id):
    url = server[0]
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0) as stranger:
        for call in (stranger.models.list(), stranger.completions.create(model=model_id, prompt="x")):
            with pytest.raises(openai.AuthenticationError) as err:
                await call
            assert err.value.code == "invalid_api_key" and API_TOKEN not in str(err.value.body)
    async with httpx.AsyncClient(base_url=url, timeout=60) as raw:
        r = await raw.post("/v1/completions", json={"model": model_id, "prompt": "x"},
                           headers={"Host": "evil.example", "Authorization": f"Bearer {API_TOKEN}"})
        assert r.status_code == 421 and r.json()["error"]["code"] == "misdirected_host"


async def test_umbra_extras_ride_along_and_unknown_fields_are_a_warning(client, server, model_id, mono, caplog):
    backend = server[1]
    with caplog.at_level(logging.WARNING, logger="umbra.lsp"):
        r = await client.completions.create(model=model_id, prompt=PREFIX, suffix=SUFFIX, max_tokens=8, extra_body={
            "session": "oa-1", "language": "python", "multiline": False, "contextTokens": 512, "beam_width": 4})
    assert r.choices[0].text == await mono.complete(PREFIX, SUFFIX, CompletionOptions(max_tokens=8, context_tokens=512))
    assert "oa-1" in backend.pool  # a warm session, as POST /v1/infill keeps
    assert any("beam_width" in rec.getMessage() for rec in caplog.records if rec.name == "umbra.lsp")


async def test_a_dropped_stream_stops_its_decode_within_one_step(client, http, server, model_id, mono):
    """The client reads three chunks of a long completion and closes the connection: the server
    cancels the decode, which runs at most one more step (its own counters), and the session's
    caches stay consistent for the next request."""
    backend = server[1]
    before = dict(backend.counts)
    stream = await client.completions.create(model=model_id, prompt=PREFIX, suffix=SUFFIX, max_tokens=300,
                                             stream=True, extra_body={"session": "oa-drop"})
    read = 0
    async for chunk in stream:
        read += bool(chunk.choices and chunk.choices[0].text)
        if read == 3:
            break
    await stream.close()
    deadline = time.monotonic() + 60
    while backend.counts["streams_dropped"] == before.get("streams_dropped", 0):
        assert time.monotonic() < deadline, "the server did not notice the dropped stream"
        await asyncio.sleep(0.05)
    assert backend.counts["steps_after_drop"] - before.get("steps_after_drop", 0) <= 1
    assert backend.counts["cancelled"] == before.get("cancelled", 0) + 1  # stopped, not finished
    assert backend.counts["ok"] == before.get("ok", 0)
    health = (await http.get("/healthz")).json()["completions"]
    assert health["streams_dropped"] >= 1 and "steps_after_drop" in health
    after = await client.completions.create(model=model_id, prompt=PREFIX, suffix=SUFFIX,
                                            extra_body={"session": "oa-drop"})
    assert after.choices[0].text == await mono.complete(PREFIX, SUFFIX, OPTIONS)


async def test_a_newer_request_on_the_session_ends_a_stream_with_an_error_event(client, model_id, mono):
    stream = await client.completions.create(model=model_id, prompt=PREFIX, suffix=SUFFIX, max_tokens=300,
                                             stream=True, extra_body={"session": "oa-race"})
    await anext(aiter(stream))  # the stream has started: its status was 200
    newer = await client.completions.create(model=model_id, prompt=PREFIX, suffix=SUFFIX,
                                            extra_body={"session": "oa-race"})
    assert newer.choices[0].text == await mono.complete(PREFIX, SUFFIX, OPTIONS)
    with pytest.raises(openai.APIError, match="newer request"):
        async for _ in stream:
            pass
