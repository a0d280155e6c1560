"""A load's validation errors as one :class:`~stream_dp.errors.ConfigError`: ``<setting> must be <allowed>, got
<value> (set by environment variable X)``, one clause per setting at fault.

What a setting "must be" is read from where the rule is stated: a bound from the field's pydantic constraints
(``Field(ge=1)`` → ">= 1", ``ge=0, le=65535`` → "in [0, 65535]", ``min_length=1`` → "a non-empty string",
a ``Literal`` → its choices), followed by the field's ``description`` when it explains the bound; a rule
pydantic cannot state as a bound carries its own text (:data:`stream_dp.config.fields.RULE`); a wrong type is
named in words. A secret's value is never shown."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from stream_dp.config.fields import RULE
from stream_dp.config.model import Config
from stream_dp.config.sources import FILE_SETTINGS, SECRET_SETTINGS, setting_type
from stream_dp.errors import ConfigError

_TYPE_WORDS = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string", "dataclass_type": "a table", "dict_type": "a table",
    "tuple_type": "an array of strings",
}
# errors of a field's own constraints: the allowed values are read from the field
_CONSTRAINT_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number",
                      "string_too_short"}


def _field(loc: list[str]) -> FieldInfo | None:
    """The pydantic field of the setting at ``loc`` (a section's field), or None."""
    owner = setting_type(loc[:-1]) if loc[:-1] else Config
    fields = getattr(owner, "__pydantic_fields__", {}) if dataclasses.is_dataclass(owner) else {}
    return fields.get(loc[-1]) if loc else None


def _bounds(info: FieldInfo) -> str | None:
    """What the field's constraints allow, in the words of the config file's comments."""
    found: dict[str, Any] = {}
    for item in info.metadata:  # annotated_types' Ge(ge=1), MinLen(min_length=1), ...
        for name in ("ge", "gt", "le", "lt", "min_length"):
            if getattr(item, name, None) is not None:
                found.setdefault(name, getattr(item, name))
    if "min_length" in found:
        return "a non-empty string"
    low = ("[", found["ge"]) if "ge" in found else ("(", found["gt"]) if "gt" in found else None
    high = (found["le"], "]") if "le" in found else (found["lt"], ")") if "lt" in found else None
    if low and high:
        return f"in {low[0]}{low[1]}, {high[0]}{high[1]}"
    if low:
        return f"{'>=' if low[0] == '[' else '>'} {low[1]}"
    if high:
        return f"{'<=' if high[1] == ']' else '<'} {high[0]}"
    return None


def _choices(choices: tuple[str, ...]) -> str:
    """An enumeration's allowed values: "'a' or 'b'", "one of a, b, c", "empty or one of a, b"."""
    named = [c for c in choices if c]
    if len(choices) == 2 and all(choices):
        return f"'{choices[0]}' or '{choices[1]}'"
    return f"{'empty or ' if len(named) < len(choices) else ''}one of {', '.join(named)}"


def _allowed(error: Mapping[str, Any], loc: list[str], kind: str) -> str:
    """``<allowed>`` of "<setting> must be <allowed>" for a field's own (non-rule) error."""
    info = _field(loc)
    if kind == "literal_error" and info is not None:
        return _choices(typing.get_args(info.annotation))
    bounds = _bounds(info) if info is not None and kind in _CONSTRAINT_ERRORS else None
    if bounds is not None:
        return f"{bounds} ({info.description})" if info is not None and info.description else bounds
    message: str = error["msg"]
    return _TYPE_WORDS.get(kind, message.removeprefix("Input should be ").removeprefix("Value error, "))


def _describe(error: Mapping[str, Any], applied: Mapping[str, str]) -> str:
    """One pydantic error as ``<setting> must be <allowed>, got <value> (set by environment variable X)``."""
    loc = [str(part) for part in error["loc"]]
    kind = error["type"]
    if kind in {"unexpected_keyword_argument", "extra_forbidden"}:
        section_path = loc[:-1]
        where = f"[{'.'.join(section_path)}]" if section_path else "the top level"
        message = f"unknown setting(s) {loc[-1]} in {where}; known: {', '.join(_known_names(section_path))}"
        return _with_variable(message, ".".join(loc), applied)
    value: Any = error.get("input")
    if kind == RULE:
        ctx = error["ctx"]
        allowed = ctx["allowed"]
        if ctx.get("setting"):
            loc, value = [*loc, ctx["setting"]], ctx.get("value")
    else:
        if loc and loc[-1].isdigit():  # an item of an array of strings
            loc, kind = loc[:-1], "tuple_type"
        allowed = _allowed(error, loc, kind)
    setting = ".".join(loc)
    if setting in SECRET_SETTINGS and allowed == "a string":
        message = f"{setting} must be a string (value not shown: it is secret)"
    elif setting in FILE_SETTINGS:  # secret, or a URL that may carry one
        message = f"{setting} must be {allowed} (value not shown: it may hold a secret)"
    else:
        message = f"{setting} must be {allowed}, got {_plain(value)!r}"
    return _with_variable(message, setting, applied)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _known_names(section_path: list[str]) -> list[str]:
    typ = setting_type(section_path) if section_path else Config
    return sorted(f.name for f in dataclasses.fields(typ)) if dataclasses.is_dataclass(typ) else []


def _with_variable(message: str, setting: str, applied: Mapping[str, str]) -> str:
    """``message`` plus the environment variable(s) that set ``setting`` (or a setting inside it)."""
    variables = [v for name, v in applied.items() if name == setting or name.startswith(setting + ".")]
    return f"{message} (set by environment variable {', '.join(variables)})" if variables else message


def config_error(exc: ValidationError, applied: Mapping[str, str]) -> ConfigError:
    """All of a load's errors, one per setting (an array's bad items count once), first-found first."""
    messages: dict[str, str] = {}
    for error in exc.errors():
        message = _describe(error, applied)
        messages.setdefault(message.split(" ", 1)[0], message)
    return ConfigError("; ".join(messages.values()))
