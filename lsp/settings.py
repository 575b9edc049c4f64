"""Settings of the local completion HTTP server: environment variables prefixed UMBRA_LOCAL_
(e.g. UMBRA_LOCAL_CLOUD_URL), overridable by `umbra serve` flags; handlers read them through
the `get_settings` dependency. They map onto the language server's InitializationOptions, so
both servers configure the backend the same way; never a token here (see lsp/cloud.py)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from lsp.options import (
    CloudOptions,
    CompletionOptions,
    InitializationOptions,
    ModelOptions,
)

_M, _C, _G = ModelOptions(), CloudOptions(), CompletionOptions()


class LocalSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="UMBRA_LOCAL_", extra="ignore", protected_namespaces=())

    host: str = "127.0.0.1"  # anything but loopback exposes completions to the network
    port: int = Field(8765, ge=0, le=65535)  # 0 = any free port
    model_dir: Path | None = None  # null: the embedded default model (bundle: its base model)
    bundle: Path | None = None  # client bundle from `umbra init`
    keyring_service: str = _M.keyring_service
    cloud_url: str | None = None  # null: start the real cloud on 127.0.0.1 for the server's lifetime
    cloud_certificate: Path | None = None  # PEM to trust for an https cloud
    cloud_token_env: str = _C.token_env  # variable holding the token if the keyring has none
    max_tokens: int = _G.max_tokens  # request defaults (each request may override)
    multiline: bool = _G.multiline
    temperature: float = _G.temperature
    top_p: float = _G.top_p
    context_tokens: int = _G.context_tokens
    threads: int | None = None  # torch intra-op threads here and in a self-started cloud
    max_sessions: int = Field(16, ge=1)  # warm sessions kept (LRU); each holds one cloud session
    auth: bool = True  # require the bearer token made at start (lsp/api_auth.py); false: anyone local
    token_file: Path | None = None  # where that token is written (default $XDG_RUNTIME_DIR/umbra/serve-PORT.token)

    def options(self) -> InitializationOptions:
        """The backend's options (OptionsError on invalid values)."""
        return InitializationOptions(
            model=ModelOptions(dir=_str(self.model_dir), bundle=_str(self.bundle), keyring_service=self.keyring_service),
            cloud=CloudOptions(url=self.cloud_url, certificate=_str(self.cloud_certificate), token_env=self.cloud_token_env),
            completion=CompletionOptions(max_tokens=self.max_tokens, multiline=self.multiline,
                                         temperature=self.temperature, top_p=self.top_p,
                                         context_tokens=self.context_tokens),
            threads=self.threads,
        ).validate()


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)


@lru_cache(maxsize=1)
def get_settings() -> LocalSettings:
    """FastAPI dependency; `create_app(settings)` overrides it with the given settings."""
    return LocalSettings()
