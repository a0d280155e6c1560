"""The vocabulary the settings sections are written in: pydantic's strict types with pydantic's own
constraints (``Field(ge=…, gt=…, lt=…, min_length=…)``, ``Literal`` enumerations, ``SecretStr``), and the two
ways a rule that pydantic cannot state as a bound is raised -- both as pydantic's own
:class:`~pydantic_core.PydanticCustomError` of type :data:`RULE`, whose context says what the setting must be:

- :func:`must_be`: a rule of one value (``"auto"`` or an integer, a URL scheme), an ``AfterValidator``;
- :func:`check`: the rules between fields of one section, inside its ``model_validator(mode="after")``
  (e.g. ``kafka.heartbeat_interval_ms`` < ``kafka.session_timeout_ms``); it names the field at fault.

A constraint's explanation (why 6000 is the floor of ``kafka.session_timeout_ms``) is the field's pydantic
``description``; :mod:`stream_dp.config.messages` turns every error into "<setting> must be <allowed> ...".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, TypeVar, cast, dataclass_transform

from pydantic import AfterValidator, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic.dataclasses import dataclass
from pydantic_core import PydanticCustomError

#: The error type of a rule raised by :func:`must_be` or :func:`check` (context: ``allowed``, and for a
#: section's rule the ``setting`` at fault and its ``value``).
RULE = "setting_rule"


def rule_error(allowed: str, **context: Any) -> PydanticCustomError:
    """A broken rule: ``allowed`` completes "<setting> must be …"."""
    return PydanticCustomError(RULE, "must be {allowed}", {"allowed": allowed, **context})


def must_be(check_value: Callable[[Any], bool], allowed: str) -> AfterValidator:
    """A value's rule that no bound states (``allowed`` completes "<setting> must be …")."""
    def validate(value: Any) -> Any:
        if not check_value(value):
            raise rule_error(allowed)
        return value

    return AfterValidator(validate)


def check(section: Any, rules: Iterable[tuple[bool, str, str]]) -> None:
    """Raise the first broken ``(ok, field name, allowed)`` rule between the fields of ``section`` (its
    model validator's job), naming the field at fault and its value."""
    for ok, name, allowed in rules:
        if not ok:
            raise rule_error(allowed, setting=name, value=getattr(section, name))


Str = StrictStr
NonEmpty = Annotated[StrictStr, Field(min_length=1)]
AtLeastOne = Annotated[StrictInt, Field(ge=1)]
NonNegative = Annotated[StrictInt, Field(ge=0)]
Port = Annotated[StrictInt, Field(ge=0, le=65535)]
Positive = Annotated[StrictFloat, Field(gt=0, allow_inf_nan=False)]
Probability = Annotated[StrictFloat, Field(gt=0, lt=1)]
Number = StrictFloat
Count = StrictInt
Flag = StrictBool
Texts = Annotated[tuple[StrictStr, ...], Field(strict=False)]  # an array of strings (a TOML array is a list)
KafkaClient = Literal["kafka-python", "confluent"]

AUTO_REPLICAS = "auto"
# a topic's retention.ms: -1 keeps records until deleted by hand; else at least a minute
RetentionMs = Annotated[StrictInt, must_be(lambda v: v == -1 or v >= 60_000, "-1 (unlimited) or >= 60000")]


def auto_or_at_least(at_least: int, allowed: str) -> AfterValidator:
    """``"auto"`` or an integer >= ``at_least`` (replica counts the service can derive from the deployment)."""
    return must_be(lambda v: v == AUTO_REPLICAS if isinstance(v, str) else v >= at_least, allowed)


_T = TypeVar("_T")


# A section: frozen, unknown keys refused, fields validated on construction (``dataclasses.replace`` too).
@dataclass_transform(frozen_default=True, field_specifiers=(Field,))
def section(cls: type[_T]) -> type[_T]:
    """A section of the settings: a frozen pydantic dataclass that refuses unknown fields (the decorator is
    declared a dataclass transform so type checkers know the class's fields and constructor)."""
    return cast("type[_T]", dataclass(frozen=True, config=ConfigDict(extra="forbid"))(cls))
