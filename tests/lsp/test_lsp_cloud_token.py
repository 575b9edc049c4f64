"""The cloud token for a configured URL: the OS keyring entry `cloud-token:<url>` first, then
the environment variable named by `cloud.tokenEnv`, else a clear error (real keyring)."""

from __future__ import annotations

import pytest

from keys.cloud_tokens import cloud_token_name
from keys.errors import KeyStoreError
from lsp.cloud import cloud_token
from lsp.options import CloudOptions, InitializationOptions, ModelOptions
from umbra.errors import ConfigError

URL = "https://cloud.example:8443"


def _options(service: str, url: str = URL) -> InitializationOptions:
    return InitializationOptions(model=ModelOptions(keyring_service=service),
                                 cloud=CloudOptions(url=url, token_env="UMBRA_TEST_TOKEN")).validate()


def test_the_keyring_entry_wins_over_the_environment(keystore, monkeypatch):
    monkeypatch.setenv("UMBRA_TEST_TOKEN", "from-env")
    keystore.set(cloud_token_name(URL + "/"), b"from-keyring")  # trailing slashes name the same cloud
    assert cloud_token(_options(keystore.service)) == "from-keyring"
    assert cloud_token(_options(keystore.service, URL + "/")) == "from-keyring"
    assert cloud_token(_options(keystore.service, "https://other.example")) == "from-env"


def test_without_either_the_error_says_how_to_store_one(keystore, monkeypatch):
    monkeypatch.delenv("UMBRA_TEST_TOKEN", raising=False)
    with pytest.raises(ConfigError) as err:
        cloud_token(_options(keystore.service))
    message = str(err.value)
    assert f"no keyring entry 'cloud-token:{URL}'" in message and "$UMBRA_TEST_TOKEN is not set" in message
    assert f"umbra keys cloud-token set {URL}" in message


def test_entry_names_need_an_http_url():
    assert cloud_token_name(" http://127.0.0.1:9/// ") == "cloud-token:http://127.0.0.1:9"
    for bad in ("cloud.example", "https://", "ftp://x"):
        with pytest.raises(KeyStoreError):
            cloud_token_name(bad)
