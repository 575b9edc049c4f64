"""The options schema (lsp/options.py): the JSON contract with the editors (names, defaults),
camelCase and snake_case names, null = default, lists and maps, errors naming the JSON path,
unknown keys warned about and ignored, and one request's overrides of the completion part."""

from __future__ import annotations

import logging

import pydantic
import pytest

from lsp.errors import OptionsError
from lsp.options import DEFAULT_ALIASES, CompletionOptions, InitializationOptions
from umbra.engine.context_exclusions import DEFAULT_EXCLUDE
from umbra.engine import EngineConfig, StopConfig

CONTRACT = {  # the defaults, as JSON; names and defaults must not drift
    "model": {"dir": None, "bundle": None, "keyringService": "umbra", "dtype": "fp32"},
    "cloud": {"url": None, "certificate": None, "tokenEnv": "UMBRA_CLOUD_TOKEN"},
    "completion": {"maxTokens": 64, "multiline": "auto", "temperature": 0.0, "topP": 1.0, "contextTokens": 1024,
                   "languages": None},
    "languages": {"aliases": dict(DEFAULT_ALIASES)},
    # the language server's editor requests only
    "inline": {"deadlineMs": 250, "deadlineGraceMs": 1750, "repetitionTokens": 12, "contextTokens": 512},
    # context from the other open documents: off until the --repo benchmark shows a gain
    "context": {"enabled": False, "tokens": 384, "maxFiles": 5, "exclude": DEFAULT_EXCLUDE},
    "threads": None,
    "allowUndefendedRemoteCloud": False,  # private by default (umbra/privacy/cloud_policy.py)
    "clientOnly": False,  # split by default; true: the client's blocks alone, no cloud at all
}

VSCODE = {  # what the VS Code extension sends with its defaults (vscode-extension/src/settings.ts)
    "model": {"dir": None, "bundle": None, "keyringService": "umbra", "dtype": "fp32"},
    "cloud": {"url": None, "certificate": None, "tokenEnv": "UMBRA_CLOUD_TOKEN"},
    "completion": {"maxTokens": 64, "multiline": "auto", "temperature": 0.0, "topP": 1.0, "contextTokens": 1024},
    "inline": {"deadlineMs": 250},
    "context": {"enabled": False, "exclude": list(DEFAULT_EXCLUDE)},  # umbra.context.enabled, umbra.exclude
    "threads": None,
    "allowUndefendedRemoteCloud": False,
    "clientOnly": False,
}


def test_defaults_are_the_contract():
    assert InitializationOptions().model_dump(by_alias=True) == CONTRACT
    assert InitializationOptions.from_json(None) == InitializationOptions.from_json({}) == InitializationOptions()
    assert InitializationOptions.from_json(CONTRACT) == InitializationOptions()


def test_what_the_vscode_extension_sends_is_accepted_without_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="umbra.lsp"):
        warnings = []
        assert InitializationOptions.from_json(VSCODE, warn=warnings.append) == InitializationOptions()
    assert warnings == [] and caplog.records == []


def test_completion_defaults_are_the_engines():
    # but for the line rule: an editor's is "auto" (stops.py), the engine's own (`umbra complete`) the line
    assert CompletionOptions(multiline=False).engine_config() == EngineConfig()
    assert CompletionOptions().engine_config() == EngineConfig(stop=StopConfig(multiline="auto"))


def test_an_editor_request_prompt_is_capped_by_the_inline_budget():
    # the smaller of completion.contextTokens and inline.contextTokens; the HTTP APIs keep the former
    options = InitializationOptions()
    assert options.completion.engine_config().prompt.budget == 1024
    assert options.inline.engine_config(options.completion.engine_config()).prompt.budget == 512
    small = InitializationOptions.from_json({"completion": {"contextTokens": 300}, "inline": {"contextTokens": 600}})
    assert small.inline.engine_config(small.completion.engine_config()).prompt.budget == 300
    with pytest.raises(OptionsError, match="inline.contextTokens"):
        InitializationOptions.from_json({"inline": {"contextTokens": 0}})


def test_an_editor_request_deadline_has_the_inline_grace():
    # the engine's stop rule in seconds (decoding.py); the HTTP APIs have no deadline and no grace
    options = InitializationOptions()
    assert options.completion.engine_config().stop.deadline_grace == 0.0
    assert options.inline.engine_config(options.completion.engine_config()).stop.deadline_grace == 1.75
    none = InitializationOptions.from_json({"inline": {"deadlineGraceMs": 0}})
    assert none.inline.engine_config(none.completion.engine_config()).stop.deadline_grace == 0.0


def test_camel_case_keys_convert_once_into_typed_frozen_fields():
    options = InitializationOptions.from_json({
        "model": {"dir": "/m", "bundle": "/b", "keyringService": "work"},
        "cloud": {"url": "https://cloud.example:8443", "certificate": "/c.pem", "tokenEnv": "MY_TOKEN"},
        "completion": {"maxTokens": 12, "multiline": True, "temperature": 1, "topP": 0.5, "contextTokens": 256},
        "threads": 2,
    })
    assert options.model.keyring_service == "work" and options.cloud.token_env == "MY_TOKEN"
    assert options.completion.temperature == 1.0 and isinstance(options.completion.temperature, float)
    config = options.completion.engine_config()
    assert (config.stop.max_tokens, config.stop.multiline, config.sampling.top_p, config.prompt.budget) == (
        12, True, 0.5, 256)
    assert options.threads == 2
    with pytest.raises(pydantic.ValidationError):
        options.completion.max_tokens = 3  # frozen


def test_snake_case_names_are_accepted_too():
    snake = InitializationOptions.from_json({"model": {"keyring_service": "work"}, "cloud": {"token_env": "T"},
                                             "completion": {"max_tokens": 12, "top_p": 0.5, "context_tokens": 256}})
    camel = InitializationOptions.from_json({"model": {"keyringService": "work"}, "cloud": {"tokenEnv": "T"},
                                             "completion": {"maxTokens": 12, "topP": 0.5, "contextTokens": 256}})
    assert snake == camel and snake.completion.max_tokens == 12


def test_null_means_the_default():
    options = InitializationOptions.from_json({"completion": {"maxTokens": None, "languages": None}, "model": None,
                                               "languages": {"aliases": None}, "threads": None})
    assert options == InitializationOptions()


def test_lists_and_maps():
    options = InitializationOptions.from_json({
        "completion": {"languages": ["python", "go"]},
        "languages": {"aliases": {"golang": "go", "py3": "python", "tsx": "tsx"}},
    })
    assert options.completion.languages == ("python", "go")
    assert options.languages.aliases == {**DEFAULT_ALIASES, "golang": "go", "py3": "python", "tsx": "tsx"}
    assert options.languages.canonical("py3") == "python" and options.languages.canonical("py") == "python"
    assert options.languages.canonical("tsx") == "tsx"  # a default dropped by mapping it to itself
    assert options.languages.canonical("rust") == "rust"
    assert InitializationOptions.from_json({"completion": {"languages": []}}).completion.languages == ()
    assert InitializationOptions().completion.languages is None  # all languages


@pytest.mark.parametrize("data, message", [
    ([], "initializationOptions must be an object, got an array"),
    ({"completion": 5}, "completion must be an object, got an integer"),
    ({"completion": {"maxTokens": 8.0}}, "completion.maxTokens must be an integer, got a number"),
    ({"completion": {"maxTokens": True}}, "completion.maxTokens must be an integer, got a boolean"),
    ({"completion": {"multiline": 1}}, 'completion.multiline must be true, false or "auto", got an integer'),
    ({"completion": {"multiline": "block"}}, 'completion.multiline must be true, false or "auto", got a string'),
    ({"inline": {"deadlineMs": -1}}, "inline.deadlineMs must be >= 0, got -1"),
    ({"inline": {"deadlineGraceMs": -1}}, "inline.deadlineGraceMs must be >= 0, got -1"),
    ({"inline": {"repetitionTokens": 2}}, "inline.repetitionTokens must be 0 (off) or >= 3, got 2"),
    ({"context": {"tokens": 0}}, "context.tokens must be >= 1, got 0"),
    ({"context": {"exclude": [""]}}, "context.exclude[0] must be a non-empty string"),
    ({"completion": {"topP": "1"}}, "completion.topP must be a number, got a string"),
    ({"model": {"dir": 3}}, "model.dir must be a string, got an integer"),
    ({"completion": {"maxTokens": 0}}, "completion.maxTokens must be >= 1, got 0"),
    ({"completion": {"max_tokens": 0}}, "completion.maxTokens must be >= 1, got 0"),  # always the camelCase path
    ({"completion": {"temperature": -0.1}}, "completion.temperature must be >= 0, got -0.1"),
    ({"completion": {"topP": 0}}, "completion.topP must be > 0, got 0"),
    ({"completion": {"topP": 1.5}}, "completion.topP must be <= 1, got 1.5"),
    ({"completion": {"contextTokens": 0}}, "completion.contextTokens must be >= 1, got 0"),
    ({"completion": {"languages": "python"}}, "completion.languages must be an array, got a string"),
    ({"completion": {"languages": ["python", 3]}}, "completion.languages[1] must be a string, got an integer"),
    ({"completion": {"languages": [""]}}, "completion.languages[0] must be a non-empty string"),
    ({"languages": {"aliases": ["go"]}}, "languages.aliases must be an object, got an array"),
    ({"languages": {"aliases": {"golang": 3}}}, "languages.aliases.golang must be a string, got an integer"),
    ({"languages": {"aliases": {"golang": None}}}, "languages.aliases.golang must be a string, got null"),
    ({"threads": 0}, "threads must be >= 1, got 0"),
    ({"threads": "2"}, "threads must be an integer, got a string"),
    ({"cloud": {"url": "cloud.example"}}, "cloud.url must start with http:// or https://"),
    ({"cloud": {"certificate": "/c.pem"}}, "cloud.certificate applies to a configured cloud.url only"),
    ({"cloud": {"tokenEnv": "MY-TOKEN"}}, "cloud.tokenEnv must be an environment variable name"),
    ({"model": {"keyringService": ""}}, "model.keyringService must be a non-empty string"),
    ({"model": {"dir": ""}}, "model.dir must be a path or null"),
    ({"model": {"dtype": "fp16"}}, "model.dtype must be 'fp32' or 'bf16', got \"fp16\""),
])
def test_a_bad_value_names_its_json_path(data, message):
    with pytest.raises(OptionsError) as err:
        InitializationOptions.from_json(data)
    assert str(err.value).startswith(message), str(err.value)


def test_one_line_per_error():
    with pytest.raises(OptionsError) as err:
        InitializationOptions.from_json({"completion": {"maxTokens": 0, "topP": "x"}, "threads": 0})
    assert str(err.value).splitlines() == ["completion.maxTokens must be >= 1, got 0",
                                           "completion.topP must be a number, got a string",
                                           "threads must be >= 1, got 0"]


def test_an_unknown_key_is_a_warning_and_ignored(caplog):
    warnings = []
    with caplog.at_level(logging.WARNING, logger="umbra.lsp"):
        options = InitializationOptions.from_json(
            {"completion": {"maxTokens": 12, "speculativeDrafts": 4}, "telemetryV2": {"level": "all"}},
            warn=warnings.append)
    assert options == InitializationOptions(completion=CompletionOptions(max_tokens=12))
    [record] = [r for r in caplog.records if r.name == "umbra.lsp"]
    assert record.levelno == logging.WARNING
    assert "completion.speculativeDrafts" in record.getMessage() and "telemetryV2" in record.getMessage()
    assert warnings == [record.getMessage()]
    with caplog.at_level(logging.WARNING, logger="umbra.lsp"):  # logged once; the editor is told each time
        InitializationOptions.from_json({"telemetryV2": {}}, warn=warnings.append)
    assert len([r for r in caplog.records if r.name == "umbra.lsp"]) == 1 and len(warnings) == 2


def test_a_request_overrides_the_completion_part_through_the_same_schema(caplog):
    base = CompletionOptions(max_tokens=48, multiline=True, languages=("python",))
    assert base.with_overrides({}) == base
    assert base.with_overrides({"maxTokens": 8, "top_p": 0.5, "temperature": None}) == CompletionOptions(
        max_tokens=8, multiline=True, top_p=0.5, languages=("python",))
    with caplog.at_level(logging.WARNING, logger="umbra.lsp"):
        assert base.with_overrides({"nBestCandidates": 4}) == base
    assert any("nBestCandidates" in r.getMessage() for r in caplog.records)
    for overrides, message in [({"maxTokens": 0}, "maxTokens must be >= 1, got 0"),
                               ({"max_tokens": 2.5}, "maxTokens must be an integer, got a number"),
                               ({"multiline": "yes"}, 'multiline must be true, false or "auto", got a string'),
                               ({"languages": ["go"]}, "languages is a server setting")]:
        with pytest.raises(OptionsError) as err:
            base.with_overrides(overrides)
        assert str(err.value).startswith(message), str(err.value)
