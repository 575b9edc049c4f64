"""InitializationOptions: what an editor configures, converted ONCE at `initialize`.

The client sends camelCase JSON (the contract the VS Code extension is built against):

    {
      "model":  {"dir": null, "bundle": null, "keyringService": "umbra"},
      "cloud":  {"url": null, "certificate": null, "tokenEnv": "UMBRA_CLOUD_TOKEN"},
      "completion": {"maxTokens": 64, "multiline": false, "temperature": 0.0, "topP": 1.0,
                     "contextTokens": 1024},
      "threads": null
    }

Every key is optional; a missing key or `null` means the default. Unknown keys, wrong types
and out-of-range values raise OptionsError naming the JSON path (`completion.maxTokens`).
The local HTTP server builds the same dataclasses from its settings (lsp/settings.py).

Never a token here: the cloud's bearer token comes from the OS keyring entry
`cloud-token:<url>` of `model.keyringService`, or else from the environment variable named by
`cloud.tokenEnv` (lsp/cloud.py)."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field

from lsp.errors import OptionsError
from umbra.engine import EngineConfig, PromptConfig, SamplingConfig, StopConfig
from umbra.errors import ConfigError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ModelOptions:
    # Hugging Face model directory; null = the embedded default (umbra.paths.default_model_dir()).
    # With a bundle: the public base model it was made from (null = the path the bundle recorded).
    dir: str | None = None
    # Client bundle directory made by `umbra init` (INDVocab table, sealed permutation); null = none.
    bundle: str | None = None
    # OS keyring service holding the bundle's key and the cloud tokens (`cloud-token:<url>`).
    keyring_service: str = "umbra"

    def validate(self) -> None:
        for name in ("dir", "bundle"):
            if getattr(self, name) == "":
                raise OptionsError(f"model.{name} must be a path or null, not an empty string")
        if not self.keyring_service:
            raise OptionsError("model.keyringService must be a non-empty string")


@dataclass(frozen=True)
class CloudOptions:
    # Cloud service URL (http:// or https://); null = start the real cloud service on 127.0.0.1
    # for the server's lifetime (still over the network, like `umbra complete`).
    url: str | None = None
    # PEM certificate to trust for an https:// cloud (e.g. `umbra cloud cert`); null = system CAs.
    certificate: str | None = None
    # Environment variable holding the bearer token when the keyring has no `cloud-token:<url>`.
    token_env: str = "UMBRA_CLOUD_TOKEN"

    def validate(self) -> None:
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise OptionsError(f"cloud.url must start with http:// or https://, got {self.url!r}")
        if self.certificate is not None and self.url is None:
            raise OptionsError("cloud.certificate applies to a configured cloud.url only")
        if self.certificate == "":
            raise OptionsError("cloud.certificate must be a path or null, not an empty string")
        if not _ENV_NAME.fullmatch(self.token_env):
            raise OptionsError(f"cloud.tokenEnv must be an environment variable name, got {self.token_env!r}")


@dataclass(frozen=True)
class CompletionOptions:
    max_tokens: int = 64  # most tokens one completion generates
    multiline: bool = False  # false: complete the current line; true: the block at the cursor
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0  # nucleus sampling mass (with temperature > 0)
    context_tokens: int = 1024  # tokens of file context (prefix + suffix) in the prompt

    def validate(self) -> None:
        if self.max_tokens < 1:
            raise OptionsError(f"completion.maxTokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise OptionsError(f"completion.temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise OptionsError(f"completion.topP must lie in (0, 1], got {self.top_p}")
        if self.context_tokens < 1:
            raise OptionsError(f"completion.contextTokens must be >= 1, got {self.context_tokens}")

    def engine_config(self) -> EngineConfig:
        """The engine's configuration for these options (ConfigError if it rejects them)."""
        self.validate()
        return EngineConfig(
            prompt=PromptConfig(budget=self.context_tokens),
            sampling=SamplingConfig(temperature=self.temperature, top_p=self.top_p),
            stop=StopConfig(max_tokens=self.max_tokens, multiline=self.multiline),
        ).validate()


@dataclass(frozen=True)
class InitializationOptions:
    model: ModelOptions = field(default_factory=ModelOptions)
    cloud: CloudOptions = field(default_factory=CloudOptions)
    completion: CompletionOptions = field(default_factory=CompletionOptions)
    # torch intra-op threads, here and in a self-started cloud; null = torch's default.
    threads: int | None = None

    def validate(self) -> InitializationOptions:
        self.model.validate()
        self.cloud.validate()
        self.completion.validate()
        if self.threads is not None and self.threads < 1:
            raise OptionsError(f"threads must be >= 1 or null, got {self.threads}")
        try:
            self.completion.engine_config()
        except ConfigError as exc:  # anything the engine refuses beyond the checks above
            raise OptionsError(f"completion: {exc}") from exc
        return self

    @classmethod
    def from_json(cls, data: object) -> InitializationOptions:
        """Convert the client's `initializationOptions` (None = all defaults); OptionsError on
        unknown keys, wrong types or invalid values."""
        return _build(cls, data, "").validate()


def camel(name: str) -> str:
    """snake_case field name -> the camelCase JSON key ("top_p" -> "topP")."""
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def _build(cls: type, data: object, path: str):
    where = path or "initializationOptions"
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise OptionsError(f"{where} must be an object, got {_json_type(data)}")
    fields = {camel(f.name): f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        names = ", ".join(f"{path}.{k}" if path else k for k in unknown)
        raise OptionsError(f"unknown option {names} (known in {where}: {', '.join(fields)})")
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in data.items():
        f = fields[key]
        dotted = f"{path}.{key}" if path else key
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            values[f.name] = _build(hint, value, dotted)
        elif value is not None:  # null = the default
            values[f.name] = _scalar(value, hint, dotted)
    return cls(**values)


def _scalar(value: object, hint: object, path: str):
    allowed = [t for t in typing.get_args(hint) if t is not type(None)] if isinstance(hint, types.UnionType) else [hint]
    kind = allowed[0]
    if kind is bool and isinstance(value, bool):
        return value
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is str and isinstance(value, str):
        return value
    expected = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}[kind]
    raise OptionsError(f"{path} must be {expected}, got {_json_type(value)}")


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)
