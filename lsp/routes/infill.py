"""POST /v1/infill: Umbra's own completion API — one completion at the cursor between `prefix`
and `suffix`, with what the engine did (reuse, timings, the expert that served). (Until the
OpenAI-compatible API took POST /v1/completions — lsp/routes/openai_completions.py — this was
POST /v1/completions; the body and response are unchanged.)

    {"prefix": "...", "suffix": "...", "language"?: "python", "session"?: "editor-1-file-7",
     "maxTokens"?: 64, "multiline"?: false, "temperature"?: 0.0, "topP"?: 1.0, "contextTokens"?: 1024}
 -> {"completion": "...", "stopReason": "newline", "promptTokens": 212, "reusedTokens": 205,
     "recomputedTokens": 7, "generatedTokens": 5, "prefillSeconds": ..., "decodeSeconds": ...,
     "evicted": false, "session": "editor-1-file-7", "language": "python", "expert": "python"}

Every key besides prefix, suffix, language and session overrides the server's `completion`
options for this request: the same schema (lsp/options.py), camelCase or snake_case names, a bad
value 422 naming it (`maxTokens must be >= 1, got 0`), an unknown key a logged warning and
ignored; `languages` is a server setting only. `session` names a warm session kept for prefix
reuse (choose unguessable ids: reusedTokens tells how much of a prompt matches the session's
cache); without it the request runs in a throw-away session. A newer request on the same
session cancels the older one (409 for the older). If the HTTP client disconnects, the
completion is cancelled. Never token ids in the response. `language` (an editor id or alias:
`py`, `golang`, ...) picks the request's expert adapter (umbra/engine/routing.py); the response
names the canonical language and the expert that served (null: the shared adapters only). A
language that `completion.languages` leaves out is a 422."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict

from lsp.backend import Backend
from lsp.deps import get_backend
from lsp.disconnect import CLIENT_CLOSED, unless_disconnected
from lsp.errors import Superseded
from lsp.fields import DocumentText, LanguageId, SessionId
from umbra.engine import CompletionResult

router = APIRouter()


class InfillRequest(BaseModel):
    # Keys besides these are the request's `completion` overrides (`model_extra`), validated by
    # CompletionOptions.with_overrides.
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)

    prefix: DocumentText  # the document's text before the cursor
    suffix: DocumentText  # the document's text after the cursor
    language: LanguageId | None = None  # the document's language; null = none
    session: SessionId | None = None  # a warm session kept for prefix reuse; null = a throw-away session


def response_body(result: CompletionResult, session: str | None) -> dict:
    return {
        "completion": result.text,
        "stopReason": result.stop_reason,
        "promptTokens": result.prompt_tokens,
        "reusedTokens": result.reused_tokens,
        "recomputedTokens": result.recomputed_tokens,
        "generatedTokens": result.generated_tokens,
        "template": result.template,
        "prefillSeconds": round(result.prefill_seconds, 6),
        "decodeSeconds": round(result.decode_seconds, 6),
        "evicted": result.evicted,
        "roundTrips": result.round_trips,  # trips to the cloud for this completion (0 in process)
        "session": session,
        "language": result.language,
        "expert": result.expert,
        "access": result.access,
    }


@router.post("/v1/infill", response_model=None)
async def create_infill(body: InfillRequest, request: Request,
                        backend: Backend = Depends(get_backend)) -> dict | Response:
    options = backend.options.completion.with_overrides(body.model_extra or {})  # OptionsError -> 422
    config = options.engine_config()  # ConfigError -> 422
    task = asyncio.ensure_future(backend.complete(body.session, body.prefix, body.suffix, config,
                                                  language=body.language))
    if not await unless_disconnected(request.receive, task):
        return Response(status_code=CLIENT_CLOSED)
    if task.cancelled():  # not by us: a newer request on the same session took over
        raise Superseded(f"a newer request on session {body.session} replaced this one")
    return response_body(task.result(), body.session)  # UmbraErrors -> the app's handler

