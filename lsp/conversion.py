"""Plain JSON values into the options models (lsp/options.py), strictly and with errors a user can act
on: every bad value is one line naming its camelCase JSON path (`completion.maxTokens must be >= 1,
got 0`), and unknown keys are warned about once and ignored. Works on any pydantic model tree; the
models themselves know nothing about where their values came from."""

from __future__ import annotations

import json
import logging
import typing
from collections.abc import Callable, Iterable

from pydantic import BaseModel, ValidationError

from lsp.errors import OptionsError

log = logging.getLogger("umbra.lsp")

M = typing.TypeVar("M", bound=BaseModel)
_warned: set[str] = set()  # unknown keys logged already (once per process)


def convert(cls: type[M], data: object, *, warn: Callable[[str], None] | None = None,
            root: str = "", unknown: Iterable[str] = ()) -> M:
    """`data` (plain JSON values) as a `cls`, with JSON's types (strict). Unknown keys (found
    here, or given in `unknown`) are warned about and ignored; a bad value is an OptionsError
    with one line per error, each naming its camelCase JSON path."""
    warn_unknown([*unknown, *unknown_keys(cls, data)], warn)
    try:
        return cls.model_validate_json(json.dumps(without_nulls(cls, data)), strict=True)
    except ValidationError as exc:
        raise options_error(exc, cls, root) from None


def warn_unknown(keys: list[str], warn: Callable[[str], None] | None = None, what: str = "option") -> None:
    """Log unknown keys once (per process) through the `umbra.lsp` logger; `warn` gets every
    warning (the language server passes it on to the editor)."""
    if not keys:
        return
    message = (f"ignoring unknown {what}{'s' if len(keys) > 1 else ''} {', '.join(keys)} "
               f"(not known to this version of Umbra)")
    if not _warned.issuperset(keys):
        _warned.update(keys)
        log.warning("%s", message)
    if warn is not None:
        warn(message)


def unknown_keys(cls: type[BaseModel], data: object, path: str = "") -> list[str]:
    """Dotted JSON paths of the keys in `data` that `cls` does not know (by alias or name)."""
    if not isinstance(data, dict):
        return []
    found = []
    for key, value in data.items():
        dotted = f"{path}.{key}" if path else str(key)
        name = field_name(cls, key)
        if name is None:
            found.append(dotted)
        elif (sub := section(cls, name)) is not None:
            found += unknown_keys(sub, value, dotted)
    return found


def without_nulls(cls: type[BaseModel], data: object) -> object:
    """`data` without its `null` values of fields (null = the default), in every section."""
    if not isinstance(data, dict):
        return data
    kept = {}
    for key, value in data.items():
        name = field_name(cls, key)
        if value is None and name is not None:
            continue
        sub = section(cls, name) if name is not None else None
        kept[key] = without_nulls(sub, value) if sub is not None else value
    return kept


def section(cls: type[BaseModel], name: str) -> type[BaseModel] | None:
    """The model class of field `name` of `cls` if it is a nested section, else None."""
    annotation = cls.model_fields[name].annotation
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def field_name(cls: type[BaseModel], key: object) -> str | None:
    for name, info in cls.model_fields.items():
        if key in (name, info.alias):
            return name
    return None


def options_error(exc: ValidationError, cls: type[BaseModel], root: str = "") -> OptionsError:
    """pydantic's errors as one OptionsError, one line per error naming its JSON path."""
    return OptionsError("\n".join(f"{json_path(cls, e['loc']) or root or 'value'} {_message(e)}"
                                  for e in exc.errors()))


def json_path(cls: type[BaseModel] | None, loc: tuple) -> str:
    """pydantic's error location as a camelCase dotted JSON path (`completion.languages[1]`)."""
    path = ""
    for item in loc:
        if isinstance(item, int):
            path += f"[{item}]"
            continue
        name = field_name(cls, item) if cls is not None else None
        if name is not None:
            item = cls.model_fields[name].alias or name
            cls = section(cls, name)
        else:
            cls = None  # a map's key: below it, no more fields
        path = f"{path}.{item}" if path else str(item)
    return path


_EXPECTED = {
    "int": "an integer", "float": "a number", "bool": "a boolean", "string": "a string", "list": "an array",
    "tuple": "an array", "dict": "an object", "model": "an object", "model_attributes": "an object",
}
_BOUNDS = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("<=", "le"),
           "less_than": ("<", "lt")}


def _message(error: dict) -> str:
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind in _BOUNDS:
        op, key = _BOUNDS[kind]
        bound = ctx[key]
        return f"must be {op} {int(bound) if isinstance(bound, float) and bound.is_integer() else bound}, got {value}"
    if kind == "int_from_float":
        return f"must be an integer, got {json_type(value)}"
    if kind.endswith("_parsing") and kind[:-8] in _EXPECTED:  # an environment variable's text
        return f"must be {_EXPECTED[kind[:-8]]}, got {json.dumps(value)}"
    if kind.endswith("_type") and kind[:-5] in _EXPECTED:
        return f"must be {_EXPECTED[kind[:-5]]}, got {json_type(value)}"
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return "must be a non-empty string"
    if kind == "literal_error":
        return f"must be {ctx['expected']}, got {json.dumps(value)}"
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    return f"is invalid: {error['msg']}"


def json_type(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            tuple: "an array", dict: "an object"}.get(type(value), type(value).__name__)
