"""Request and response bodies of the OpenAI-compatible API (OpenAI's legacy completions and
models objects), as pydantic models.

Request: OpenAI's fields, checked as OpenAI checks them, with three differences: `stop` takes
up to MAX_STOPS strings (OpenAI: 4 — editor plugins such as Continue send more); `n` times the
number of prompts is at most MAX_CHOICES (a local model on a laptop); a prompt is text, never
token ids (this client's ids are private: a bundle permutes them). Fields that would need what
Umbra does not compute — `logprobs`, `best_of` > 1, penalties, `logit_bias` — are refused with
a 400 naming them, never ignored. Umbra's extras ride along as extra body fields (the `openai`
client's `extra_body`): `session`, `language`, `multiline`, `context_tokens`. Any other field
is logged as unknown and ignored, as Umbra's own API does (lsp/options.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from lsp.fields import DocumentText, LanguageId, SessionId

MAX_STOPS = 16
MAX_STOP_CHARS = 256
MAX_CHOICES = 16
INT64 = 2 ** 63

StopString = Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    include_usage: bool = False  # a last chunk with `usage` and no choices, before [DONE]


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True, allow_inf_nan=False)

    model: str = Field(min_length=1, max_length=256)  # as GET /v1/models lists it
    # The text before the cursor (or a FIM template in text: umbra/engine/fim.py split_fim_text);
    # a list: one completion (times n) per prompt. Given as text or a list of texts.
    prompt: list[DocumentText]
    suffix: DocumentText | None = None  # the text after the cursor (fill-in-the-middle)
    max_tokens: int | None = Field(None, ge=1)  # null: the server's completion.maxTokens
    temperature: float | None = Field(None, ge=0, le=2)  # null: the server's; 0 = greedy
    top_p: float | None = Field(None, gt=0, le=1)  # null: the server's
    n: int = Field(1, ge=1, le=MAX_CHOICES)  # choices per prompt; choice j samples with seed + j
    stop: list[StopString] | None = None  # the text ends before the first of these (a string or a list)
    seed: int | None = Field(None, ge=-INT64, lt=INT64)  # null: fresh randomness per choice
    stream: bool = False  # server-sent events, ending with `data: [DONE]`
    stream_options: StreamOptions | None = None
    echo: bool = False  # the prompt in front of each choice's text
    user: str | None = Field(None, max_length=256)  # an end-user id (OpenAI's abuse monitoring); unused here
    logprobs: int | None = None
    best_of: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    # -- Umbra's extras ------------------------------------------------------------------------
    session: SessionId | None = None  # a warm session kept for prefix reuse (POST /v1/infill's)
    language: LanguageId | None = None  # the document's language: picks a bundle's expert
    multiline: bool | Literal["auto"] | None = None  # null: the server's completion.multiline
    context_tokens: int | None = Field(None, ge=1, alias="contextTokens")  # null: the server's

    @field_validator("prompt", mode="before")
    @classmethod
    def _texts(cls, value: object) -> object:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and value and not all(isinstance(item, str) for item in value):
            raise ValueError("must be text or a list of texts: token ids are not accepted (this client's "
                             "token ids are private)")
        if isinstance(value, list) and not value:
            raise ValueError("must not be an empty list")
        return value

    @field_validator("stop", mode="before")
    @classmethod
    def _stops(cls, value: object) -> object:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and len(value) > MAX_STOPS:
            raise ValueError(f"takes at most {MAX_STOPS} sequences, got {len(value)}")
        return value

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, value: int | None) -> None:
        if value is not None:
            raise ValueError("is not supported: Umbra does not return log probabilities")
        return value

    @field_validator("best_of")
    @classmethod
    def _no_best_of(cls, value: int | None) -> int | None:
        if value not in (None, 1):
            raise ValueError("is not supported (ranking choices needs log probabilities): use n")
        return value

    @field_validator("frequency_penalty", "presence_penalty")
    @classmethod
    def _no_penalty(cls, value: float | None) -> float | None:
        if value not in (None, 0):
            raise ValueError("is not supported: only 0 (or null)")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _no_bias(cls, value: dict | None) -> dict | None:
        if value:
            raise ValueError("is not supported: only {} (or null)")
        return value

    @model_validator(mode="after")
    def _choices(self) -> CompletionRequest:
        if self.n * len(self.prompts) > MAX_CHOICES:
            raise ValueError(f"n times the number of prompts must be at most {MAX_CHOICES}")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options needs stream: true")
        return self

    @property
    def prompts(self) -> list[str]:
        return self.prompt

    @property
    def stops(self) -> tuple[str, ...]:
        return tuple(self.stop or ())

    def overrides(self) -> dict:
        """The server's `completion` options this request changes (CompletionOptions.with_overrides)."""
        given = {"max_tokens": self.max_tokens, "temperature": self.temperature, "top_p": self.top_p,
                 "multiline": self.multiline, "context_tokens": self.context_tokens}
        return {key: value for key, value in given.items() if value is not None}


# -- responses -----------------------------------------------------------------------------------

FinishReason = Literal["stop", "length"]


class Choice(BaseModel):
    text: str
    index: int
    logprobs: None = None
    finish_reason: FinishReason | None  # null in a stream's chunks until the choice ends


class Usage(BaseModel):
    prompt_tokens: int  # tokens of each prompt as the model ran it (prefix, suffix, FIM markers)
    completion_tokens: int  # tokens generated, over every choice
    total_tokens: int
    umbra_round_trips: int = 0  # Umbra's extra: trips to the cloud over every choice (0 in process)


class Completion(BaseModel):
    """A response, and each chunk of a stream (OpenAI uses the one object for both)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage | None = None  # a response's; in a stream, only the last chunk's (include_usage)


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "umbra"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]
