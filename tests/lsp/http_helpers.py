"""Shared by the tests of the local completion HTTP server (`umbra serve`, lsp/http_app.py): its
settings against a given cloud, an authorized client, and the request every test sends."""

from __future__ import annotations

import secrets

import httpx
from lsp_helpers import API_TOKEN

from lsp.options import CompletionOptions
from lsp.settings import LocalSettings

TOKEN_ENV = "UMBRA_TEST_LOCAL_CLOUD_TOKEN"
DEFAULTS = CompletionOptions(max_tokens=48, multiline=True)
PREFIX = "import os\n\n\ndef add(a, b):\n    total = a + b\n    return "
SUFFIX = "\n\n\nprint(add(1, 2))\n"


def local_settings(model_dir, url: str | None, **extra) -> LocalSettings:
    """`umbra serve`'s settings completing through the cloud at `url` (None: self-started), its
    token from TOKEN_ENV, with DEFAULTS."""
    return LocalSettings(model_dir=model_dir, cloud_url=url, cloud_token_env=TOKEN_ENV, threads=1,
                         keyring_service=f"umbra-test-{secrets.token_hex(6)}",  # empty: the token comes from the env
                         max_tokens=DEFAULTS.max_tokens, multiline=DEFAULTS.multiline, **extra)


def authorized(url: str, timeout: float = 120, token: str = API_TOKEN) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, timeout=timeout, headers={"Authorization": f"Bearer {token}"})
