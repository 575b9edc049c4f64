"""POST /v1/completions: OpenAI's completions API (the legacy, non-chat one) over the split
engine, so that the `openai` clients, Continue and other tools complete through Umbra.

    {"model": "umbra-code-deep", "prompt": "def add(a, b):\n    return ", "suffix": "\n",
     "max_tokens": 32, "temperature": 0.2, "stop": ["\n\n"], "n": 2, "seed": 7, "stream": false,
     "session": "editor-1", "language": "python"}      <- Umbra's extras, as extra body fields
 -> {"id": "cmpl-…", "object": "text_completion", "created": …, "model": "umbra-code-deep",
     "choices": [{"text": "a + b", "index": 0, "logprobs": null, "finish_reason": "stop"}, …],
     "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}}

`prompt` is the text before the cursor and `suffix` the text after it; without `suffix`, a
prompt laid out as a FIM template in text (`<fim_prefix>…<fim_suffix>…<fim_middle>`, what
Continue sends) is split into the two. Unset sampling fields take the server's `completion`
settings (lsp/options.py), as do Umbra's `multiline` and `context_tokens`. Choice j of each
prompt samples with `seed + j`, so one seed makes the whole response reproducible (and its
choice 0 equals the n = 1 response); without a seed each choice draws fresh randomness.
`finish_reason` is "length" when `max_tokens` ended the text, else "stop" (the end of the
middle, the line or block rule, or a stop sequence, which the text ends before). The choices
run one after another in one session — the request's `session`, kept warm like POST /v1/infill's,
or a throw-away one — so they share the prompt's cache.

Streaming: `text/event-stream`, each chunk a `text_completion` object whose choice carries the
text settled since the last (umbra/engine/completion_text.py: the chunks of a choice add up to
its non-streamed text), a last chunk per choice with its `finish_reason`, then a `usage` chunk
if `stream_options.include_usage`, then `data: [DONE]`. The response starts with the first
text, so an error before it still has its status code; a later one is the stream's last event
(OpenAI's error object; no [DONE]). A client that drops the stream cancels the completion: it
stops at its next decode step. The server counts such streams and the decode steps they ran
after the drop (`streams_dropped`, `steps_after_drop` in GET /healthz's `completions`)."""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import replace

from fastapi import APIRouter, Depends, Request, Response

from lsp.backend import Backend, Infill
from lsp.conversion import warn_unknown
from lsp.deps import get_backend
from lsp.disconnect import CLIENT_CLOSED, cancel_and_wait, unless_disconnected
from lsp.errors import Superseded
from lsp.event_stream import DONE, EventStream
from lsp.openai_errors import OpenAIRoute, error_body
from lsp.openai_schemas import Choice, Completion, CompletionRequest, Usage
from lsp.routes.models import check_model
from umbra.engine import CompletionResult, EngineConfig
from umbra.engine.fim import split_fim_text

router = APIRouter(route_class=OpenAIRoute)


@router.post("/v1/completions", response_model=None)
async def create_completion(body: CompletionRequest, request: Request,
                            backend: Backend = Depends(get_backend)) -> dict | Response:
    model = check_model(backend, body.model).id
    warn_unknown(sorted(body.model_extra or {}), what="field")
    infills = request_infills(body, backend)
    reply = Reply(body, model, infills)
    if body.stream:
        return await _stream(body, request, backend, infills, reply)
    task = asyncio.ensure_future(backend.complete_all(body.session, infills, body.language))
    if not await unless_disconnected(request.receive, task):
        return Response(status_code=CLIENT_CLOSED)
    if task.cancelled():  # not by us: a newer request on the same session took over
        raise Superseded(f"a newer request on session {body.session} replaced this one")
    return reply.completion(task.result())  # UmbraErrors -> OpenAIRoute's error objects


def request_infills(body: CompletionRequest, backend: Backend) -> list[Infill]:
    """One Infill per choice: prompt i's choice j is index i * n + j."""
    base = backend.options.completion.with_overrides(body.overrides()).engine_config()  # ConfigError -> 400
    infills = []
    for prompt in body.prompts:
        prefix, suffix = (prompt, body.suffix) if body.suffix is not None else split_fim_text(prompt) or (prompt, "")
        infills += [Infill(prefix, suffix, choice_config(base, body, j)) for j in range(body.n)]
    return infills


def choice_config(base: EngineConfig, body: CompletionRequest, j: int) -> EngineConfig:
    seed = None if body.seed is None else body.seed + j
    return replace(base, sampling=replace(base.sampling, seed=seed), stop=replace(base.stop, strings=body.stops))


class Reply:
    """The response objects of one request: the completion, or a stream's chunks."""

    def __init__(self, body: CompletionRequest, model: str, infills: list[Infill]):
        self.id = f"cmpl-{secrets.token_hex(12)}"
        self.created = int(time.time())
        self.model = model
        self.n = body.n
        self.echo = [body.prompts[k // body.n] if body.echo else "" for k in range(len(infills))]

    def completion(self, results: list[CompletionResult]) -> dict:
        choices = [Choice(text=self.echo[k] + r.text, index=k, finish_reason=finish_reason(r))
                   for k, r in enumerate(results)]
        return self._object(choices, usage(results, self.n))

    def chunk(self, index: int, text: str, finish: str | None = None) -> dict:
        return self._object([Choice(text=text, index=index, finish_reason=finish)])

    def usage_chunk(self, results: list[CompletionResult]) -> dict:
        return self._object([], usage(results, self.n))

    def _object(self, choices: list[Choice], usage: Usage | None = None) -> dict:
        return Completion(id=self.id, created=self.created, model=self.model, choices=choices,
                          usage=usage).model_dump(exclude=None if usage else {"usage"})


def finish_reason(result: CompletionResult) -> str:
    return "length" if result.stop_reason == "max_tokens" else "stop"


def usage(results: list[CompletionResult], n: int) -> Usage:
    prompt = sum(r.prompt_tokens for r in results[::n])  # each prompt once, however many choices
    generated = sum(r.generated_tokens for r in results)
    return Usage(prompt_tokens=prompt, completion_tokens=generated, total_tokens=prompt + generated,
                 umbra_round_trips=sum(r.round_trips for r in results))


class ChoiceEvents:
    """What a streamed request's completions report, queued for the response: text and ends
    of choices, then None once the request is over; `steps` counts decode steps."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()
        self.first = asyncio.get_running_loop().create_future()  # set with the first text or end
        self.steps = 0

    @property
    def reported(self) -> bool:
        return self.first.done()

    def text(self, index: int, delta: str) -> None:
        self.steps += 1
        if delta:
            self._put(("text", index, delta))

    def finished(self, index: int, result: CompletionResult) -> None:
        self._put(("end", index, result))

    def over(self, task: asyncio.Task) -> None:
        self.queue.put_nowait(None)

    def _put(self, item: tuple) -> None:
        self.queue.put_nowait(item)
        if not self.first.done():
            self.first.set_result(None)


async def _stream(body: CompletionRequest, request: Request, backend: Backend, infills: list[Infill],
                  reply: Reply) -> Response:
    events = ChoiceEvents()
    task = asyncio.ensure_future(backend.complete_all(body.session, infills, body.language, on_text=events.text,
                                                      on_result=events.finished))
    task.add_done_callback(events.over)
    if not await unless_disconnected(request.receive, task, ready=events.first):
        return Response(status_code=CLIENT_CLOSED)
    if task.done() and not events.reported:  # over before any text: a plain error response
        if task.cancelled():
            raise Superseded(f"a newer request on session {body.session} replaced this one")
        task.result()  # its UmbraError -> OpenAIRoute's error object, with its status
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    return EventStream(_chunks(events, task, reply, backend, include_usage, body.session))


async def _chunks(events: ChoiceEvents, task: asyncio.Task, reply: Reply, backend: Backend, include_usage: bool,
                  session: str | None):
    results: list[CompletionResult] = []
    started: set[int] = set()
    try:
        while (item := await events.queue.get()) is not None:
            kind, index, payload = item
            if index not in started:  # the choice's first chunk: its echoed prompt in front
                started.add(index)
                if reply.echo[index]:
                    yield reply.chunk(index, reply.echo[index])
            if kind == "text":
                yield reply.chunk(index, payload)
            else:
                results.append(payload)
                yield reply.chunk(index, "", finish_reason(payload))
        if task.cancelled():
            yield error_body(Superseded(f"a newer request on session {session} replaced this one"))
        elif task.exception() is not None:
            yield error_body(task.exception())
        else:
            if include_usage:
                yield reply.usage_chunk(results)
            yield DONE
    finally:
        if not task.done():  # the client went away (or the server is closing): stop the decode
            steps = events.steps
            await cancel_and_wait(task)
            backend.counts["streams_dropped"] += 1
            backend.counts["steps_after_drop"] += events.steps - steps
