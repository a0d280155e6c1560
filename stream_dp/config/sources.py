"""Where settings come from: the file's mapping, then ``STREAM_DP_*`` environment overrides, merged by
pydantic-settings (:data:`Settings`, highest priority first: the environment, then the file).

Our environment syntax, not pydantic-settings' own (which would coerce ``"yes"`` to true): a value is read as
a TOML value when it parses (numbers, booleans, arrays), else as a string, and a text setting keeps the raw
text; ``…_FILE`` variables of :data:`FILE_SETTINGS` read a secret from the named file; the tools' own
``STREAM_DP_*`` variables (:data:`TOOL_VARIABLES`) are not settings."""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, Literal, cast, get_type_hints

from pydantic import Field, SecretStr, create_model
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from stream_dp.config.model import Config
from stream_dp.errors import ConfigError

ENV_PREFIX = "STREAM_DP_"
# settings that may be read from a file named by STREAM_DP_<SECTION>__<KEY>_FILE; their values are secret
FILE_SETTINGS = ("kafka.sasl_password", "redis.password", "redis.url")
SECRET_SETTINGS = ("kafka.sasl_password", "redis.password")

#: ``STREAM_DP_*`` variables of the tools, not settings (the dev stack's binaries and state file, the
#: workers' log level, the test suite's external services): never read as config overrides.
TOOL_VARIABLES = frozenset({"STREAM_DP_LOG_LEVEL", "STREAM_DP_TANSU", "STREAM_DP_REDIS_SERVER",
                            "STREAM_DP_DEVSTACK_STATE", "STREAM_DP_KAFKA_LIBS"})


def setting_type(parts: list[str]) -> Any:
    """The declared type of the setting at ``parts`` (e.g. ``["kafka", "client_id"]``), or None if unknown."""
    typ: Any = Config
    for part in parts:
        if not dataclasses.is_dataclass(typ):
            return None
        hints = get_type_hints(typ)
        if part not in hints:
            return None
        typ = hints[part]
    return typ


def _is_text(typ: Any) -> bool:
    """A setting whose value is text: a string, a secret, or an enumeration of strings."""
    if typ is str or typ is SecretStr:
        return True
    return typing.get_origin(typ) is Literal and all(isinstance(a, str) for a in typing.get_args(typ))


def parse_env_value(raw: str, typ: Any = None) -> Any:
    """An environment value: TOML syntax where it parses; text settings keep the raw text.

    A text setting takes the text as is (so ``STREAM_DP_REDIS__PASSWORD=12345`` stays ``"12345"``), or
    the string a quoted TOML string denotes.

    >>> parse_env_value("20"), parse_env_value("12345", str), parse_env_value('"a b"', str)
    (20, '12345', 'a b')
    """
    try:
        parsed = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
    if _is_text(typ) and not isinstance(parsed, str):
        return raw
    return parsed


def _read_secret_file(variable: str, path: str) -> str:
    """The text of the secret file ``path`` named by ``variable`` (one trailing newline stripped)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"environment variable {variable} names {path!r}, which cannot be read "
                          f"({exc.strerror or type(exc).__name__})") from None
    return text[:-1] if text.endswith("\n") else text


def environment_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``STREAM_DP_*`` overrides in ``environ`` as a nested mapping, and dotted setting → variable name.

    Tool variables (:data:`TOOL_VARIABLES`, ``STREAM_DP_TEST_*``) are skipped; ``…_FILE`` variables of
    :data:`FILE_SETTINGS` read the named file."""
    data: dict[str, Any] = {}
    applied: dict[str, str] = {}
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or name in TOOL_VARIABLES or name.startswith("STREAM_DP_TEST_"):
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX):].split("__")]
        if len(parts) < 2 or not all(parts):
            raise ConfigError(f"environment variable {name} must look like {ENV_PREFIX}SECTION__KEY")
        from_file = parts[-1].endswith("_file") and ".".join(parts)[: -len("_file")] in FILE_SETTINGS
        if from_file:
            parts[-1] = parts[-1][: -len("_file")]
        node = data
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {name} overrides a value, not a table")
        node[parts[-1]] = _read_secret_file(name, raw) if from_file else parse_env_value(raw, setting_type(parts))
        applied[".".join(parts)] = name
    return data, applied


#: The overrides of the load in progress (:func:`stream_dp.config.config_from_mapping` sets them).
OVERRIDES: ContextVar[Mapping[str, Any]] = ContextVar("stream_dp_config_overrides", default=MappingProxyType({}))


class _EnvironmentOverrides(PydanticBaseSettingsSource):
    """pydantic-settings source for ``STREAM_DP_<SECTION>__<KEY>``: the overrides that
    :func:`environment_overrides` read for the load in progress."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return OVERRIDES.get().get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(OVERRIDES.get())


class _Settings(BaseSettings):
    """:class:`Config`'s sections as settings whose sources are, highest priority first: the environment
    overrides, then the mapping given to the constructor (the TOML file's)."""

    model_config = SettingsConfigDict(extra="forbid")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (_EnvironmentOverrides(settings_cls), init_settings)


Settings = create_model(  # the fields are Config's sections, declared once (on Config)
    "Settings", __base__=_Settings,
    **{f.name: (get_type_hints(Config)[f.name], Field(default_factory=cast(Callable[[], Any], f.default_factory)))  # type: ignore[call-overload]
       for f in dataclasses.fields(Config)})
