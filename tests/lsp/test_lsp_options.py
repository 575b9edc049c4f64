"""InitializationOptions: the JSON contract with the editors (names, defaults), camelCase
conversion, null = default, and clear errors for unknown keys, wrong types and bad values; the
HTTP server's settings map onto the same options."""

from __future__ import annotations

import dataclasses

import pytest

from lsp.errors import OptionsError
from lsp.options import CompletionOptions, InitializationOptions, camel
from lsp.settings import LocalSettings
from umbra.engine import EngineConfig

CONTRACT = {  # what the VS Code extension sends; names and defaults must not drift
    "model": {"dir": None, "bundle": None, "keyringService": "umbra"},
    "cloud": {"url": None, "certificate": None, "tokenEnv": "UMBRA_CLOUD_TOKEN"},
    "completion": {"maxTokens": 64, "multiline": False, "temperature": 0.0, "topP": 1.0, "contextTokens": 1024},
    "threads": None,
}


def _as_json(value):
    if dataclasses.is_dataclass(value):
        return {camel(f.name): _as_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def test_defaults_are_the_contract():
    assert _as_json(InitializationOptions()) == CONTRACT
    assert InitializationOptions.from_json(None) == InitializationOptions.from_json({}) == InitializationOptions()
    assert InitializationOptions.from_json(CONTRACT) == InitializationOptions()


def test_completion_defaults_are_the_engines():
    assert CompletionOptions().engine_config() == EngineConfig()


def test_camel_case_keys_convert_once_into_typed_fields():
    options = InitializationOptions.from_json({
        "model": {"dir": "/m", "bundle": "/b", "keyringService": "work"},
        "cloud": {"url": "https://cloud.example:8443", "certificate": "/c.pem", "tokenEnv": "MY_TOKEN"},
        "completion": {"maxTokens": 12, "multiline": True, "temperature": 1, "topP": 0.5, "contextTokens": 256},
        "threads": 2,
    })
    assert options.model.keyring_service == "work" and options.cloud.token_env == "MY_TOKEN"
    assert options.completion.temperature == 1.0 and isinstance(options.completion.temperature, float)
    config = options.completion.engine_config()
    assert (config.stop.max_tokens, config.stop.multiline, config.sampling.top_p, config.prompt.budget) == (12, True, 0.5, 256)
    assert options.threads == 2


def test_null_means_the_default():
    options = InitializationOptions.from_json({"completion": {"maxTokens": None}, "model": None, "threads": None})
    assert options == InitializationOptions()


@pytest.mark.parametrize("data, message", [
    ({"modle": {}}, "unknown option modle (known in initializationOptions: model, cloud, completion, threads)"),
    ({"completion": {"maxTokns": 8, "top_p": 1}}, "unknown option completion.maxTokns, completion.top_p"),
    ({"cloud": {"token": "secret"}}, "unknown option cloud.token"),  # never a token in settings
    ([], "initializationOptions must be an object, got an array"),
    ({"completion": 5}, "completion must be an object, got an integer"),
    ({"completion": {"maxTokens": 8.0}}, "completion.maxTokens must be an integer, got a number"),
    ({"completion": {"maxTokens": True}}, "completion.maxTokens must be an integer, got a boolean"),
    ({"completion": {"multiline": 1}}, "completion.multiline must be a boolean, got an integer"),
    ({"completion": {"topP": "1"}}, "completion.topP must be a number, got a string"),
    ({"model": {"dir": 3}}, "model.dir must be a string, got an integer"),
    ({"completion": {"maxTokens": 0}}, "completion.maxTokens must be >= 1"),
    ({"completion": {"temperature": -0.1}}, "completion.temperature must be >= 0"),
    ({"completion": {"topP": 0}}, "completion.topP must lie in (0, 1]"),
    ({"completion": {"contextTokens": 0}}, "completion.contextTokens must be >= 1"),
    ({"threads": 0}, "threads must be >= 1 or null"),
    ({"cloud": {"url": "cloud.example"}}, "cloud.url must start with http:// or https://"),
    ({"cloud": {"certificate": "/c.pem"}}, "cloud.certificate applies to a configured cloud.url only"),
    ({"cloud": {"tokenEnv": "MY-TOKEN"}}, "cloud.tokenEnv must be an environment variable name"),
    ({"model": {"keyringService": ""}}, "model.keyringService must be a non-empty string"),
    ({"model": {"dir": ""}}, "model.dir must be a path or null"),
])
def test_invalid_options_name_the_json_path(data, message):
    with pytest.raises(OptionsError) as err:
        InitializationOptions.from_json(data)
    assert message in str(err.value)


def test_http_settings_map_onto_the_same_options(monkeypatch, tmp_path):
    monkeypatch.setenv("UMBRA_LOCAL_MAX_TOKENS", "12")
    monkeypatch.setenv("UMBRA_LOCAL_CLOUD_URL", "https://cloud.example")
    monkeypatch.setenv("UMBRA_LOCAL_CLOUD_TOKEN_ENV", "MY_TOKEN")
    options = LocalSettings(model_dir=tmp_path, top_p=0.5).options()
    assert options.completion == CompletionOptions(max_tokens=12, top_p=0.5)
    assert options.cloud.url == "https://cloud.example" and options.cloud.token_env == "MY_TOKEN"
    assert options.model.dir == str(tmp_path) and options.model.bundle is None
    assert LocalSettings().host == "127.0.0.1" and LocalSettings().port == 8765
    monkeypatch.setenv("UMBRA_LOCAL_TEMPERATURE", "-1")
    with pytest.raises(OptionsError, match="temperature must be >= 0"):
        LocalSettings().options()
