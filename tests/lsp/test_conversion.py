"""lsp/conversion.py on a model tree of its own (not the options schema): JSON's types strictly,
null = the default at every depth, unknown keys by their dotted path (warned once, reported each
time), and errors naming the camelCase JSON path — list indices and map keys included."""

from __future__ import annotations

import logging

import pytest
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from lsp.conversion import convert, json_path, section, unknown_keys, without_nulls
from lsp.errors import OptionsError


class _Base(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore")


class Inner(_Base):
    max_items: int = Field(default=3, ge=1)
    tags: tuple[str, ...] = ()
    weights: dict[str, float] = Field(default_factory=dict)


class Outer(_Base):
    inner: Inner = Inner()
    label_text: str = "x"


def test_camel_and_snake_names_convert_with_defaults_for_nulls_at_every_depth():
    got = convert(Outer, {"inner": {"maxItems": 5, "tags": None}, "label_text": None})
    assert got == Outer(inner=Inner(max_items=5))
    assert without_nulls(Outer, {"inner": {"tags": None, "maxItems": 2}, "labelText": None}) == {"inner": {"maxItems": 2}}


def test_json_types_are_strict():
    with pytest.raises(OptionsError, match=r"^inner\.maxItems must be an integer, got a string$"):
        convert(Outer, {"inner": {"maxItems": "5"}})
    with pytest.raises(OptionsError, match=r"^labelText must be a string, got an integer$"):
        convert(Outer, {"labelText": 1})


def test_errors_name_list_indices_and_map_keys_one_line_each():
    with pytest.raises(OptionsError) as err:
        convert(Outer, {"inner": {"maxItems": 0, "tags": ["a", 2], "weights": {"go": "heavy"}}})
    assert str(err.value).splitlines() == ["inner.maxItems must be >= 1, got 0",
                                           "inner.tags[1] must be a string, got an integer",
                                           "inner.weights.go must be a number, got a string"]
    assert json_path(Outer, ("inner", "max_items")) == "inner.maxItems"
    assert json_path(None, ("anything", 0)) == "anything[0]"


def test_a_root_names_an_error_with_no_path():
    with pytest.raises(OptionsError, match=r"^request must be an object, got an array$"):
        convert(Outer, [1], root="request")


def test_unknown_keys_by_dotted_path_are_ignored_and_warned_once(caplog):
    data = {"inner": {"maxItems": 2, "colour": "red"}, "zzNewOption": True}
    assert unknown_keys(Outer, data) == ["inner.colour", "zzNewOption"]
    assert section(Outer, "inner") is Inner and section(Outer, "label_text") is None
    told = []
    with caplog.at_level(logging.WARNING, logger="umbra.lsp"):
        assert convert(Outer, data, warn=told.append) == Outer(inner=Inner(max_items=2))
        convert(Outer, data, warn=told.append)
    logged = [r.getMessage() for r in caplog.records if r.name == "umbra.lsp"]
    assert len(logged) == 1 and "inner.colour, zzNewOption" in logged[0]
    assert told == logged * 2  # the caller (the editor) is told every time
