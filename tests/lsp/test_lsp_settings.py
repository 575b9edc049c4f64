"""LocalSettings (lsp/settings.py): `umbra serve`'s UMBRA_LOCAL_* variables onto the same options
schema as the editors' — nested with `__`, the older flat names, lists and maps as JSON, keyword
arguments (the serve flags) over the environment, errors naming the JSON path, unknown
variables warned about and ignored."""

from __future__ import annotations

import logging
import os
import typing

import pytest

from lsp.errors import OptionsError
from lsp.options import DEFAULT_ALIASES, CompletionOptions, InitializationOptions
from lsp.settings import LocalSettings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.upper().startswith("UMBRA_LOCAL_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_defaults():
    settings = LocalSettings()
    assert (settings.host, settings.port, settings.max_sessions, settings.auth, settings.token_file) == (
        "127.0.0.1", 8765, 16, True, None)
    assert settings.options() == InitializationOptions()


def test_the_shared_part_is_the_options_schema():
    hints, shared = typing.get_type_hints(LocalSettings), typing.get_type_hints(InitializationOptions)
    assert {name: hints[name] for name in InitializationOptions.model_fields} == {
        name: shared[name] for name in InitializationOptions.model_fields}


def test_nested_variables(clean_env):
    clean_env.setenv("UMBRA_LOCAL_COMPLETION__MAX_TOKENS", "32")
    clean_env.setenv("UMBRA_LOCAL_COMPLETION__MULTILINE", "true")
    clean_env.setenv("UMBRA_LOCAL_CLOUD__URL", "https://cloud.example")
    clean_env.setenv("UMBRA_LOCAL_CLOUD__TOKEN_ENV", "MY_TOKEN")
    clean_env.setenv("UMBRA_LOCAL_MODEL__KEYRING_SERVICE", "work")
    clean_env.setenv("UMBRA_LOCAL_THREADS", "2")
    clean_env.setenv("UMBRA_LOCAL_PORT", "0")
    settings = LocalSettings()
    options = settings.options()
    assert options.completion == CompletionOptions(max_tokens=32, multiline=True)
    assert options.cloud.url == "https://cloud.example" and options.cloud.token_env == "MY_TOKEN"
    assert options.model.keyring_service == "work" and options.threads == 2 and settings.port == 0


def test_the_older_flat_variables_still_work(clean_env, tmp_path):
    for name, value in {"MAX_TOKENS": "12", "MULTILINE": "1", "TEMPERATURE": "0.5", "TOP_P": "0.9",
                        "CONTEXT_TOKENS": "512", "CLOUD_URL": "https://cloud.example",
                        "CLOUD_CERTIFICATE": str(tmp_path / "c.pem"), "CLOUD_TOKEN_ENV": "MY_TOKEN",
                        "MODEL_DIR": str(tmp_path), "BUNDLE": str(tmp_path / "bundle"),
                        "KEYRING_SERVICE": "work"}.items():
        clean_env.setenv(f"UMBRA_LOCAL_{name}", value)
    options = LocalSettings().options()
    assert options.completion == CompletionOptions(max_tokens=12, multiline=True, temperature=0.5, top_p=0.9,
                                                   context_tokens=512)
    assert (options.cloud.url, options.cloud.certificate, options.cloud.token_env) == (
        "https://cloud.example", str(tmp_path / "c.pem"), "MY_TOKEN")
    assert (options.model.dir, options.model.bundle, options.model.keyring_service) == (
        str(tmp_path), str(tmp_path / "bundle"), "work")


def test_lists_and_maps_come_as_json(clean_env):
    clean_env.setenv("UMBRA_LOCAL_COMPLETION__LANGUAGES", '["python", "go"]')
    clean_env.setenv("UMBRA_LOCAL_LANGUAGES__ALIASES", '{"golang": "go", "py3": "python"}')
    options = LocalSettings().options()
    assert options.completion.languages == ("python", "go")
    assert options.languages.aliases == {**DEFAULT_ALIASES, "golang": "go", "py3": "python"}
    clean_env.setenv("UMBRA_LOCAL_COMPLETION", '{"maxTokens": 8, "languages": ["java"]}')  # a whole section
    clean_env.delenv("UMBRA_LOCAL_COMPLETION__LANGUAGES")
    assert LocalSettings().options().completion == CompletionOptions(max_tokens=8, languages=("java",))


def test_keyword_arguments_win_then_nested_then_flat_names(clean_env, tmp_path):
    clean_env.setenv("UMBRA_LOCAL_CLOUD_URL", "https://flat.example")
    assert LocalSettings().cloud.url == "https://flat.example"
    clean_env.setenv("UMBRA_LOCAL_CLOUD__URL", "https://nested.example")
    assert LocalSettings().cloud.url == "https://nested.example"
    clean_env.setenv("UMBRA_LOCAL_MAX_TOKENS", "12")
    clean_env.setenv("UMBRA_LOCAL_COMPLETION__TOP_P", "0.5")
    settings = LocalSettings(cloud_url="https://flag.example", model_dir=tmp_path, top_p=0.25, threads=1)
    options = settings.options()  # as `umbra serve` passes its flags: flat names, paths
    assert options.cloud.url == "https://flag.example" and options.model.dir == str(tmp_path)
    assert options.completion == CompletionOptions(max_tokens=12, top_p=0.25) and options.threads == 1


@pytest.mark.parametrize("name, value, message", [
    ("UMBRA_LOCAL_COMPLETION__MAX_TOKENS", "0", "completion.maxTokens must be >= 1, got 0"),
    ("UMBRA_LOCAL_MAX_TOKENS", "many", 'completion.maxTokens must be an integer, got "many"'),
    ("UMBRA_LOCAL_TEMPERATURE", "-1", "completion.temperature must be >= 0, got -1"),
    ("UMBRA_LOCAL_LANGUAGES__ALIASES", '{"golang": 3}', "languages.aliases.golang must be a string"),
    ("UMBRA_LOCAL_COMPLETION__LANGUAGES", "python", "completion.languages must be an array"),
    ("UMBRA_LOCAL_CLOUD_URL", "cloud.example", "cloud.url must start with http:// or https://"),
    ("UMBRA_LOCAL_PORT", "70000", "port must be <= 65535, got 70000"),
])
def test_a_bad_value_names_its_json_path(clean_env, name, value, message):
    clean_env.setenv(name, value)
    with pytest.raises(OptionsError) as err:
        LocalSettings()
    assert str(err.value).startswith(message), str(err.value)


def test_an_unknown_variable_is_a_warning_and_ignored(clean_env, caplog):
    clean_env.setenv("UMBRA_LOCAL_COMPLETION__DRAFT_TOKENS", "4")
    clean_env.setenv("UMBRA_LOCAL_TELEMETRY", "on")
    clean_env.setenv("UMBRA_LOCAL_LANGUAGES__ALIASES", '{"golang": "go"}')  # known: a map
    with caplog.at_level(logging.WARNING, logger="umbra.lsp"):
        options = LocalSettings().options()
    assert options.completion == CompletionOptions()
    [record] = [r for r in caplog.records if r.name == "umbra.lsp"]
    assert "UMBRA_LOCAL_COMPLETION__DRAFT_TOKENS" in record.getMessage()
    assert "UMBRA_LOCAL_TELEMETRY" in record.getMessage() and "ALIASES" not in record.getMessage()


def test_the_opt_in_to_undefended_remote_clouds_is_off_unless_set(clean_env, monkeypatch):
    """Private by default: `umbra serve` opts in only through its flag (a keyword argument here)
    or UMBRA_LOCAL_ALLOW_UNDEFENDED_REMOTE_CLOUD, and the backend's cloud link gets it."""
    from lsp.cloud import cloud_config

    assert cloud_config(LocalSettings().options()).allow_undefended_remote_cloud is False
    assert cloud_config(LocalSettings(allow_undefended_remote_cloud=True).options()).allow_undefended_remote_cloud
    monkeypatch.setenv("UMBRA_LOCAL_ALLOW_UNDEFENDED_REMOTE_CLOUD", "true")
    assert LocalSettings().options().allow_undefended_remote_cloud is True
