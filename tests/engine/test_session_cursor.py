"""Completions at every cursor an editor leaves, end to end through the split engine (client
parts + LocalMiddle): never a blank the cursor already has, never the partial word twice, the
buffer's line ends and indentation unit kept, nothing the suffix already holds. On the default
model (real completions) and on tiny random models of every family whose LM head is biased
towards blanks — the worst case — with a control showing the same models start with blanks when
healing is off."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch

from tiny_models import FAMILIES, build_tiny_model_dir
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, PromptConfig, StopConfig
from umbra.engine.fim import build_prompt
from umbra.middle.local import LocalMiddle

DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "models" / "umbra-code-tiny"
BLANK = (" ", "\t")

# name -> (prefix, suffix): the cursor positions the issue names
CURSORS = {
    "after auto-indent": ("import os\n\n\ndef read_lines(path):\n    with open(path) as f:\n        ", "\n"),
    "after a typed blank": ("import os\n\n\ndef size(path):\n    return ", "\n"),
    "partial identifier": ("import os\n\n\ndef size(path):\n    retu", "\n"),
    "inside a string": ("import sys\n\n\ndef main():\n    print(\"Usage: prog", "\n"),
    "after a tab": ("package main\n\nfunc main() {\n\tfor i := 0; i < 10; i++ {\n\t\t", "\n\t}\n}\n"),
    "mixed indentation": ("def f(x):\n\tif x:\n\t    ", "\n"),
    "end of file": ("def f(x):\n    y = x + 1\n    ", ""),
    "CRLF file": ("import os\r\n\r\n\r\ndef f(path):\r\n    if os.path.exists(path):\r\n        ", "\r\n    return None\r\n"),
}


def _config(multiline, healing=True):
    return EngineConfig(prompt=PromptConfig(budget=256, token_healing=healing),
                        stop=StopConfig(max_tokens=12, multiline=multiline))


def _blank_start(text):
    return text[:1] in BLANK


def _check_continues(model, prefix, suffix, result, cfg):
    """The generated tokens re-create the healed text first, and the completion is what follows."""
    tok = model.tokenizer
    prompt = build_prompt(tok, _fim(model), prefix.replace("\r\n", "\n"), suffix.replace("\r\n", "\n"), cfg.prompt)
    assert tok.decode(list(result.tokens)).startswith(prompt.heal)
    if prefix.endswith(BLANK):  # the cursor is after blanks: the completion adds none
        assert not _blank_start(result.text), result.text
    if "\r\n" in prefix:
        assert "\n" not in result.text.replace("\r\n", "") and "\r\r" not in result.text


def _fim(model):
    from umbra.engine.fim import detect_format

    return detect_format(model.tokenizer)


@pytest.fixture(scope="module")
def default_model() -> ClientModel:
    return ClientModel.load(DEFAULT_MODEL)


@pytest.mark.parametrize("multiline", [False, True])
@pytest.mark.parametrize("cursor", sorted(CURSORS))
async def test_default_model_at_every_cursor(default_model, cursor, multiline):
    prefix, suffix = CURSORS[cursor]
    cfg = _config(multiline)
    engine = CompletionEngine.split(default_model, LocalMiddle(default_model.load_middle()), cfg)
    result = await engine.complete(prefix, suffix)
    _check_continues(default_model, prefix, suffix, result, cfg)


async def test_default_model_completes_what_the_cursor_began(default_model):
    engine = CompletionEngine.split(default_model, LocalMiddle(default_model.load_middle()), _config(False))
    partial = await engine.complete(*CURSORS["partial identifier"])
    assert partial.text.startswith("rn ")  # "retu" + "rn ...": the word once, not "retu" again
    indented = await engine.complete(*CURSORS["after auto-indent"])
    assert indented.text.startswith(("for ", "return ", "if ", "lines", "data", "f.", "content"))


async def test_default_model_does_not_repeat_what_the_suffix_closes(default_model):
    engine = CompletionEngine.split(default_model, LocalMiddle(default_model.load_middle()), _config(False))
    result = await engine.complete("import os\n\n\ndef f(path):\n    return os.path.join(", ")\n")
    assert result.text and not result.text.endswith(")")


async def test_default_model_writes_a_tab_files_indentation_in_tabs(default_model):
    prefix = "class Reader:\n\tdef read(self, path):\n\t\twith open(path) as f:\n\t\t\t"
    engine = CompletionEngine.split(default_model, LocalMiddle(default_model.load_middle()),
                                    dataclasses.replace(_config(True), stop=StopConfig(max_tokens=40, multiline=True,
                                                                                        stop_at_block_end=False)))
    result = await engine.complete(prefix, "\n\t\treturn None\n")
    new_lines = result.text.split("\n")[1:]
    assert new_lines, result.text
    assert all(not line.startswith(" ") for line in new_lines)


# -- tiny random models of every family, biased towards blanks ------------------------------------

@pytest.fixture(scope="module")
def family_models(tmp_path_factory) -> dict[str, ClientModel]:
    models = {}
    for family in FAMILIES:
        d = tmp_path_factory.mktemp(f"cursor-{family}")
        build_tiny_model_dir(d, family=family, style="starcoder")
        models[family] = _blank_biased(ClientModel.load(d))
    return models


def _blank_biased(model: ClientModel) -> ClientModel:
    """The same model with a large LM-head bias on every token that starts with a blank."""
    tok = model.tokenizer
    decoder = copy.deepcopy(model.decoder)
    old = decoder.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.zero_()
        head.bias[tok.ids_with_first_char(" \t", old.out_features)] = 30.0
    decoder.lm_head = head.requires_grad_(False)
    return dataclasses.replace(model, decoder=decoder)


@pytest.mark.parametrize("family", FAMILIES)
async def test_every_family_at_every_cursor(family_models, family):
    model = family_models[family]
    for name, (prefix, suffix) in CURSORS.items():
        for multiline in (False, True):
            cfg = _config(multiline)
            engine = CompletionEngine.split(model, LocalMiddle(model.load_middle()), cfg)
            result = await engine.complete(prefix, suffix)
            _check_continues(model, prefix, suffix, result, cfg)


@pytest.mark.parametrize("family", FAMILIES)
async def test_control_without_healing_the_same_models_start_with_blanks(family_models, family):
    model = family_models[family]
    engine = CompletionEngine.split(model, LocalMiddle(model.load_middle()), _config(False, healing=False))
    for name in ("after auto-indent", "after a typed blank", "end of file"):
        prefix, suffix = CURSORS[name]
        result = await engine.complete(prefix, suffix)
        assert _blank_start(result.text) or result.text == "", (name, result.text)
