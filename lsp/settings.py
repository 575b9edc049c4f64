"""Settings of the local completion HTTP server (`umbra serve`): the shared options schema
(lsp/options.py) plus the server's own fields, from UMBRA_LOCAL_* environment variables,
overridable by `umbra serve` flags; handlers read them through the `get_settings` dependency.
Never a token here (see lsp/cloud.py).

Variables name a field of the schema, nested with `__`; lists and maps are JSON:

    UMBRA_LOCAL_PORT=8765                         # server-only fields: host, port, max_sessions,
    UMBRA_LOCAL_COMPLETION__MAX_TOKENS=32         #   auth, token_file, max_body_bytes
    UMBRA_LOCAL_COMPLETION__LANGUAGES='["python", "go"]'
    UMBRA_LOCAL_LANGUAGES__ALIASES='{"golang": "go"}'
    UMBRA_LOCAL_COMPLETION='{"maxTokens": 32, "multiline": true}'   # a whole section as JSON

The older flat names keep working (FLAT: UMBRA_LOCAL_CLOUD_URL, UMBRA_LOCAL_MAX_TOKENS,
UMBRA_LOCAL_BUNDLE, ...; also as keyword arguments, which is how the `umbra serve` flags
arrive); where a nested and a flat variable name the same option, the nested one wins, and a
keyword argument wins over both. A bad value is an OptionsError naming its JSON path
(`completion.maxTokens must be >= 1, got 0`); an unknown UMBRA_LOCAL_* variable is a warning
and ignored."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from lsp.conversion import options_error, section, warn_unknown
from lsp.errors import OptionsError
from lsp.options import (
    CloudOptions,
    CompletionOptions,
    InitializationOptions,
    ContextOptions,
    InlineOptions,
    LanguageOptions,
    ModelOptions,
    Threads,
)
from umbra.edge import EdgeLimits

PREFIX = "UMBRA_LOCAL_"
DELIMITER = "__"

# Older flat names (UMBRA_LOCAL_<NAME> and keyword arguments / `umbra serve` flags) -> the
# option's place in the schema.
FLAT: dict[str, tuple[str, str]] = {
    "model_dir": ("model", "dir"),
    "bundle": ("model", "bundle"),
    "keyring_service": ("model", "keyring_service"),
    "dtype": ("model", "dtype"),
    "cloud_url": ("cloud", "url"),
    "cloud_certificate": ("cloud", "certificate"),
    "cloud_token_env": ("cloud", "token_env"),
    "max_tokens": ("completion", "max_tokens"),
    "multiline": ("completion", "multiline"),
    "temperature": ("completion", "temperature"),
    "top_p": ("completion", "top_p"),
    "context_tokens": ("completion", "context_tokens"),
}


class LocalSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, env_nested_delimiter=DELIMITER, extra="ignore",
                                      protected_namespaces=())

    # -- the server's own ----------------------------------------------------------------------
    host: str = "127.0.0.1"  # anything but loopback exposes completions to the network
    port: int = Field(8765, ge=0, le=65535)  # 0 = any free port
    max_sessions: int = Field(16, ge=1)  # warm sessions kept (LRU); each holds one cloud session
    auth: bool = True  # require the bearer token made at start (lsp/api_auth.py); false: anyone local
    token_file: Path | None = None  # where that token is written (default $XDG_RUNTIME_DIR/umbra/serve-PORT.token)
    # Largest request body (413 past it, before the token is looked at: umbra/edge.py).
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)

    # -- the shared schema: exactly InitializationOptions' fields (lsp/options.py) ----------------
    model: ModelOptions = Field(default_factory=ModelOptions)
    cloud: CloudOptions = Field(default_factory=CloudOptions)
    completion: CompletionOptions = Field(default_factory=CompletionOptions)  # request defaults
    languages: LanguageOptions = Field(default_factory=LanguageOptions)
    inline: InlineOptions = Field(default_factory=InlineOptions)  # the language server's; unused here
    context: ContextOptions = Field(default_factory=ContextOptions)  # the language server's; unused here
    threads: Threads = None
    allow_undefended_remote_cloud: bool = False  # the opt-in of umbra/privacy/cloud_policy.py
    client_only: bool = False  # the client's blocks alone: no cloud at all (UMBRA_LOCAL_CLIENT_ONLY=true)

    def __init__(self, **values: Any) -> None:
        warn_unknown(unknown_variables(os.environ), what="setting")
        try:
            super().__init__(**nest_flat(values))
        except ValidationError as exc:
            raise options_error(exc, LocalSettings) from None
        except SettingsError as exc:  # a list or map variable that is not JSON
            raise OptionsError(f"{exc}: {exc.__cause__}" if exc.__cause__ else str(exc)) from None

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        return init_settings, env_settings, FlatEnvSource(settings_cls), dotenv_settings, file_secret_settings

    def edge_limits(self) -> EdgeLimits:
        """What a connection may cost before its token is checked (bodies, headers, their time)."""
        return EdgeLimits(max_json_bytes=self.max_body_bytes)

    def options(self) -> InitializationOptions:
        """The backend's options (OptionsError if the engine refuses them)."""
        return InitializationOptions(**{name: getattr(self, name)
                                        for name in InitializationOptions.model_fields}).validate()


class FlatEnvSource(PydanticBaseSettingsSource):
    """The older flat variables (FLAT), as the nested values they name."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads the variables itself

    def __call__(self) -> dict[str, Any]:
        env = {name.upper(): value for name, value in os.environ.items()}
        return nest_flat({flat: env[PREFIX + flat.upper()] for flat in FLAT if PREFIX + flat.upper() in env})


def nest_flat(values: dict[str, Any]) -> dict[str, Any]:
    """`values` with each flat name (FLAT) moved to its section: {"cloud_url": u} -> {"cloud": {"url": u}}."""
    out = {key: value for key, value in values.items() if key not in FLAT}
    for flat, (name, field) in FLAT.items():
        if flat in values:
            given = out.get(name) or {}
            given = given.model_dump() if hasattr(given, "model_dump") else dict(given)
            value = values[flat]
            out[name] = {**given, field: os.fspath(value) if isinstance(value, os.PathLike) else value}
    return out


def unknown_variables(environ: dict[str, str]) -> list[str]:
    """The UMBRA_LOCAL_* variables that name no setting (names are case-insensitive)."""
    unknown = []
    for variable in environ:
        if not variable.upper().startswith(PREFIX):
            continue
        parts = variable[len(PREFIX):].lower().split(DELIMITER)
        cls: type | None = LocalSettings
        if len(parts) == 1 and parts[0] in FLAT:
            continue
        for part in parts:
            if cls is None:  # below a field that is no section: a map's keys
                break
            if part not in cls.model_fields:
                unknown.append(variable)
                break
            cls = section(cls, part)
    return unknown


@lru_cache(maxsize=1)
def get_settings() -> LocalSettings:
    """FastAPI dependency; `create_app(settings)` overrides it with the given settings."""
    return LocalSettings()
