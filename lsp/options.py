"""The options schema: what an editor, `umbra serve` and each HTTP request configure — one set of
pydantic models, converted ONCE at the boundary into frozen typed options (lsp/conversion.py).

Three sources, one schema:
  * the language server's LSP `initializationOptions`, camelCase JSON (the contract the VS Code
    extension is built against; snake_case names are accepted too):

        {
          "model":  {"dir": null, "bundle": null, "keyringService": "umbra", "dtype": "fp32"},
          "cloud":  {"url": null, "certificate": null, "tokenEnv": "UMBRA_CLOUD_TOKEN"},
          "completion": {"maxTokens": 64, "multiline": "auto", "temperature": 0.0, "topP": 1.0,
                         "contextTokens": 1024, "languages": null},
          "inline": {"deadlineMs": 250, "deadlineGraceMs": 1750, "repetitionTokens": 12,
                     "contextTokens": 512},
          "context": {"enabled": false, "tokens": 384, "maxFiles": 5, "exclude": [".env globs", ...]},
          "languages": {"aliases": {"golang": "go", "py": "python", ...}},
          "threads": null,
          "allowUndefendedRemoteCloud": false,
          "clientOnly": false
        }

  * `umbra serve`'s UMBRA_LOCAL_* environment variables (lsp/settings.py), nested with `__`
    (UMBRA_LOCAL_COMPLETION__MAX_TOKENS=32, lists and maps as JSON) or by their older flat names
    (UMBRA_LOCAL_MAX_TOKENS, UMBRA_LOCAL_CLOUD_URL, ...);
  * the per-request overrides of POST /v1/infill (and the OpenAI API's `max_tokens`,
    `temperature`, `top_p`, ...): the `completion` part, validated per
    request (`CompletionOptions.with_overrides`).

`inline` applies to the language server's editor requests only (textDocument/inlineCompletion
and textDocument/completion: what a user waits for while typing); the HTTP APIs complete as the
caller asks, up to `max_tokens` and the `stop` strings.

Every key is optional; a missing key or `null` means the default. JSON values must have their
JSON type (no "1" for 1, no 1 for true). A bad value raises OptionsError naming its JSON path, one
line per error (`completion.maxTokens must be >= 1, got 0`). An unknown key is a warning, logged
once through the `umbra.lsp` logger (the language server also sends it to the editor), and is
ignored: a newer editor extension must not break an older server.

Never a token here: the cloud's bearer token comes from the OS keyring entry
`cloud-token:<url>` of `model.keyringService`, or else from the environment variable named by
`cloud.tokenEnv` (lsp/cloud.py)."""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel

from lsp.conversion import convert, field_name, json_type
from lsp.errors import OptionsError
from umbra.engine import EngineConfig, PromptConfig, SamplingConfig, StopConfig
from umbra.engine.config import MAX_TEMPERATURE
from umbra.engine.context import ContextConfig
from umbra.engine.context_exclusions import DEFAULT_EXCLUDE
from umbra.engine.routing import LANGUAGE_ALIASES, canonical_language
from umbra.errors import ConfigError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_BOOLEANS = {**dict.fromkeys(("1", "true", "yes", "on"), True), **dict.fromkeys(("0", "false", "no", "off"), False)}

# Editor language ids and aliases -> the canonical language name: the router's own table
# (umbra/engine/routing.py), one source for both. `languages.aliases` is merged over it.
DEFAULT_ALIASES: Mapping[str, str] = types.MappingProxyType(dict(LANGUAGE_ALIASES))

NonEmpty = Annotated[str, Field(min_length=1)]
# torch intra-op threads, here and in a self-started cloud; null = torch's default.
Threads = Annotated[int | None, Field(ge=1)]


class _Options(BaseModel):
    """Base of every section: camelCase JSON names (snake_case accepted too), frozen, unknown
    keys ignored (`convert` warns about them first)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore",
                              allow_inf_nan=False)


class ModelOptions(_Options):
    # Hugging Face model directory; null = the embedded default (umbra.paths.default_model_dir()).
    # With a bundle: the public base model it was made from (null = the path the bundle recorded).
    dir: str | None = None
    # Client bundle directory made by `umbra init` (INDVocab table, sealed permutation); null = none.
    bundle: str | None = None
    # OS keyring service holding the bundle's key and the cloud tokens (`cloud-token:<url>`).
    keyring_service: NonEmpty = "umbra"
    # The client's compute dtype, and the hidden states' on the wire (a self-started cloud computes
    # the middle in it too): "fp32" or "bf16" (a real-size model's halved memory), as `umbra complete --dtype`.
    dtype: Literal["fp32", "bf16"] = "fp32"

    @field_validator("dir", "bundle")
    @classmethod
    def _a_path(cls, value: str | None) -> str | None:
        if value == "":
            raise ValueError("must be a path or null, not an empty string")
        return value


class CloudOptions(_Options):
    # Cloud service URL (http:// or https://); null = start the real cloud service on 127.0.0.1
    # for the server's lifetime (still over the network, like `umbra complete`).
    url: str | None = None
    # PEM certificate to trust for an https:// cloud (e.g. `umbra cloud cert`); null = system CAs.
    certificate: str | None = None
    # Environment variable holding the bearer token when the keyring has no `cloud-token:<url>`.
    token_env: str = "UMBRA_CLOUD_TOKEN"

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"must start with http:// or https://, got {value!r}")
        return value

    @field_validator("certificate")
    @classmethod
    def _certificate_of_a_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value == "":
            raise ValueError("must be a path or null, not an empty string")
        if value is not None and "url" in info.data and info.data["url"] is None:
            raise ValueError("applies to a configured cloud.url only")
        return value

    @field_validator("token_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not _ENV_NAME.fullmatch(value):
            raise ValueError(f"must be an environment variable name, got {value!r}")
        return value


class CompletionOptions(_Options):
    # Most tokens one completion generates.
    max_tokens: int = Field(64, ge=1)
    # false: complete the current line; true: the block at the cursor; "auto": the rest of the
    # line mid-line, and at a blank line the block started there, up to a dedent out of it or a
    # blank line (umbra/engine/stops.py).
    multiline: bool | Literal["auto"] = "auto"
    # Sampling temperature; 0 = greedy.
    temperature: float = Field(0.0, ge=0, le=MAX_TEMPERATURE)
    # Nucleus sampling mass (with temperature > 0).
    top_p: float = Field(1.0, gt=0, le=1)
    # Tokens of file context (prefix + suffix) in the prompt.
    context_tokens: int = Field(1024, ge=1)
    # Canonical names of the languages the server completes (after `languages.aliases`, e.g.
    # ["python", "go"]); null = all. A server setting: a request cannot override it.
    languages: tuple[NonEmpty, ...] | None = None

    @field_validator("multiline", mode="before")
    @classmethod
    def _line_mode(cls, value: object, info: ValidationInfo) -> object:
        if value is True or value is False or value == "auto":
            return value
        if info.mode == "python" and isinstance(value, str) and value.lower() in _ENV_BOOLEANS:
            return _ENV_BOOLEANS[value.lower()]  # an environment variable's text (lsp/settings.py)
        raise ValueError(f'must be true, false or "auto", got {json_type(value)}')

    def validate(self) -> CompletionOptions:
        """The engine's own checks (ConfigError); returns self."""
        self.engine_config()
        return self

    def engine_config(self) -> EngineConfig:
        """The engine's configuration for these options (ConfigError if it rejects them)."""
        return EngineConfig(
            prompt=PromptConfig(budget=self.context_tokens),
            sampling=SamplingConfig(temperature=self.temperature, top_p=self.top_p),
            stop=StopConfig(max_tokens=self.max_tokens, multiline=self.multiline),
        ).validate()

    def with_overrides(self, overrides: Mapping[str, object], warn: Callable[[str], None] | None = None
                       ) -> CompletionOptions:
        """These options with one request's overrides (camelCase or snake_case keys of this
        schema; null = keep). OptionsError naming the key if a value is bad; unknown keys are
        warned about and ignored."""
        if "languages" in overrides:
            raise OptionsError("languages is a server setting (completion.languages), not a per-request option")
        names = {key: field_name(CompletionOptions, key) for key in overrides}
        data = self.model_dump()
        data.update({names[key]: value for key, value in overrides.items()
                     if names[key] is not None and value is not None})
        return convert(CompletionOptions, data, warn=warn, unknown=[key for key, name in names.items() if name is None])


class InlineOptions(_Options):
    # Milliseconds from an editor request's arrival after which its decode stops and the text so
    # far is the answer, trimmed to its last whole line or word; 0 = no deadline. The prompt
    # always runs in full (its caches serve the next keystroke). A target: when it passes before
    # the text holds a whole word or line, decoding goes on to the first one (deadlineGraceMs).
    deadline_ms: int = Field(250, ge=0)
    # How long past deadlineMs a decode whose text holds no whole word yet may go on to reach
    # one; then it stops whatever it holds (often nothing). 0 = stop at the deadline.
    deadline_grace_ms: int = Field(1750, ge=0)
    # Stop a degenerate loop once this many generated tokens (or more) repeat one unit of at most
    # a third as many, keeping one copy of it (umbra/engine/repetition.py); 0 = off.
    repetition_tokens: int = Field(12, ge=0)
    # Most tokens of file context in an editor request's prompt (the smaller of this and
    # completion.contextTokens): sized to the deadline, so a model with a long window does not
    # spend a keystroke's budget on a prefill of all of it (docs/data.md: the deep model).
    context_tokens: int = Field(512, ge=1)

    @field_validator("repetition_tokens")
    @classmethod
    def _off_or_three(cls, value: int) -> int:
        if 0 < value < 3:
            raise ValueError(f"must be 0 (off) or >= 3, got {value}")
        return value

    @property
    def deadline_s(self) -> float | None:
        """The deadline in seconds after a request's arrival; None for none."""
        return self.deadline_ms / 1000 if self.deadline_ms else None

    def engine_config(self, completion: EngineConfig) -> EngineConfig:
        """`completion` (the completion section's config) with this section's stop rules."""
        prompt = replace(completion.prompt, budget=min(completion.prompt.budget, self.context_tokens))
        stop = replace(completion.stop, repetition=self.repetition_tokens, deadline_grace=self.deadline_grace_ms / 1000)
        return replace(completion, prompt=prompt, stop=stop)


class ContextOptions(_Options):
    # Snippets of the other open documents in the editor's prompts (umbra/engine/context.py): the
    # files the current one imports, same language, most like the code above the cursor. Off by
    # default: on the line benchmark's --repo mode the deep default model, trained on such
    # repository sequences, does not complete more lines with it (docs/benchmarks.md).
    enabled: bool = False
    # Most prompt tokens of context (at most half of the prompt; the file's own budget shrinks by as much).
    tokens: int = Field(384, ge=1)
    # Most open files that lend a snippet.
    max_files: int = Field(5, ge=1)
    # Globs of files never used (the extension's `umbra.exclude` semantics; default: its default).
    # Files the workspace's .gitignore ignores and documents holding a secret are never used either.
    exclude: tuple[NonEmpty, ...] = DEFAULT_EXCLUDE

    def engine_config(self) -> ContextConfig:
        return ContextConfig(enabled=self.enabled, tokens=self.tokens, max_files=self.max_files).validate()


class LanguageOptions(_Options):
    # Editor language id or alias -> canonical language name ({"golang": "go", "py": "python"}),
    # merged over DEFAULT_ALIASES (map an id to itself to drop a default). Used to name a
    # document's language in `completion.languages` and for routing to per-language experts.
    aliases: dict[str, NonEmpty] = Field(default_factory=lambda: dict(DEFAULT_ALIASES))

    @field_validator("aliases")
    @classmethod
    def _over_the_defaults(cls, value: dict[str, str]) -> dict[str, str]:
        return {**DEFAULT_ALIASES, **value}

    def canonical(self, language: str | None) -> str | None:
        """The canonical name of an editor language id (the id itself, lower-cased, when no alias
        names it); None for none."""
        return canonical_language(language, self.aliases)


class InitializationOptions(_Options):
    # The client model: plain directory or bundle, and the keyring service of its key.
    model: ModelOptions = Field(default_factory=ModelOptions)
    # Where the middle blocks run: a configured URL or a self-started loopback cloud.
    cloud: CloudOptions = Field(default_factory=CloudOptions)
    # How completions are made (HTTP requests may override all but `languages`).
    completion: CompletionOptions = Field(default_factory=CompletionOptions)
    # What the language server's editor requests add: a latency deadline, the loop stop.
    inline: InlineOptions = Field(default_factory=InlineOptions)
    # Context from the other open documents (the language server's editor requests only).
    context: ContextOptions = Field(default_factory=ContextOptions)
    # Language names: aliases of editor language ids.
    languages: LanguageOptions = Field(default_factory=LanguageOptions)
    # torch intra-op threads, here and in a self-started cloud; null = torch's default.
    threads: Threads = None
    # Send hidden states whose privacy mode is not defended (e.g. no bundle: the cloud reads ~99.9 %
    # of tokens) to a `cloud.url` that is not on this machine. Off: such a cloud is refused
    # (umbra/privacy/cloud_policy.py; UMBRA_ALLOW_UNDEFENDED_REMOTE_CLOUD=1 also opts in).
    allow_undefended_remote_cloud: bool = False
    # The client's blocks alone, the middle skipped (umbra/engine/client_only.py): no cloud is
    # started, looked up or connected to, nothing is sent anywhere; `cloud` is then unused.
    client_only: bool = False

    def validate(self) -> InitializationOptions:
        """Checks beyond the schema: the engine's own (OptionsError); returns self."""
        try:
            self.completion.engine_config()
        except ConfigError as exc:  # anything the engine refuses beyond the schema's bounds
            raise OptionsError(f"completion: {exc}") from exc
        return self

    @classmethod
    def from_json(cls, data: object, warn: Callable[[str], None] | None = None) -> InitializationOptions:
        """Convert the client's `initializationOptions` (None = all defaults). OptionsError on
        wrong types or invalid values; unknown keys are logged (and passed to `warn`) and
        ignored."""
        return convert(cls, {} if data is None else data, warn=warn, root="initializationOptions").validate()
