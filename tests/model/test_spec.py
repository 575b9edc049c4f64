"""load_spec reads a config.json that states every field directly, and that spec is the one
transformers' AutoConfig gives (the reference) for every family and for the configs a real model
directory may hold; anything the direct read cannot settle goes through AutoConfig."""

from __future__ import annotations

import json
import sys
from dataclasses import fields

import pytest
import torch

from tiny_models import FAMILIES, tiny_config
from umbra.errors import ModelLoadError
from umbra.model.spec import DIRECT_KEYS, direct_config, load_spec
from umbra.model.spec import reference_spec as _reference_spec


def reference_spec(d):
    """AutoConfig and transformers' RoPE initialisers: the reference for every field."""
    return _reference_spec(d, own_rope=False)


def outcome(read, d):
    """The spec `read` gives for directory d, or the message of the error it raises."""
    try:
        return read(d)
    except ModelLoadError as exc:
        return str(exc)


def assert_same(a, b) -> None:
    if isinstance(a, str) or isinstance(b, str):  # both refused, with the same message
        assert a == b
        return
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and torch.equal(x, y), f.name
        else:
            assert x == y, f.name


def saved(tmp_path, family: str, edit=None):
    d = tmp_path / family
    tiny_config(family).save_pretrained(d)
    if edit is not None:
        raw = json.loads((d / "config.json").read_text())
        edit(raw)
        (d / "config.json").write_text(json.dumps(raw))
    return d, json.loads((d / "config.json").read_text())


@pytest.mark.parametrize("family", [*FAMILIES, "llama-plain"])
def test_every_family_as_saved_is_the_reference_spec(tmp_path, family):
    d, raw = saved(tmp_path, family)
    assert_same(load_spec(d), reference_spec(d))
    # read directly unless it needs Qwen2's window logic
    assert (direct_config(raw) is None) == (family == "qwen2-sliding")


def _legacy_theta(raw):  # a transformers 4.x config: θ at the top level, no rope_parameters
    raw["rope_theta"] = 500000
    raw.pop("rope_parameters")
    raw.pop("dtype", None)
    raw["torch_dtype"] = "float32"


def _sliding_null(raw):
    raw["sliding_window"] = None


def _legacy_llama3(raw):  # a transformers 4.x Llama 3 config: `rope_scaling`, θ at the top level
    rope = raw.pop("rope_parameters")
    raw["rope_theta"] = rope.pop("rope_theta")
    raw["rope_scaling"] = rope


def _linear(raw):
    raw["rope_parameters"].update(rope_type="linear", factor=4.0)


def _bf16(raw):
    raw["dtype"] = "bfloat16"


def _head_dim(raw):
    raw["head_dim"] = 32
    raw["hidden_size"] = 96


@pytest.mark.parametrize("family,edit", [
    ("qwen2-tied", _legacy_theta), ("mistral", _legacy_theta), ("mistral", _sliding_null),
    ("qwen2-untied", _bf16), ("mistral", _head_dim), ("llama", _legacy_llama3), ("qwen2-tied", _linear)])
def test_what_other_writers_leave_is_read_directly_and_is_the_reference(tmp_path, family, edit):
    d, raw = saved(tmp_path, family, edit)
    assert direct_config(raw) is not None
    assert_same(load_spec(d), reference_spec(d))


def _drop(key):
    return lambda raw: raw.pop(key)


@pytest.mark.parametrize("family,edit", [
    *[("mistral", _drop(k)) for k in DIRECT_KEYS if k != "model_type"],
    ("mistral", _drop("sliding_window")),  # its family's default window (4096), not None
    ("qwen2-tied", lambda raw: raw.update(num_key_value_heads=None)),
    ("qwen2-tied", lambda raw: raw.update(rope_theta=20000.0)),  # θ stated twice
    ("qwen2-tied", lambda raw: raw["rope_parameters"].update(rope_type="yarn", factor=2.0)),
    ("llama", lambda raw: raw["rope_parameters"].pop("low_freq_factor")),  # llama3 without a parameter
    ("llama", lambda raw: raw.update(rope_scaling={"type": "linear", "factor": 2.0})),  # two statements
])
def test_a_config_that_leaves_a_field_to_its_family_goes_through_autoconfig(tmp_path, family, edit):
    d, raw = saved(tmp_path, family, edit)
    assert direct_config(raw) is None
    assert_same(outcome(load_spec, d), outcome(reference_spec, d))


def test_a_direct_read_never_imports_transformers(tmp_path, monkeypatch):
    d, _ = saved(tmp_path, "qwen2-tied")
    llama, _ = saved(tmp_path, "llama")  # llama3 RoPE, computed here
    sliding, _ = saved(tmp_path, "qwen2-sliding")  # Qwen2's window layout: the reference only
    monkeypatch.setitem(sys.modules, "transformers", None)  # any import of it raises ImportError
    assert load_spec(d).num_layers == 6
    assert load_spec(llama).rope_inv_freq is not None
    with pytest.raises(ImportError):
        load_spec(sliding)


def test_bad_directories_are_refused_by_name(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_spec(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="cannot read"):
        load_spec(tmp_path)
    d, _ = saved(tmp_path, "qwen2-tied", lambda raw: raw.update(model_type="gpt2"))
    with pytest.raises(ModelLoadError):
        load_spec(d)
